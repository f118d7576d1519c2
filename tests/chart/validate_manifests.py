"""Validate rendered chart manifests offline against the Kubernetes OpenAPI schemas.

    python tests/chart/validate_manifests.py --kube-version 1.28.0 [--kube-version ...] FILE...

Every document of every FILE (`helm template` output) is validated strictly (unknown fields
are errors) with kubernetes-validate's bundled schemas for each version. Custom resources
(CRD kinds, listed by name below) have no schema there and are skipped; any other kind
without a schema is an error, not a skip. On top of the schemas, every pod template is
checked for the chart's security promises (and for no Service links), and no env var may
carry a literal secret; KEDA's scalers must sign in to Kafka as the pods they scale. The
settings ConfigMaps must load with the application's own settings model, and rendered
routing rules files must parse with its own rules parser; the gateway's ConfigMap loads on top
of the shared one, as its pods read them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from symfonic_stream.config import ENV_PREFIX, ConfigError, load_settings
from symfonic_stream.processors.pauses.rules import RulesError, parse_rules

#: Custom resources: validated by their operators' webhooks, not by core Kubernetes schemas.
CRD_KINDS = frozenset(
    {
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ScaledObject",
        "TriggerAuthentication",
        "KafkaTopic",
        "KafkaUser",
    }
)


def pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    kind = doc.get("kind")
    if kind == "Pod":
        return [doc["spec"]]
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}:
        return [doc["spec"]["template"]["spec"]]
    if kind == "CronJob":
        return [doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    return []


def security_problems(doc: dict[str, Any]) -> list[str]:
    """The chart's promises for every pod: non-root, read-only root, no capabilities, ..."""
    problems = []
    for spec in pod_specs(doc):
        pod_sc = spec.get("securityContext") or {}
        if spec.get("enableServiceLinks") is not False:
            # Service links of a Service named symfonic-* are SYMFONIC_* variables, which
            # config.py refuses as unknown settings.
            problems.append("pod enableServiceLinks is not false")
        if pod_sc.get("runAsNonRoot") is not True:
            problems.append("pod securityContext.runAsNonRoot is not true")
        if (pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            problems.append("pod seccompProfile is not RuntimeDefault")
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            name = container["name"]
            sc = container.get("securityContext") or {}
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{name}: readOnlyRootFilesystem is not true")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{name}: allowPrivilegeEscalation is not false")
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                problems.append(f"{name}: capabilities do not drop ALL")
            if sc.get("runAsNonRoot") is not True:
                problems.append(f"{name}: runAsNonRoot is not true")
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
            if "emptyDir" not in volumes.get(mounts.get("/tmp", ""), {}):
                problems.append(f"{name}: /tmp is not an emptyDir")
            for env in container.get("env") or []:
                upper = env["name"].upper()
                # ..._KEY: SYMFONIC_GATEWAY_JWT_KEY (the HS256 secret), API keys
                secretish = upper.endswith("_KEY") or any(
                    w in upper for w in ("PASSWORD", "SECRET", "TOKEN")
                )
                if secretish and "value" in env:
                    problems.append(f"{name}: env {env['name']} has a literal value")
    return problems


def _named(docs: list[Any], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs
            if isinstance(d, dict) and d.get("kind") == kind}


def _env_source(container: dict[str, Any], name: str, maps: dict[str, Any]) -> Any:
    """Where ``container`` gets the variable ``name``: its ``env`` entry (which wins), else
    the ConfigMap of its ``envFrom`` that holds it, else None."""
    for item in container.get("env") or []:
        if item["name"] == name:
            return item.get("valueFrom") or {"value": item.get("value")}
    for source in container.get("envFrom") or []:
        data = maps.get((source.get("configMapRef") or {}).get("name"), {}).get("data") or {}
        if name in data:
            return {"value": data[name]}
    return None


def keda_problems(docs: list[Any]) -> list[str]:
    """KEDA's scaler must sign in as the pods it scales (issue 33: with Strimzi users it took
    each consumer's user name but the shared user's password). For each ScaledObject's
    TriggerAuthentication: the ``password`` comes from the Secret key the scaled container's
    SYMFONIC_SASL_PASSWORD comes from, and each ``env`` parameter names a variable the
    container has (KEDA reads it there)."""
    auths, maps = _named(docs, "TriggerAuthentication"), _named(docs, "ConfigMap")
    workloads = {**_named(docs, "Deployment"), **_named(docs, "StatefulSet")}
    problems = []
    for name, scaled in _named(docs, "ScaledObject").items():
        target = scaled["spec"]["scaleTargetRef"]
        workload = workloads[target["name"]]
        if target.get("kind", "Deployment") != workload["kind"]:
            problems.append(f"ScaledObject/{name}: scales a {target.get('kind')}, "
                            f"{target['name']} is a {workload['kind']}")
        pod = workload["spec"]["template"]["spec"]
        container = pod["containers"][0]
        for trigger in scaled["spec"]["triggers"]:
            ref = (trigger.get("authenticationRef") or {}).get("name")
            if ref is None:
                continue
            if ref not in auths:
                problems.append(f"ScaledObject/{name}: no TriggerAuthentication {ref}")
                continue
            spec = auths[ref]["spec"]
            keda = {t["parameter"]: {"secretKeyRef": {"name": t["name"], "key": t["key"]}}
                    for t in spec.get("secretTargetRef") or []}
            keda.update({e["parameter"]: _env_source(container, e["name"], maps)
                         for e in spec.get("env") or []})
            if "sasl" not in trigger["metadata"]:
                continue
            for parameter, variable in (("username", "SYMFONIC_SASL_USERNAME"),
                                        ("password", "SYMFONIC_SASL_PASSWORD")):
                mine = _env_source(container, variable, maps)
                if keda.get(parameter) != mine:
                    problems.append(f"ScaledObject/{name}: KEDA's {parameter} is "
                                    f"{keda.get(parameter)}, the pod's {variable} {mine}")
    return problems


