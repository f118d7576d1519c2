{{/*
Names, labels and the shared pieces of every pod. Naming and labels follow the
Kubernetes recommended labels and the bitnami/common conventions.
*/}}

{{/*
The declarations: files/consumers.yaml, generated from consumers/ by `make
schemas` (each consumer's name, the group and topic it scales on, its ACLs; the gateway's
ACLs; the topics every deployment has), with kafka.topicPrefix in place of {prefix}. Use as:
fromYaml (include "symfonic-stream.declared" $)
*/}}
{{- define "symfonic-stream.declared" -}}
{{- .Files.Get "files/consumers.yaml" | replace "{prefix}" .Values.kafka.topicPrefix -}}
{{- end -}}

{{/* The consumers, in the declarations' order, space-separated. */}}
{{- define "symfonic-stream.consumerNames" -}}
{{- $names := list -}}
{{- range (fromYaml (include "symfonic-stream.declared" .)).consumers }}{{ $names = append $names .name }}{{ end -}}
{{- join " " $names -}}
{{- end -}}

{{/* One consumer's declaration, as YAML. Call with (dict "ctx" $ "consumer" name). */}}
{{- define "symfonic-stream.declaredConsumer" -}}
{{- range (fromYaml (include "symfonic-stream.declared" .ctx)).consumers }}{{ if eq .name $.consumer }}{{ toYaml . }}{{ end }}{{ end -}}
{{- end -}}

{{/*
The enabled Deployments, space-separated: the enabled consumers in their order, then the
gateway. Each has a metrics Service, a PodDisruptionBudget and a place in the monitor and the
NetworkPolicy. Use as: include "symfonic-stream.components" $ | splitList " " | compact
*/}}
{{- define "symfonic-stream.components" -}}
{{- $names := list -}}
{{- range $name := splitList " " (include "symfonic-stream.consumerNames" .) -}}
{{- if (index $.Values.consumers $name).enabled }}{{ $names = append $names $name }}{{ end -}}
{{- end -}}
{{- if .Values.gateway.enabled }}{{ $names = append $names "gateway" }}{{ end -}}
{{- join " " $names -}}
{{- end -}}

{{- define "symfonic-stream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "symfonic-stream.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-<suffix>, within the 63-character limit. Call with (dict "ctx" $ "suffix" "x"). */}}
{{- define "symfonic-stream.componentName" -}}
{{- printf "%s-%s" (include "symfonic-stream.fullname" .ctx | trunc 50 | trimSuffix "-") .suffix | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "symfonic-stream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every resource. Call with (dict "ctx" $ "component" "typed"); component may be empty. */}}
{{- define "symfonic-stream.labels" -}}
helm.sh/chart: {{ include "symfonic-stream.chart" .ctx }}
{{ include "symfonic-stream.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Values.image.tag | default .ctx.Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: symfonic-stream
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels. Call with (dict "ctx" $ "component" "typed"); component may be empty. */}}
{{- define "symfonic-stream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "symfonic-stream.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* metadata.annotations (indented for metadata, with a leading newline) from commonAnnotations plus extra ones. Call with (dict "ctx" $ "extra" map). */}}
{{- define "symfonic-stream.annotations" -}}
{{- $all := merge (deepCopy (.extra | default dict)) (deepCopy .ctx.Values.commonAnnotations) -}}
{{- with $all }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{- define "symfonic-stream.image" -}}
{{- $registry := .Values.image.registry | default .Values.global.imageRegistry -}}
{{- $repo := .Values.image.repository -}}
{{- if $registry }}{{ $repo = printf "%s/%s" $registry $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "symfonic-stream.imagePullSecrets" -}}
{{- $secrets := concat .Values.global.imagePullSecrets .Values.imagePullSecrets | uniq -}}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "symfonic-stream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "symfonic-stream.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "symfonic-stream.configMapName" -}}
{{- include "symfonic-stream.componentName" (dict "ctx" . "suffix" "config") -}}
{{- end -}}

{{- define "symfonic-stream.routingConfigMapName" -}}
{{- .Values.pauses.routing.existingConfigMap | default (include "symfonic-stream.componentName" (dict "ctx" . "suffix" "routing")) -}}
{{- end -}}

{{/* "true" when the pause router and the resume validator get a routing rules file. */}}
{{- define "symfonic-stream.routing.enabled" -}}
{{- $r := .Values.pauses.routing -}}
{{- if or $r.rules $r.defaultQueue $r.tenants $r.escalations $r.existingConfigMap }}true{{ end -}}
{{- end -}}

