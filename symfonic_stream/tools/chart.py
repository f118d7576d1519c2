"""The Helm chart's files that are derived from the declarations (``symfonic_stream.consumers``).

Helm reads only files inside the chart, so ``make schemas`` writes there:

* ``files/consumers.yaml``: each deployed consumer's name, the group and topic its
  autoscaler follows, its KafkaUser's ACLs (as ``symfonic-stream acls`` prints them; those
  with per-tenant queues, escalations or both too, where they differ: ``aclsWhen``), the
  gateway's ACLs, and the topics every
  deployment has (the human queues come from the values, as the router's come from its
  rules). Names are written with ``{prefix}``; the templates put ``kafka.topicPrefix`` in
  its place.
* ``values.yaml``'s ``consumers:`` block, between its two marker lines, and
  ``values.schema.json``'s ``consumers`` property.
* ``files/grafana-dashboard.json``: the dashboard ``symfonic_stream.tools.dashboard`` declares.

``python -m symfonic_stream.tools.chart --write`` rewrites them; ``--check`` exits 1 when
one differs (so does a unit test).
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from symfonic_stream.app.acls import build_plan, default_principal, strimzi_acls
from symfonic_stream.app.topics import declared_topics
from symfonic_stream.config import Settings
from symfonic_stream.consumers import READERS, Consumer, deployed
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.dashboard import dashboard

CHART = Path("helm/symfonic-stream")
DATA_FILE = "files/consumers.yaml"
DASHBOARD_FILE = "files/grafana-dashboard.json"
#: What the templates replace with ``kafka.topicPrefix``.
PREFIX = "{prefix}"
BEGIN = "# <consumers: generated from consumers/ by `make schemas`>"
END = "# </consumers>"
NOTE = ("# Generated from consumers/ by `make schemas` "
        "(python -m symfonic_stream.tools.chart --write): do not edit.\n")


#: The values that change a consumer's ACLs, in the order the template joins them: per-tenant
#: queues (the router may create a tenant's queue) and escalations in the routing rules (the
#: validator writes the queue namespace too).
CONDITIONS = ("tenantQueues", "escalations")
#: Any escalation gives the same ACLs: the grant is the whole queue namespace.
_ESCALATING_RULES = "escalations: [{queue: default, after_minutes: 1, to: escalated}]\n"


def _acls(name: str, conditions: tuple[str, ...] = ()) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as folder:
        rules = None
        if "escalations" in conditions:  # (the wiring reads the rules from their file)
            rules = Path(folder) / "rules.yaml"
            rules.write_text(_ESCALATING_RULES, encoding="utf-8")
        # model_construct: the placeholder prefix is no valid setting, and no SYMFONIC_*
        # variable of the machine that generates may change what is generated.
        settings = Settings.model_construct(topic_prefix=PREFIX, routing_rules=rules,
                                            tenant_queues="tenantQueues" in conditions)
        plan = build_plan(settings, [name])
        return strimzi_acls(plan, default_principal(settings, name))


def _acls_when(name: str, acls: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    """The ACLs under each combination of :data:`CONDITIONS` where they differ from
    ``acls`` (none set), keyed by the combination's names joined with ``+``."""
    found = {}
    for size in range(1, len(CONDITIONS) + 1):
        for chosen in itertools.combinations(CONDITIONS, size):
            differing = _acls(name, chosen)
            if differing != acls:
                found["+".join(chosen)] = differing
    return found


def chart_data() -> dict[str, Any]:
    """What ``files/consumers.yaml`` holds."""
    names = TopicNames(PREFIX)
    consumers = []
    for consumer in deployed():
        scaled = consumer.engine(consumer.scales_on)
        acls = _acls(consumer.name)
        consumers.append({
            "name": consumer.name,
            "lag": {"group": names.group(scaled.name), "topic": scaled.reads.name(names)},
            "acls": acls,
            # Whether its pods get the routing rules file: its wiring reads the setting.
            "routing": any("routing_rules" in engine.settings for engine in consumer.engines),
        })
        when = _acls_when(consumer.name, acls)
        if when:
            consumers[-1]["aclsWhen"] = when
    readers = {reader.name: {"acls": _acls(reader.name)} for reader in READERS}
    topics = [{"name": t.name, "compact": t.compact, **({"consumer": t.owner} if t.owner else {})}
              for t in declared_topics(names, deployed())]
    return {"consumers": consumers, "readers": readers, "topics": topics}


def data_text() -> str:
    header = NOTE + f"# Names hold {PREFIX}: the templates replace it with kafka.topicPrefix.\n"
    return header + yaml.safe_dump(chart_data(), sort_keys=False, width=100)


