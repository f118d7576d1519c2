{{/*
A pre-install/pre-upgrade hook Job running one symfonic-stream command before any consumer
starts (topics-job.yaml, schemas-job.yaml). Hooks run before the release's ordinary resources
exist, so the Job gets its own copy of the settings as a hook ConfigMap (weight -10, created
first), uses only Secrets that already exist, and runs under an existing ServiceAccount
(serviceAccount.name with create=false) or the namespace's default one. Call with (dict "ctx"
$ "component" name "container" name "args" list "job" values "weight" string).
*/}}
{{- define "symfonic-stream.hookJob" -}}
{{- $ctx := .ctx }}
{{- $component := .component }}
{{- $container := .container }}
{{- $args := .args }}
{{- $weight := .weight }}
{{- $name := include "symfonic-stream.componentName" (dict "ctx" $ctx "suffix" $component) }}
{{- $routing := include "symfonic-stream.routing.enabled" $ctx }}
{{- $job := .job }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "symfonic-stream.labels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: "-10"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
    {{- with $ctx.Values.commonAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
data:
  {{- include "symfonic-stream.configData" $ctx | nindent 2 }}
  {{- if and $routing (not $ctx.Values.pauses.routing.existingConfigMap) }}
  routing.yaml: |
    {{- include "symfonic-stream.routing.file" $ctx | trim | nindent 4 }}
  {{- end }}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "symfonic-stream.labels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: {{ $weight | quote }}
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
    {{- with $ctx.Values.commonAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $job.annotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  backoffLimit: {{ $job.backoffLimit }}
  activeDeadlineSeconds: {{ $job.activeDeadlineSeconds }}
  template:
    metadata:
      labels:
        {{- include "symfonic-stream.labels" (dict "ctx" $ctx "component" $component) | nindent 8 }}
    spec:
      restartPolicy: Never
      {{- if not $ctx.Values.serviceAccount.create }}
      serviceAccountName: {{ include "symfonic-stream.serviceAccountName" $ctx }}
      {{- end }}
      automountServiceAccountToken: false
      # No Service links (see deployment.yaml).
      enableServiceLinks: false
      {{- with include "symfonic-stream.imagePullSecrets" $ctx }}{{- . | trim | nindent 6 }}{{- end }}
      securityContext:
        {{- toYaml $ctx.Values.podSecurityContext | nindent 8 }}
      {{- with $ctx.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $ctx.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $ctx.Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      containers:
        - name: {{ $container }}
          image: {{ include "symfonic-stream.image" $ctx }}
          imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
          args: {{ toJson $args }}
          {{- include "symfonic-stream.env" (dict "ctx" $ctx "configMap" $name "routing" $routing "extraEnv" list) | nindent 10 }}
          resources:
            {{- toYaml $job.resources | nindent 12 }}
          securityContext:
            {{- toYaml $ctx.Values.containerSecurityContext | nindent 12 }}
          {{- include "symfonic-stream.volumeMounts" (dict "ctx" $ctx "routing" $routing) | nindent 10 }}
      {{- include "symfonic-stream.volumes" (dict "ctx" $ctx "routing" $routing "routingConfigMap" ($ctx.Values.pauses.routing.existingConfigMap | default $name)) | nindent 6 }}
{{- end -}}