{{/* The routing rules file rendered from values (contract §7; format of symfonic_stream/processors/pauses/rules.py). */}}
{{- define "symfonic-stream.routing.file" -}}
{{- $r := .Values.pauses.routing -}}
{{- if $r.defaultQueue }}
default: {{ $r.defaultQueue | quote }}
{{- end }}
{{- with $r.tenants }}
tenants:
  {{- toYaml . | nindent 2 }}
{{- end }}
rules:
{{- if $r.rules }}
  {{- toYaml $r.rules | nindent 2 }}
{{- else }} []
{{- end }}
{{- with $r.escalations }}
escalations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "symfonic-stream.routing.key" -}}
{{- if .Values.pauses.routing.existingConfigMap }}{{ .Values.pauses.routing.existingConfigMapKey }}{{ else }}routing.yaml{{ end -}}
{{- end -}}

{{- define "symfonic-stream.routing.path" -}}
/etc/symfonic-stream/routing/{{ include "symfonic-stream.routing.key" . }}
{{- end -}}

{{- define "symfonic-stream.saslEnabled" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end -}}
{{- end -}}

{{- define "symfonic-stream.tlsEnabled" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{/* "true" when TLS files are mounted from kafka.tls.existingSecret. */}}
{{- define "symfonic-stream.tlsFiles" -}}
{{- if and (include "symfonic-stream.tlsEnabled" .) .Values.kafka.tls.existingSecret }}true{{ end -}}
{{- end -}}

{{- define "symfonic-stream.gateway.name" -}}
{{- include "symfonic-stream.componentName" (dict "ctx" . "suffix" "gateway") -}}
{{- end -}}

{{- define "symfonic-stream.gateway.configMapName" -}}
{{- include "symfonic-stream.componentName" (dict "ctx" . "suffix" "gateway-config") -}}
{{- end -}}

{{/* "true" when the gateway checks bearer tokens (gateway.auth.mode jwt). */}}
{{- define "symfonic-stream.gateway.jwt" -}}
{{- if eq .Values.gateway.auth.mode "jwt" }}true{{ end -}}
{{- end -}}

{{/* The KafkaUser (strimzi.enabled) a component signs in as, and the name of the User
Operator's Secret with its password: <prefix>-<component>. Call with (dict "ctx" $ "component" name). */}}
{{- define "symfonic-stream.kafkaUserName" -}}
{{- printf "%s-%s" .ctx.Values.kafka.topicPrefix .component -}}
{{- end -}}

{{/*
A KEDA TriggerAuthentication for the kafka scaler. Call with (dict "ctx" $ "name" name
"secret" name "key" key): the SASL password from that Secret key (with a SASL protocol), the
TLS files from kafka.tls.existingSecret. The user name is not a secret: KEDA reads it from the
scaled container's env (SYMFONIC_SASL_USERNAME), so it is always the pods' own.
*/}}
{{- define "symfonic-stream.kedaAuth" -}}
{{- $v := .ctx.Values }}
{{- $sasl := include "symfonic-stream.saslEnabled" .ctx }}
---
apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata:
  name: {{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "symfonic-stream.labels" (dict "ctx" .ctx "component" "") | nindent 4 }}
  {{- include "symfonic-stream.annotations" (dict "ctx" .ctx) }}
spec:
  {{- if $sasl }}
  env:
    - parameter: username
      name: SYMFONIC_SASL_USERNAME
  {{- end }}
  secretTargetRef:
    {{- if $sasl }}
    - parameter: password
      name: {{ .secret }}
      key: {{ .key }}
    {{- end }}
    {{- if include "symfonic-stream.tlsFiles" .ctx }}
    {{- with $v.kafka.tls.caKey }}
    - parameter: ca
      name: {{ $v.kafka.tls.existingSecret }}
      key: {{ . }}
    {{- end }}
    {{- with $v.kafka.tls.certKey }}
    - parameter: cert
      name: {{ $v.kafka.tls.existingSecret }}
      key: {{ . }}
    {{- end }}
    {{- with $v.kafka.tls.keyKey }}
    - parameter: key
      name: {{ $v.kafka.tls.existingSecret }}
      key: {{ . }}
    {{- end }}
    {{- end }}
{{- end -}}

{{/* "true" when the gateway is reachable from outside the cluster: an Ingress, or a
LoadBalancer or NodePort Service (SYMFONIC_GATEWAY_EXPOSED). */}}
{{- define "symfonic-stream.gateway.exposed" -}}
{{- $g := .Values.gateway -}}
{{- if or $g.ingress.enabled (has $g.service.type (list "LoadBalancer" "NodePort")) }}true{{ end -}}
{{- end -}}

{{/* "true" when the gateway mounts a JWKS file (from gateway.auth.jwks). */}}
{{- define "symfonic-stream.gateway.jwks" -}}
{{- $j := .Values.gateway.auth.jwks -}}
{{- if and (include "symfonic-stream.gateway.jwt" .) (or $j.existingConfigMap $j.existingSecret) }}true{{ end -}}
{{- end -}}

{{- define "symfonic-stream.gateway.jwksPath" -}}
/etc/symfonic-stream/jwks/{{ .Values.gateway.auth.jwks.key }}
{{- end -}}

{{/*
Every non-secret SYMFONIC_* setting, as ConfigMap data (strings). The SASL password is the
only secret and never appears here: it comes from kafka.sasl.existingSecret via secretKeyRef.
SYMFONIC_ROUTING_RULES is set only where the rules file is mounted (see "symfonic-stream.env").
*/}}
{{- define "symfonic-stream.configData" -}}
{{- $v := .Values -}}
SYMFONIC_BOOTSTRAP_SERVERS: {{ $v.kafka.bootstrapServers | quote }}
SYMFONIC_SECURITY_PROTOCOL: {{ $v.kafka.securityProtocol | quote }}
SYMFONIC_TOPIC_PREFIX: {{ $v.kafka.topicPrefix | quote }}
{{- if include "symfonic-stream.saslEnabled" . }}
SYMFONIC_SASL_MECHANISM: {{ $v.kafka.sasl.mechanism | quote }}
SYMFONIC_SASL_USERNAME: {{ $v.kafka.sasl.username | quote }}
{{- end }}
{{- if include "symfonic-stream.tlsFiles" . }}
{{- with $v.kafka.tls.caKey }}
SYMFONIC_SSL_CAFILE: {{ printf "%s/%s" $v.kafka.tls.mountPath . | quote }}
{{- end }}
{{- with $v.kafka.tls.certKey }}
SYMFONIC_SSL_CERTFILE: {{ printf "%s/%s" $v.kafka.tls.mountPath . | quote }}
{{- end }}
{{- with $v.kafka.tls.keyKey }}
SYMFONIC_SSL_KEYFILE: {{ printf "%s/%s" $v.kafka.tls.mountPath . | quote }}
{{- end }}
{{- end }}
SYMFONIC_GAP_TIMEOUT_S: {{ $v.guard.gapTimeoutSeconds | toString | quote }}
SYMFONIC_RUN_BUFFER_MAX: {{ $v.guard.runBufferMax | int64 | toString | quote }}
SYMFONIC_CLOSED_RUN_GRACE_S: {{ $v.guard.closedRunGraceSeconds | toString | quote }}
SYMFONIC_RUN_IDLE_TIMEOUT_S: {{ $v.guard.runIdleTimeoutSeconds | toString | quote }}
SYMFONIC_BUFFER_MAX_BYTES: {{ $v.guard.bufferMaxBytes | int64 | toString | quote }}
SYMFONIC_MAX_OUTPUT_BYTES: {{ $v.guard.maxOutputBytes | int64 | toString | quote }}
SYMFONIC_MAX_STATE_RECORD_BYTES: {{ $v.guard.maxStateRecordBytes | int64 | toString | quote }}
SYMFONIC_PUNCTUATE_BUDGET_MS: {{ $v.guard.punctuateBudgetMs | int64 | toString | quote }}
SYMFONIC_TENANT_QUEUES: {{ $v.pauses.tenantQueues | toString | quote }}
SYMFONIC_TICKET_MAX_LIFETIME_S: {{ $v.pauses.ticketMaxLifetimeSeconds | toString | quote }}
SYMFONIC_REVIEW_CLAIM_LEASE_S: {{ $v.pauses.claimLeaseSeconds | toString | quote }}
SYMFONIC_REVIEW_CLAIM_MAX_S: {{ $v.pauses.claimMaxSeconds | toString | quote }}
SYMFONIC_STREAM_TICKET_TOKENS: {{ $v.pauses.streamTicketTokens | toString | quote }}
SYMFONIC_MAX_ANSWER_BYTES: {{ $v.pauses.maxAnswerBytes | int64 | toString | quote }}
SYMFONIC_METRICS_PORT: {{ $v.metrics.port | int64 | toString | quote }}
SYMFONIC_LOG_LEVEL: {{ $v.logLevel | quote }}
SYMFONIC_IGNORED_VARIABLES: {{ join "," $v.ignoredVariables | quote }}
SYMFONIC_PARTITIONS: {{ $v.topics.partitions | int64 | toString | quote }}
SYMFONIC_REPLICATION_FACTOR: {{ $v.topics.replicationFactor | int64 | toString | quote }}
SYMFONIC_MIN_INSYNC_REPLICAS: {{ $v.topics.minInsyncReplicas | int64 | toString | quote }}
SYMFONIC_MAX_RECORD_BYTES: {{ $v.engine.maxRecordBytes | int64 | toString | quote }}
SYMFONIC_MAX_JSON_DEPTH: {{ $v.engine.maxJsonDepth | int64 | toString | quote }}
SYMFONIC_MAX_INTEGER: {{ $v.engine.maxInteger | toString | quote }}
SYMFONIC_BATCH_MAX_RECORDS: {{ $v.engine.batchMaxRecords | int64 | toString | quote }}
SYMFONIC_BATCH_MAX_BYTES: {{ $v.engine.batchMaxBytes | int64 | toString | quote }}
SYMFONIC_BATCH_MAX_LATENCY_MS: {{ $v.engine.batchMaxLatencyMs | int64 | toString | quote }}
SYMFONIC_GROUP_OFFSET_INTERVAL_MS: {{ $v.engine.groupOffsetIntervalMs | int64 | toString | quote }}
SYMFONIC_STATE_KEEP_S: {{ $v.engine.stateKeepS | toString | quote }}
SYMFONIC_LEAVE_GROUP_ON_STOP: {{ $v.engine.leaveGroupOnStop | toString | quote }}
{{- if ne $v.engine.stateStore "memory" }}
SYMFONIC_STATE_DIR: {{ include "symfonic-stream.stateDir" . | quote }}
SYMFONIC_STATE_CACHE_KEYS: {{ $v.engine.stateCacheKeys | int64 | toString | quote }}
{{- end }}
SYMFONIC_COMPRESSION: {{ $v.engine.compression | quote }}
SYMFONIC_EVENT_LOOP: {{ $v.engine.eventLoop | quote }}
SYMFONIC_TRANSACTION_TIMEOUT_MS: {{ $v.engine.transactionTimeoutMs | int64 | toString | quote }}
SYMFONIC_SHUTDOWN_TIMEOUT_S: {{ $v.engine.shutdownTimeoutSeconds | toString | quote }}
SYMFONIC_STARTUP_TIMEOUT_S: {{ $v.engine.startupTimeoutSeconds | toString | quote }}
SYMFONIC_ADMIN_TIMEOUT_S: {{ $v.engine.adminTimeoutSeconds | toString | quote }}
{{- with $v.schemaRegistry }}
{{- if .url }}
SYMFONIC_SCHEMA_REGISTRY_URL: {{ .url | quote }}
SYMFONIC_SCHEMA_REGISTRY_COMPATIBILITY: {{ .compatibility | quote }}
SYMFONIC_SCHEMA_REGISTRY_TIMEOUT_S: {{ .timeoutSeconds | toString | quote }}
SYMFONIC_SCHEMA_ID_FRAMING: {{ .idFraming | quote }}
{{- with .username }}
SYMFONIC_SCHEMA_REGISTRY_USERNAME: {{ . | quote }}
{{- end }}
{{- with .caFile }}
SYMFONIC_SCHEMA_REGISTRY_CAFILE: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The sha256 of everything the pods read from ConfigMaps, to roll them on change. */}}
{{- define "symfonic-stream.configChecksum" -}}
{{- printf "%s\n%s" (include "symfonic-stream.configData" .) (include "symfonic-stream.routing.file" . | trim) | sha256sum -}}
{{- end -}}

