"""Chart checks that need no helm: settings coverage, schema strictness, docs, Dockerfile.

The rendering checks (lint, template, helm-unittest, Kubernetes schemas) are `make
chart-check`; these keep the chart in step with the code and run in plain pytest.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from symfonic_stream.config import ENV_PREFIX, GATEWAY_ROUTES, Settings

from . import values_doc

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "symfonic-stream"
SCHEMA = yaml.safe_load((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
SCENARIOS = sorted((CHART / "ci").glob("*-values.yaml"))


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)
    ]


def _templates_text() -> str:
    return "\n".join(p.read_text() for p in sorted((CHART / "templates").rglob("*")) if p.is_file())


def test_every_setting_reaches_the_pods() -> None:
    """Each SYMFONIC_* setting of config.py is set by the chart, and no other is."""
    settings = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    in_chart = set(re.findall(r"\bSYMFONIC_[A-Z0-9_]+\b", _templates_text()))
    assert settings - in_chart == set(), "settings the chart never sets"
    assert in_chart - settings == set(), "variables the chart sets that config.py does not read"


def test_the_password_only_comes_from_a_secret() -> None:
    text = _templates_text()
    block = text[text.index("- name: SYMFONIC_SASL_PASSWORD") :][:200]
    assert "secretKeyRef" in block
    assert "password" not in DEFAULTS["kafka"]["sasl"]


def test_the_gateway_jwt_key_only_comes_from_a_secret() -> None:
    text = _templates_text()
    assert text.count("SYMFONIC_GATEWAY_JWT_KEY") == 1, "set in one place only"
    block = text[text.index("- name: SYMFONIC_GATEWAY_JWT_KEY") :][:200]
    assert "secretKeyRef" in block
    assert set(DEFAULTS["gateway"]["auth"]["jwtKey"]) == {"existingSecret", "key"}


def test_defaults_and_every_scenario_match_the_schema() -> None:
    assert _errors(DEFAULTS) == []
    for scenario in SCENARIOS:
        assert _errors(_merge(DEFAULTS, yaml.safe_load(scenario.read_text()))) == [], scenario.name


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"kafka": {"bootstrapServer": "x:9092"}}, "'bootstrapServer' was unexpected"),
        ({"kafka": {"sasl": {"password": "hunter2"}}}, "'password' was unexpected"),
        ({"consumers": {"typed": {"replicas": 2}}}, "'replicas' was unexpected"),
        ({"consumers": {"typed": {"replicaCount": "2"}}}, "'2' is not of type 'integer'"),
        ({"topics": {"partitions": 1.5}}, "1.5 is not of type 'integer'"),
        ({"autoscaling": {"minReplicas": 0}}, "0 is less than the minimum of 1"),
        ({"kafka": {"securityProtocol": "TLS"}}, "'TLS' is not one of"),
        ({"metrics": {"port": 0}}, "0 is less than the minimum of 1"),
        ({"containerSecurityContext": {"readOnlyRootFileSystem": True}}, "was unexpected"),
        ({"gateway": {"auth": {"jwtKey": {"value": "s3cret"}}}}, "'value' was unexpected"),
        ({"gateway": {"auth": {"mode": "basic"}}}, "'basic' is not one of"),
        ({"gateway": {"port": 0}}, "0 is less than the minimum of 1"),
        ({"gateway": {"corsOrigins": "https://a,https://b"}}, "is not of type 'array'"),
        ({"gateway": {"ingress": {"hosts": [{"name": "a.example.com"}]}}}, "'host' is a required"),
        ({"gateway": {"chatApi": "/v1/chat"}}, "should not be valid under"),
        ({"gateway": {"chatApi": "api/chat"}}, "does not match"),
    ],
)
def test_the_schema_rejects_unknown_keys_and_wrong_types(
    override: dict[str, Any], expected: str
) -> None:
    errors = _errors(_merge(DEFAULTS, override))
    assert any(expected in error for error in errors), errors


def test_the_schema_refuses_the_chat_api_config_py_refuses() -> None:
    """gateway.chatApi's rules are SYMFONIC_GATEWAY_CHAT_API's (config.py), checked by the
    chart before a pod would fail at start."""
    from pydantic import ValidationError

    rule = SCHEMA["properties"]["gateway"]["properties"]["chatApi"]
    assert rule["not"]["pattern"] == f"^/({'|'.join(GATEWAY_ROUTES)})(/|$)"
    for value in ("/api/chat", "/agents/chat", "/v10/chat", "/reviews", "/v1", "/v1/chat",
                  "/static/x", "api/chat", "/api/chat/", "/a b"):
        chart_refuses = bool(_errors(_merge(DEFAULTS, {"gateway": {"chatApi": value}})))
        try:
            Settings(gateway_chat_api=value)
            config_refuses = False
        except ValidationError:
            config_refuses = True
        assert chart_refuses == config_refuses, value


def test_every_object_in_the_schema_is_closed() -> None:
    """additionalProperties: false on every object with properties (global is shared)."""
    open_objects: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                open_objects.append(where or "/")
            for key, child in node.items():
                walk(child, f"{where}/{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{where}/{index}")

    walk(SCHEMA, "")
    assert open_objects == ["/properties/global"]


def test_every_value_is_documented_and_the_tables_are_current() -> None:
    docs = values_doc.documented_keys()
    assert values_doc.undocumented(docs, DEFAULTS) == []
    table = values_doc.table()
    for target in values_doc.TARGETS:
        assert table in target.read_text(), f"{target}: run `make chart-docs`"


#: Schema keys with no default in values.yaml: optional Kubernetes fields and overrides.
OPTIONAL_KEYS = re.compile(
    r"^(consumers\.\w+\.autoscaling|consumers\.\w+\.resources|topics\.ensureJob\.resources"
    r"|schemaRegistry\.registerJob\.resources|gateway\.resources"
    r"|podSecurityContext|containerSecurityContext|updateStrategy)\."
)


def test_values_yaml_shows_every_option_of_the_schema() -> None:
    """Every key the schema accepts has a (documented) default in values.yaml."""

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        return SCHEMA["$defs"][ref.rsplit("/", 1)[-1]] if ref else schema

    def walk(values: Any, schema: dict[str, Any], path: str) -> list[str]:
        props = resolve(schema).get("properties") or {}
        found = []
        for key, sub in props.items():
            child = f"{path}.{key}" if path else key
            if not isinstance(values, dict) or key not in values:
                found.append(child)
            else:
                found += walk(values[key], sub, child)
        return found

    absent = [k for k in walk(DEFAULTS, SCHEMA, "") if not OPTIONAL_KEYS.match(k)]
    assert absent == []


def test_the_default_deployment_is_the_fast_one(tmp_path: Path) -> None:
    """Issue 49: the deployment users get is the one docs/benchmarks.md measured within 2 s
    of a join, a leave and a SIGKILL with a million open runs: state on a volume a container
    restart keeps, the pod's name as its static member id, a stop that leaves the group; and
    ``bench rebalance --chart-values`` reads the chart's values as the templates do."""
    from bench.rebalance import chart_options

    engine = DEFAULTS["engine"]
    assert (engine["stateStore"], engine["staticMembership"], engine["leaveGroupOnStop"]) == (
        "emptyDir", True, True)
    assert chart_options(CHART / "values.yaml") == {
        "state_dir": True, "cache_keys": engine["stateCacheKeys"], "static": True,
        "leave_on_stop": True, "state_keep_s": engine["stateKeepS"]}
    old = CHART / "ci" / "state-memory-values.yaml"  # the defaults until issue 49
    assert chart_options(old) == {
        "state_dir": False, "cache_keys": None, "static": False, "leave_on_stop": False,
        "state_keep_s": engine["stateKeepS"]}
    leaving_alone = tmp_path / "values.yaml"  # leaving is only ever a static member's
    leaving_alone.write_text("engine: {staticMembership: false, leaveGroupOnStop: true}\n")
    assert chart_options(leaving_alone)["leave_on_stop"] is False