def _settings_problems(data: dict[str, str], tmp: Path) -> list[str]:
    overrides: dict[str, object] = {
        key.removeprefix(ENV_PREFIX).lower(): value for key, value in data.items()
    }
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "schema_registry_cafile"):
        if name in overrides:  # mounted from a Secret in the pod: stand in a file here
            (tmp / name).write_text("PEM")
            overrides[name] = str(tmp / name)
    if str(overrides.get("security_protocol", "")).startswith("SASL_"):
        overrides["sasl_password"] = "from-the-secret"
    if "schema_registry_username" in overrides:  # its password: a secretKeyRef of the pod
        overrides["schema_registry_password"] = "from-the-secret"
    if overrides.get("gateway_auth") == "jwt":
        # The key (secretKeyRef) or the JWKS file (a mount) comes from the pod spec; the
        # chart's own check makes it exactly one of them.
        overrides["gateway_jwt_key"] = "a-key-from-the-secret-32-bytes-or-more"
    try:
        load_settings(**overrides)
    except ConfigError as exc:
        return [f"settings do not load: {exc}"]
    return []


def app_problems(doc: dict[str, Any], tmp: Path, shared: dict[str, str]) -> list[str]:
    """ConfigMaps the application reads: settings via config.py, routing rules via rules.py.
    ``shared`` is the release's settings ConfigMap, which the gateway reads under its own."""
    if doc.get("kind") != "ConfigMap":
        return []
    data = doc.get("data") or {}
    problems = []
    if f"{ENV_PREFIX}BOOTSTRAP_SERVERS" in data:
        problems += _settings_problems(data, tmp)
    elif f"{ENV_PREFIX}GATEWAY_PORT" in data:
        if not shared:
            problems.append("the gateway's settings without the shared settings ConfigMap")
        else:
            problems += _settings_problems({**shared, **data}, tmp)
    if "routing.yaml" in data:
        try:
            parse_rules(data["routing.yaml"], "routing.yaml")
        except RulesError as exc:
            problems.append(f"routing rules do not parse: {exc}")
    return problems


def _is_shared_settings(doc: Any) -> bool:
    """The release's settings ConfigMap (not the topics Job's hook copy of it)."""
    if not isinstance(doc, dict) or doc.get("kind") != "ConfigMap":
        return False
    hook = "helm.sh/hook" in (doc.get("metadata", {}).get("annotations") or {})
    return not hook and f"{ENV_PREFIX}BOOTSTRAP_SERVERS" in (doc.get("data") or {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kube-version", action="append", required=True, dest="versions")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()

    failures = 0
    tmp = Path(tempfile.mkdtemp(prefix="chart-validate-"))
    for path in args.files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if not docs:
            print(f"ERROR {path}: no manifests")
            failures += 1
            continue
        before = failures
        shared = next((d["data"] for d in docs if _is_shared_settings(d)), {})
        checked: Counter[str] = Counter()
        skipped: Counter[str] = Counter()
        for problem in keda_problems(docs):
            print(f"ERROR {path.name}: {problem}")
            failures += 1
        for doc in docs:
            if not isinstance(doc, dict):
                print(f"ERROR {path}: a document is not a mapping: {str(doc)[:80]!r}")
                failures += 1
                continue
            kind = doc.get("kind", "?")
            ident = f"{path.name}: {kind}/{doc.get('metadata', {}).get('name', '?')}"
            for problem in security_problems(doc) + app_problems(doc, tmp, shared):
                print(f"ERROR {ident}: {problem}")
                failures += 1
            if kind in CRD_KINDS:
                skipped[kind] += 1
                continue
            for version in args.versions:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    where = ".".join(str(p) for p in exc.path)
                    print(f"ERROR {ident} (k8s {version}): {where}: {exc.message}")
                    failures += 1
                except kubernetes_validate.SchemaNotFoundError as exc:
                    print(f"ERROR {ident} (k8s {version}): no schema: {exc.message}")
                    failures += 1
            checked[kind] += 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(checked.items()))
        crds = ", ".join(f"{n} {k}" for k, n in sorted(skipped.items())) or "none"
        status = "ok" if failures == before else "FAILED"
        versions = ", ".join(args.versions)
        print(f"{status} {path.name}: {summary} (k8s {versions}); CRDs skipped: {crds}")
    if failures:
        print(f"{failures} problem(s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