{{/*
The gateway's own settings (config.py's gateway_ fields), as ConfigMap data. They live in a
ConfigMap of their own, read by the gateway besides the shared one, so that changing them
rolls only the gateway: a consumer's restart costs a rebalance and a state restore. Its
secret, the HS256 key, comes from gateway.auth.jwtKey.existingSecret via secretKeyRef, and
SYMFONIC_GATEWAY_JWKS_FILE is set only where the JWKS is mounted (see "symfonic-stream.env").
*/}}
{{- define "symfonic-stream.gateway.configData" -}}
{{- $g := .Values.gateway -}}
SYMFONIC_GATEWAY_PORT: {{ $g.port | int64 | toString | quote }}
SYMFONIC_GATEWAY_HOST: {{ $g.host | quote }}
SYMFONIC_GATEWAY_LOOKBACK_S: {{ $g.lookbackSeconds | toString | quote }}
SYMFONIC_GATEWAY_CACHE_BYTES: {{ $g.cacheBytes | int64 | toString | quote }}
SYMFONIC_GATEWAY_MAX_RUNS: {{ $g.maxRuns | int64 | toString | quote }}
SYMFONIC_GATEWAY_RUN_WAIT_S: {{ $g.runWaitSeconds | toString | quote }}
SYMFONIC_GATEWAY_VERDICT_WAIT_S: {{ $g.verdictWaitSeconds | toString | quote }}
SYMFONIC_GATEWAY_HEARTBEAT_S: {{ $g.heartbeatSeconds | toString | quote }}
SYMFONIC_GATEWAY_SEND_TIMEOUT_S: {{ $g.sendTimeoutSeconds | toString | quote }}
SYMFONIC_GATEWAY_MAX_CLIENTS: {{ $g.maxClients | int64 | toString | quote }}
SYMFONIC_GATEWAY_MAX_CLIENTS_PER_TENANT: {{ $g.maxClientsPerTenant | int64 | toString | quote }}
SYMFONIC_GATEWAY_CORS_ORIGINS: {{ join "," $g.corsOrigins | quote }}
SYMFONIC_GATEWAY_CHAT_API: {{ $g.chatApi | quote }}
SYMFONIC_GATEWAY_MAX_CONNECTIONS: {{ $g.maxConnections | int64 | toString | quote }}
SYMFONIC_GATEWAY_MAX_HEADER_BYTES: {{ $g.maxHeaderBytes | int64 | toString | quote }}
SYMFONIC_GATEWAY_REQUEST_TIMEOUT_S: {{ $g.requestTimeoutSeconds | toString | quote }}
SYMFONIC_GATEWAY_REVIEW_REQUESTS_PER_MINUTE: {{ $g.reviewRequestsPerMinute | int64 | toString | quote }}
SYMFONIC_GATEWAY_AUTH: {{ $g.auth.mode | quote }}
SYMFONIC_GATEWAY_EXPOSED: {{ include "symfonic-stream.gateway.exposed" . | eq "true" | toString | quote }}
SYMFONIC_GATEWAY_ALLOW_UNAUTHENTICATED: {{ $g.auth.allowUnauthenticated | toString | quote }}
{{- if include "symfonic-stream.gateway.jwt" . }}
SYMFONIC_GATEWAY_UNSCOPED_TOKENS_READ: {{ $g.auth.unscopedTokensRead | toString | quote }}
SYMFONIC_GATEWAY_JWT_MAX_LIFETIME_S: {{ $g.auth.maxLifetimeSeconds | toString | quote }}
{{- with $g.auth.audience }}
SYMFONIC_GATEWAY_JWT_AUDIENCE: {{ . | quote }}
{{- end }}
{{- with $g.auth.issuer }}
SYMFONIC_GATEWAY_JWT_ISSUER: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The gateway's checksum: the shared settings and its own (no routing rules: it reads none). */}}
{{- define "symfonic-stream.gateway.configChecksum" -}}
{{- printf "%s\n%s" (include "symfonic-stream.configData" .) (include "symfonic-stream.gateway.configData" .) | sha256sum -}}
{{- end -}}