def test_dockerfile_final_stage() -> None:
    text = (ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    assert re.search(r"^USER \$\{UID\}:\$\{GID\}$", final, re.M)
    assert re.search(r"^ARG UID=\d+$", final, re.M) and re.search(r"^ARG GID=\d+$", final, re.M)
    assert 'ENTRYPOINT ["symfonic-stream"]' in final
    assert re.search(r"^EXPOSE 9400$", final, re.M)
    assert "--no-index" in final
    for tool in ("gcc", "build-essential", "apt-get install"):
        assert tool not in final
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim", text, re.M)
    # the wheels built from source or taken from the context, the one chosen, the runtime;
    # the console's bundle is committed package data: no stage needs npm
    assert text.count("\nFROM ") == 4
    assert "npm" not in text and "node" not in text.lower().replace("nodes", "")
    assert "import symfonic_stream._native" in final  # the native extension is installed


def _routed(path: str, rules: list[dict[str, str]]) -> bool:
    """Whether an Ingress with ``rules`` sends ``path`` to its backend (Kubernetes'
    matching: Exact the whole path, Prefix whole path elements)."""
    for rule in rules:
        kind, prefix = rule.get("pathType", "Prefix"), rule["path"]
        if kind == "Exact" and path == prefix:
            return True
        if kind == "Prefix" and (prefix == "/" or path == prefix
                                 or path.startswith(prefix.rstrip("/") + "/")):
            return True
    return False


def test_the_ingress_routes_every_path_the_gateway_serves_by_default() -> None:
    """gateway.ingress.paths against the gateway's own routes (its page, the console and
    its script, the runs' streams, the tickets' API): a route the Ingress does not send
    to the gateway is one a browser behind it cannot reach."""
    from types import SimpleNamespace
    from typing import cast

    from starlette.routing import Route

    from symfonic_stream.gateway.app import GatewayState, create_app

    chat_api = DEFAULTS["gateway"]["chatApi"]
    assert chat_api == Settings().gateway_chat_api  # the chart's default is config.py's
    app = create_app(cast(GatewayState, SimpleNamespace(
        settings=Settings(gateway_chat_api=chat_api))))
    served = [re.sub(r"\{[^}]*\}", "x", route.path) for route in app.routes
              if isinstance(route, Route)]
    assert {"/", "/review", "/static/console.js", "/v1/runs/x/events", chat_api,
            f"{chat_api}/x/stream"} <= set(served)
    # What gateway-ingress.yaml routes on a host without paths of its own (its
    # helm-unittest, gateway_test.yaml, checks the template does so).
    rules = [*DEFAULTS["gateway"]["ingress"]["paths"], {"path": chat_api, "pathType": "Prefix"}]
    assert [path for path in served if not _routed(path, rules)] == []
    assert not _routed("/metrics", rules)  # the probes' port is another Service's