def _values_of(consumer: Consumer, first: str) -> list[str]:
    r = consumer.resources
    assert r is not None, f"{consumer.name} is not deployed"
    overrides = ("Per-consumer overrides of `autoscaling.minReplicas`, `autoscaling.maxReplicas` "
                 "and `autoscaling.keda.lagThreshold`." if consumer.name == first else
                 f"Per-consumer autoscaling overrides (see `consumers.{first}.autoscaling`).")
    return [
        f"  {consumer.name}:",
        f"    # -- Deploy {consumer.title} ({consumer.summary}).",
        "    enabled: true",
        "    # -- Replicas when autoscaling is off; at most `topics.partitions`.",
        "    replicaCount: 1",
        "    # -- Worker processes per pod (`SYMFONIC_WORKERS`, 1 to 64): above 1 the pod runs a "
        "supervisor of that many consumer processes with one metrics endpoint (docs/engine.md, "
        "\"Worker processes\"); scale `resources` with it. Replicas \N{MULTIPLICATION SIGN} "
        "workers is at most `topics.partitions`.",
        "    workers: 1",
        f"    # -- Resources of {consumer.title}.",
        "    resources:",
        "      requests:",
        f"        cpu: {r.cpu}",
        f"        memory: {r.memory}",
        "      limits:",
        f"        memory: {r.memory_limit}",
        f"    # -- {overrides}",
        "    autoscaling: {}",
        "    # -- Extra env vars for this consumer only.",
        "    extraEnv: []",
    ]


def values_block() -> str:
    """The ``consumers:`` block of values.yaml, its markers included."""
    first = deployed()[0].name
    lines = [BEGIN,
             "# The consumers. Each is one Deployment running `symfonic-stream run <consumer>`,",
             "# sized and scaled on its own.",
             "consumers:"]
    for consumer in deployed():
        lines += _values_of(consumer, first)
    return "\n".join([*lines, END]) + "\n"


def _consumer_schema(consumer: Consumer) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "enabled": {"type": "boolean", "description": f"Deploy {consumer.title}."},
            "replicaCount": {
                "type": "integer", "minimum": 0,
                "description": "Replicas when autoscaling is off; at most topics.partitions "
                "(checked at render)."},
            "workers": {
                "type": "integer", "minimum": 1, "maximum": 64,
                "description": "Worker processes per pod (SYMFONIC_WORKERS); replicas times "
                "workers at most topics.partitions (checked at render)."},
            "resources": {"$ref": "#/$defs/resources"},
            "autoscaling": {"$ref": "#/$defs/consumerAutoscaling"},
            "extraEnv": {"type": "array", "items": {"$ref": "#/$defs/envVar"}},
        },
    }


def values_text(current: str) -> str:
    """values.yaml with its consumers block regenerated (``ValueError``: no markers)."""
    head, begin, rest = current.partition(BEGIN)
    _, end, tail = rest.partition(END + "\n")
    if not begin or not end:
        raise ValueError(f"values.yaml has lost its markers {BEGIN!r} … {END!r}")
    return head + values_block() + tail


def schema_text(current: str) -> str:
    """values.schema.json with its ``consumers`` property regenerated."""
    schema = json.loads(current)
    schema["properties"]["consumers"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {c.name: _consumer_schema(c) for c in deployed()},
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def dashboard_text() -> str:
    """The dashboard's JSON, keys in the order Grafana writes them (JSON has no comments: the
    do-not-edit note is docs/metrics.md's)."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def chart_files(chart: Path = CHART) -> dict[Path, str]:
    """Each generated file of the chart and the text it must hold."""
    values, schema = chart / "values.yaml", chart / "values.schema.json"
    return {
        chart / DATA_FILE: data_text(),
        chart / DASHBOARD_FILE: dashboard_text(),
        values: values_text(values.read_text(encoding="utf-8")),
        schema: schema_text(schema.read_text(encoding="utf-8")),
    }


def drift(chart: Path = CHART) -> list[str]:
    """The chart's generated files that differ from what the declarations give."""
    return [str(path) for path, text in chart_files(chart).items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text]


def main(argv: list[str]) -> int:
    if argv not in (["--write"], ["--check"]):
        print("usage: python -m symfonic_stream.tools.chart --write|--check", file=sys.stderr)
        return 2
    if argv == ["--check"]:
        stale = drift()
        for name in stale:
            print(f"drifted: {name}: run `make schemas` and commit it", file=sys.stderr)
        return 1 if stale else 0
    for path, text in chart_files().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