{{/* Startup and liveness on /healthz, readiness on /readyz, all on the metrics port (every Deployment's). */}}
{{- define "symfonic-stream.probes" -}}
{{- range $probe := list (list "startup" "/healthz") (list "liveness" "/healthz") (list "readiness" "/readyz") }}
{{- with index $.Values.probes (index $probe 0) }}
{{- if .enabled }}
{{ index $probe 0 }}Probe:
  httpGet:
    path: {{ index $probe 1 }}
    port: metrics
  periodSeconds: {{ .periodSeconds }}
  timeoutSeconds: {{ .timeoutSeconds }}
  failureThreshold: {{ .failureThreshold }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Container env and envFrom. Call with (dict "ctx" $ "configMap" name "routing" bool "extraEnv" list
"workers" int "user" name "gateway" bool): with "user" (strimzi.enabled) the SASL credentials are
that KafkaUser's; "workers" above 1 sets SYMFONIC_WORKERS (1, the default, sets nothing);
"gateway" adds the gateway's ConfigMap and its JWT key (secretKeyRef) or JWKS file.
*/}}
{{- define "symfonic-stream.env" -}}
{{- $v := .ctx.Values -}}
{{- $jwt := and .gateway (include "symfonic-stream.gateway.jwt" .ctx) -}}
envFrom:
  - configMapRef:
      name: {{ .configMap }}
  {{- if .gateway }}
  - configMapRef:
      name: {{ include "symfonic-stream.gateway.configMapName" .ctx }}
  {{- end }}
  {{- with $v.extraEnvFrom }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $sasl := include "symfonic-stream.saslEnabled" .ctx }}
{{- $workers := .workers | default 1 | int64 }}
{{- $static := and .consumer $v.engine.staticMembership }}
{{- $registryAuth := and $v.schemaRegistry.url $v.schemaRegistry.username }}
{{- if or $sasl .routing (gt $workers 1) $v.extraEnv .extraEnv $jwt $static $registryAuth }}
env:
  {{- if $static }}
  {{- /* Static membership (KIP-345): the pod's name, stable across container restarts. */}}
  - name: SYMFONIC_GROUP_INSTANCE_ID
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  {{- end }}
  {{- if and $sasl .user }}
  {{- /* Its own Strimzi KafkaUser (kafkausers.yaml): the User Operator's Secret of that name. */}}
  - name: SYMFONIC_SASL_USERNAME
    value: {{ .user | quote }}
  - name: SYMFONIC_SASL_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .user }}
        key: password
  {{- else if $sasl }}
  - name: SYMFONIC_SASL_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ $v.kafka.sasl.existingSecret }}
        key: {{ $v.kafka.sasl.passwordKey }}
  {{- end }}
  {{- if $registryAuth }}
  - name: SYMFONIC_SCHEMA_REGISTRY_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ $v.schemaRegistry.existingSecret }}
        key: {{ $v.schemaRegistry.passwordKey }}
  {{- end }}
  {{- if .routing }}
  - name: SYMFONIC_ROUTING_RULES
    value: {{ include "symfonic-stream.routing.path" .ctx | quote }}
  {{- end }}
  {{- if gt $workers 1 }}
  - name: SYMFONIC_WORKERS
    value: {{ $workers | toString | quote }}
  {{- end }}
  {{- if and $jwt $v.gateway.auth.jwtKey.existingSecret }}
  - name: SYMFONIC_GATEWAY_JWT_KEY
    valueFrom:
      secretKeyRef:
        name: {{ $v.gateway.auth.jwtKey.existingSecret }}
        key: {{ $v.gateway.auth.jwtKey.key }}
  {{- end }}
  {{- if and .gateway (include "symfonic-stream.gateway.jwks" .ctx) }}
  - name: SYMFONIC_GATEWAY_JWKS_FILE
    value: {{ include "symfonic-stream.gateway.jwksPath" .ctx | quote }}
  {{- end }}
  {{- with $v.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with .extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Container volumeMounts. Call with (dict "ctx" $ "routing" bool "jwks" bool). */}}
{{- define "symfonic-stream.volumeMounts" -}}
{{- $v := .ctx.Values -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- if and .consumer (ne $v.engine.stateStore "memory") }}
  - name: state
    mountPath: {{ include "symfonic-stream.stateDir" .ctx }}
  {{- end }}
  {{- if include "symfonic-stream.tlsFiles" .ctx }}
  - name: kafka-tls
    mountPath: {{ $v.kafka.tls.mountPath }}
    readOnly: true
  {{- end }}
  {{- if .routing }}
  - name: routing-rules
    mountPath: /etc/symfonic-stream/routing
    readOnly: true
  {{- end }}
  {{- if .jwks }}
  - name: gateway-jwks
    mountPath: {{ dir (include "symfonic-stream.gateway.jwksPath" .ctx) }}
    readOnly: true
  {{- end }}
  {{- with $v.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* Pod volumes. Call with (dict "ctx" $ "routing" bool "routingConfigMap" name "jwks" bool). */}}
{{- define "symfonic-stream.volumes" -}}
{{- $v := .ctx.Values -}}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: {{ $v.tmpSizeLimit }}
  {{- if and .consumer (eq $v.engine.stateStore "emptyDir") }}
  - name: state
    emptyDir:
      sizeLimit: {{ $v.engine.stateVolumeSize }}
  {{- end }}
  {{- if include "symfonic-stream.tlsFiles" .ctx }}
  - name: kafka-tls
    secret:
      secretName: {{ $v.kafka.tls.existingSecret }}
      defaultMode: 0440
      items:
        {{- range $key := list $v.kafka.tls.caKey $v.kafka.tls.certKey $v.kafka.tls.keyKey }}
        {{- if $key }}
        - key: {{ $key }}
          path: {{ $key }}
        {{- end }}
        {{- end }}
  {{- end }}
  {{- if .routing }}
  - name: routing-rules
    configMap:
      name: {{ .routingConfigMap }}
      items:
        - key: {{ include "symfonic-stream.routing.key" .ctx }}
          path: {{ include "symfonic-stream.routing.key" .ctx }}
  {{- end }}
  {{- if .jwks }}
  {{- $j := $v.gateway.auth.jwks }}
  - name: gateway-jwks
    {{- if $j.existingSecret }}
    secret:
      secretName: {{ $j.existingSecret }}
      defaultMode: 0440
      items:
        - key: {{ $j.key }}
          path: {{ $j.key }}
    {{- else }}
    configMap:
      name: {{ $j.existingConfigMap }}
      items:
        - key: {{ $j.key }}
          path: {{ $j.key }}
    {{- end }}
  {{- end }}
  {{- with $v.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* The effective autoscaling bounds of one consumer. Call with (dict "ctx" $ "consumer" name); returns YAML. */}}
{{- define "symfonic-stream.autoscaling" -}}
{{- $a := .ctx.Values.autoscaling -}}
{{- $o := (index .ctx.Values.consumers .consumer).autoscaling | default dict -}}
minReplicas: {{ ternary $o.minReplicas $a.minReplicas (hasKey $o "minReplicas") | int64 }}
maxReplicas: {{ ternary $o.maxReplicas $a.maxReplicas (hasKey $o "maxReplicas") | int64 }}
lagThreshold: {{ ternary $o.lagThreshold $a.keda.lagThreshold (hasKey $o "lagThreshold") | int64 }}
{{- end -}}

{{- define "symfonic-stream.autoscalingEnabled" -}}
{{- if or .Values.autoscaling.hpa.enabled .Values.autoscaling.keda.enabled }}true{{ end -}}
{{- end -}}


{{/* Scheduling fields of a consumer pod. Call with (dict "ctx" $ "component" name). */}}
{{- define "symfonic-stream.scheduling" -}}
{{- $v := .ctx.Values -}}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if eq $v.podAntiAffinityPreset "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "symfonic-stream.selectorLabels" . | nindent 14 }}
{{- else if eq $v.podAntiAffinityPreset "hard" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "symfonic-stream.selectorLabels" . | nindent 12 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  - {{- toYaml (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" (fromYaml (include "symfonic-stream.selectorLabels" $))))) | nindent 4 }}
  {{- end }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* Fail the render on inconsistent values the schema cannot express. */}}
{{- define "symfonic-stream.validate" -}}
{{- $v := .Values -}}
{{- if and (eq $v.schemaRegistry.idFraming "header") (not $v.schemaRegistry.url) -}}
{{- fail "schemaRegistry.idFraming: header needs schemaRegistry.url (the ids are the registry's)." -}}
{{- end -}}
{{- if and $v.schemaRegistry.url $v.schemaRegistry.username (not $v.schemaRegistry.existingSecret) -}}
{{- fail "schemaRegistry.existingSecret (the registry password's Secret) is required with schemaRegistry.username." -}}
{{- end -}}
{{- if and $v.autoscaling.hpa.enabled $v.autoscaling.keda.enabled -}}
{{- fail "autoscaling.hpa.enabled and autoscaling.keda.enabled are mutually exclusive: both would scale the same Deployments. Turn one of them off." -}}
{{- end -}}
{{- $partitions := $v.topics.partitions | int64 -}}
{{- range $name := splitList " " (include "symfonic-stream.consumerNames" $) -}}
{{- $c := index $v.consumers $name -}}
{{- if $c.enabled -}}
{{- $workers := $c.workers | default 1 | int64 -}}
{{- if gt ($c.replicaCount | int64) $partitions -}}
{{- fail (printf "consumers.%s.replicaCount (%d) exceeds topics.partitions (%d): a consumer group cannot use more members than partitions." $name ($c.replicaCount | int64) $partitions) -}}
{{- end -}}
{{- if and (gt $workers 1) (not (include "symfonic-stream.autoscalingEnabled" $)) (gt (mul ($c.replicaCount | int64) $workers) $partitions) -}}
{{- fail (printf "consumers.%s.replicaCount (%d) times its workers (%d) exceeds topics.partitions (%d): every worker is a member of the consumer group, which cannot use more members than partitions." $name ($c.replicaCount | int64) $workers $partitions) -}}
{{- end -}}
{{- if include "symfonic-stream.autoscalingEnabled" $ -}}
{{- $as := fromYaml (include "symfonic-stream.autoscaling" (dict "ctx" $ "consumer" $name)) -}}
{{- if lt ($as.minReplicas | int64) 1 -}}
{{- fail (printf "autoscaling: minReplicas of %s must be at least 1 (transaction markers leave a lag of 1 per partition, so scale-to-zero would flap)." $name) -}}
{{- end -}}
{{- if gt ($as.maxReplicas | int64) $partitions -}}
{{- fail (printf "autoscaling: maxReplicas of %s (%d) exceeds topics.partitions (%d): a consumer group cannot use more members than partitions." $name ($as.maxReplicas | int64) $partitions) -}}
{{- end -}}
{{- if and (gt $workers 1) (gt (mul ($as.maxReplicas | int64) $workers) $partitions) -}}
{{- fail (printf "autoscaling: maxReplicas of %s (%d) times its workers (%d) exceeds topics.partitions (%d): every worker is a member of the consumer group, which cannot use more members than partitions." $name ($as.maxReplicas | int64) $workers $partitions) -}}
{{- end -}}
{{- if gt ($as.minReplicas | int64) ($as.maxReplicas | int64) -}}
{{- fail (printf "autoscaling: minReplicas of %s (%d) exceeds its maxReplicas (%d)." $name ($as.minReplicas | int64) ($as.maxReplicas | int64)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if include "symfonic-stream.saslEnabled" . -}}
{{- if not $v.kafka.sasl.mechanism -}}
{{- fail (printf "kafka.sasl.mechanism is required when kafka.securityProtocol is %s." $v.kafka.securityProtocol) -}}
{{- end -}}
{{- /* With strimzi.enabled each consumer has its own user; only the topics Job needs these. */ -}}
{{- $shared := or (not $v.strimzi.enabled) (eq $v.topics.management "job") -}}
{{- if and $shared (not $v.kafka.sasl.username) -}}
{{- fail (printf "kafka.sasl.username is required when kafka.securityProtocol is %s." $v.kafka.securityProtocol) -}}
{{- end -}}
{{- if and $shared (not $v.kafka.sasl.existingSecret) -}}
{{- fail (printf "kafka.sasl.existingSecret (a Secret holding the password under kafka.sasl.passwordKey) is required when kafka.securityProtocol is %s." $v.kafka.securityProtocol) -}}
{{- end -}}
{{- end -}}
{{- if ne (empty $v.kafka.tls.certKey) (empty $v.kafka.tls.keyKey) -}}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey go together: set both for mutual TLS, or neither." -}}
{{- end -}}
{{- if and $v.kafka.tls.existingSecret (not $v.kafka.tls.caKey) (not $v.kafka.tls.certKey) -}}
{{- fail "kafka.tls.existingSecret is set but neither kafka.tls.caKey nor kafka.tls.certKey names a file in it." -}}
{{- end -}}
{{- if and $v.kafka.tls.existingSecret (not (include "symfonic-stream.tlsEnabled" .)) -}}
{{- fail (printf "kafka.tls.existingSecret is set but kafka.securityProtocol is %s: use SSL or SASL_SSL." $v.kafka.securityProtocol) -}}
{{- end -}}
{{- if and (eq $v.topics.management "strimzi") (not $v.topics.strimzi.clusterName) -}}
{{- fail "topics.strimzi.clusterName (the Strimzi Kafka cluster, label strimzi.io/cluster) is required when topics.management is strimzi." -}}
{{- end -}}
{{- if ge ($v.engine.shutdownTimeoutSeconds | float64) ($v.terminationGracePeriodSeconds | float64) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed engine.shutdownTimeoutSeconds (%v), or Kubernetes kills consumers mid-commit." $v.terminationGracePeriodSeconds $v.engine.shutdownTimeoutSeconds) -}}
{{- end -}}
{{- if gt ($v.topics.minInsyncReplicas | int64) ($v.topics.replicationFactor | int64) -}}
{{- fail (printf "topics.minInsyncReplicas (%d) cannot exceed topics.replicationFactor (%d)." ($v.topics.minInsyncReplicas | int64) ($v.topics.replicationFactor | int64)) -}}
{{- end -}}
{{- if $v.gateway.enabled -}}
{{- include "symfonic-stream.validateGateway" . -}}
{{- end -}}
{{- end -}}

{{/* The gateway's cross-field rules (config.py's own check, and what an SSE proxy needs). */}}
{{- define "symfonic-stream.validateGateway" -}}
{{- $g := .Values.gateway -}}
{{- $jwks := $g.auth.jwks -}}
{{- if and $jwks.existingConfigMap $jwks.existingSecret -}}
{{- fail "gateway.auth.jwks.existingConfigMap and gateway.auth.jwks.existingSecret are alternatives: name the one that holds the JWKS." -}}
{{- end -}}
{{- if and (include "symfonic-stream.gateway.jwt" .) (eq (empty $g.auth.jwtKey.existingSecret) (and (empty $jwks.existingConfigMap) (empty $jwks.existingSecret))) -}}
{{- fail "gateway.auth.mode jwt needs exactly one of gateway.auth.jwtKey.existingSecret (a Secret with the HS256 key) and gateway.auth.jwks (a ConfigMap or Secret with the JWKS)." -}}
{{- end -}}
{{- if and (include "symfonic-stream.gateway.jwt" .) (not $g.auth.audience) -}}
{{- fail "gateway.auth.audience is required with gateway.auth.mode jwt (the gateway refuses to start without SYMFONIC_GATEWAY_JWT_AUDIENCE): without it a token its issuer minted for another service reads the runs, behind any Ingress, mesh or route." -}}
{{- end -}}
{{- if include "symfonic-stream.gateway.exposed" . -}}
{{- if and (eq $g.auth.mode "none") (not $g.auth.allowUnauthenticated) -}}
{{- fail "gateway.auth.mode none serves every tenant's runs to whoever reaches the gateway, and it is exposed (gateway.ingress.enabled, or a LoadBalancer or NodePort gateway.service.type): use mode jwt, or set gateway.auth.allowUnauthenticated to true to mean it." -}}
{{- end -}}
{{- end -}}
{{- if $g.ingress.enabled -}}
{{- if not $g.ingress.hosts -}}
{{- fail "gateway.ingress.enabled needs at least one gateway.ingress.hosts entry: an Ingress rule without a host would take every host of its class." -}}
{{- end -}}
{{- $timeout := get ($g.ingress.annotations | default dict) "nginx.ingress.kubernetes.io/proxy-read-timeout" | toString -}}
{{- if and (regexMatch "^[0-9]+$" $timeout) (le ($timeout | float64) ($g.heartbeatSeconds | float64)) -}}
{{- fail (printf "gateway.ingress.annotations: nginx.ingress.kubernetes.io/proxy-read-timeout (%s s) must exceed gateway.heartbeatSeconds (%v s), or the proxy cuts every quiet stream." $timeout $g.heartbeatSeconds) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The persistent state store (values engine.stateStore): where it is mounted, and whether the
consumers run as StatefulSets (one claim per pod) or Deployments.
*/}}
{{- define "symfonic-stream.stateDir" -}}
/var/lib/symfonic-stream/state
{{- end }}

{{- define "symfonic-stream.workloadKind" -}}
{{- ternary "StatefulSet" "Deployment" (eq .Values.engine.stateStore "persistentVolumeClaim") -}}
{{- end }}
