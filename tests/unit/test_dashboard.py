"""The Grafana dashboard queries only metrics the code registers, and tells releases apart.

A panel on a misspelt metric shows "no data" and nothing else would notice: these tests
render every query with the dashboard's variables substituted, as Grafana sends it, and
check each metric name and label against registries the code builds (the consumers', the
gateway's, a supervisor's). They also check what lets two releases scraped by one
Prometheus be told apart: every selector filtered by namespace, job and instance, every
aggregation keeping namespace and job. ``make chart-check`` lints the same file with
Grafana's dashboard-linter; test_consumers checks it is what ``make schemas`` writes.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from symfonic_stream.observability import ConsumerMetrics
from symfonic_stream.observability.gateway import GatewayMetrics
from symfonic_stream.observability.metrics import SupervisorMetrics
from symfonic_stream.processors.pauses.validator import REQUEST_INPUT
from symfonic_stream.tools import dashboard as declared
from tests.unit.test_observability import exercise

DASHBOARD = (Path(__file__).resolve().parents[2] / "helm" / "symfonic-stream" / "files"
             / "grafana-dashboard.json")

METRIC = re.compile(r"\bsymfonic_stream_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(symfonic_stream_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*')
NAME_REGEX = re.compile(r'\{__name__=~"([a-z0-9_|]+)"')
AGGREGATION = re.compile(r"\b(sum|min|max|count|avg|group|topk|bottomk)\b\s*(by\s*\(([^)]*)\))?"
                         r"\s*\(")
#: What Grafana puts in place of each variable when one value of each is picked.
PICKED = {"$namespace": "streaming", "$job": "symfonic", "$instance": "10.0.0.1:9400",
          "$consumer": "typed", "$__rate_interval": "1m"}
RELEASE_MATCHERS = ('namespace=~"$namespace"', 'job=~"$job"', 'instance=~"$instance"')
Exported = dict[str, dict[str, set[str]]]


def registries() -> list[CollectorRegistry]:
    """Every registry a process of the project serves, each family's series present."""
    consumers = CollectorRegistry()
    for name in ("typed", "chunks", "pauses", "resumes"):
        exercise(ConsumerMetrics(name, consumers))
    validator = ConsumerMetrics("resumes", consumers)
    # What the validator reads and writes besides (processors/pauses: validator, desk).
    validator.record_in("symfonic.pause-registrations", REQUEST_INPUT)
    validator.record_out("symfonic.review-tickets", "review")
    validator.ticket_routed("oversight", "ask_user")
    gateway = GatewayMetrics()
    # Its one family not exported before its first observation.
    gateway.first_event.labels("events").observe(0.1)
    return [consumers, gateway.registry, SupervisorMetrics("typed", 2).registry]


def exported_labels() -> Exported:
    """Sample name -> label name -> values seen, as a scrape would show them."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for registry in registries():
        for family in registry.collect():
            for sample in family.samples:
                labels = out[sample.name]
                for name, value in sample.labels.items():
                    labels[name].add(value)
    return {name: dict(labels) for name, labels in out.items()}


def load_dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def exported() -> Exported:
    return exported_labels()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load_dashboard()


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))  # collapsed rows nest theirs


def targets(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(panel["title"], target) for panel in all_panels(dashboard["panels"])
            for target in panel.get("targets", [])]


def variable_queries(dashboard: dict[str, Any]) -> list[str]:
    queries = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def render(expr: str) -> str:
    """``expr`` as Grafana sends it with one value of each variable picked."""
    for variable, value in PICKED.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a variable the dashboard does not define in {expr!r}"
    return expr


def check_expr(expr: str, exported: Exported) -> None:
    """Every metric ``expr`` names is registered, with the labels and values it matches."""
    names = METRIC.findall(expr)
    assert names, f"no symfonic_stream_ metric in {expr!r}"
    for name in names:
        assert name in exported, f"{name} is not registered (in {expr!r})"
    for name, body in SELECTOR.findall(expr):
        for matcher in filter(None, (m.strip() for m in body.split(", "))):
            parsed = MATCHER.fullmatch(matcher)
            assert parsed, f"cannot read matcher {matcher!r} in {expr!r}"
            label, op, value = parsed.groups()
            assert label in exported[name] or label in {"namespace", "job", "instance"}, (
                f"{name} has no label {label!r} (in {expr!r})")
            if op == "=" and label in exported[name]:
                assert value in exported[name][label], f"{name}{{{matcher}}} matches nothing"
    assert not re.search(r"run_?id", expr), expr
    for opening, closing in ("()", "[]", "{}"):
        assert expr.count(opening) == expr.count(closing), f"unbalanced {opening} in {expr!r}"
    assert expr.count('"') % 2 == 0, expr


def test_every_query_rendered_names_registered_metrics(
    dashboard: dict[str, Any], exported: Exported
) -> None:
    exprs = [render(t["expr"]) for _, t in targets(dashboard)]
    assert len(exprs) >= 35
    for expr in exprs:
        check_expr(expr, exported)
    for query in variable_queries(dashboard):
        rendered = render(query)
        assert rendered.startswith("label_values("), rendered
        for alternatives in NAME_REGEX.findall(rendered):
            for name in alternatives.split("|"):
                assert name in exported, f"{name} is not registered (in {query!r})"
        check_expr(rendered, exported)


def test_an_absent_metric_fails_the_check(
    dashboard: dict[str, Any], exported: Exported
) -> None:
    """The check above can fail: a query on a metric nobody registers, or on a label its
    family lacks, is caught."""
    _, target = targets(dashboard)[0]
    misspelt = target["expr"].replace("symfonic_stream_ready", "symfonic_stream_readyy")
    with pytest.raises(AssertionError, match="symfonic_stream_readyy is not registered"):
        check_expr(render(misspelt), exported)
    with pytest.raises(AssertionError, match="has no label 'stream'"):
        check_expr(render(declared.consumer("ready", 'stream="events"')), exported)
    with pytest.raises(AssertionError, match="matches nothing"):
        check_expr(render(declared.gateway("gateway_viewers", 'stream="evnts"')), exported)


def test_every_selector_is_filtered_by_the_release(
    dashboard: dict[str, Any], exported: Exported
) -> None:
    """Picking a namespace, a release (job) or a pod narrows every panel, and Consumer every
    series that has that label; no metric is named outside a selector."""
    for title, target in targets(dashboard):
        expr = target["expr"]
        selectors = SELECTOR.findall(expr)
        assert len(selectors) == len(METRIC.findall(expr)), f"a bare metric in {title!r}"
        for name, body in selectors:
            matchers = body.split(", ")
            for needed in RELEASE_MATCHERS:
                assert needed in matchers, f"{title!r}: {name} is not filtered by {needed}"
            has_consumer = "consumer" in exported[name]
            assert (declared.CONSUMER_FILTER in matchers) == has_consumer, (title, name)


def test_every_aggregation_keeps_the_release(dashboard: dict[str, Any]) -> None:
    """Two releases are two series on every panel, never summed together, and every legend
    says which release a series is."""
    for title, target in targets(dashboard):
        aggregations = AGGREGATION.findall(target["expr"])
        assert aggregations, f"{title!r}: {target['expr']!r} aggregates nothing"
        for op, _, grouping in aggregations:
            labels = [label.strip() for label in grouping.split(",")] if grouping else []
            assert labels[:2] == ["namespace", "job"], f"{title!r}: {op} by {labels}"
        assert target["legendFormat"].startswith("{{namespace}}/{{job}} "), title


def test_the_release_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "job", "instance", "consumer"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job", "instance", "consumer"):
        variable = variables[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"]
        assert variable["datasource"]["uid"] == "${datasource}"
        assert variable["refresh"] == 2, "values follow the time range"
    # All jobs and pods: any value. All namespaces also matches series without one.
    assert variables["job"]["allValue"] == variables["instance"]["allValue"] == ".+"
    assert variables["namespace"]["allValue"] == ".*"
    # Each narrows the next.
    assert '$namespace' in variables["job"]["query"]["query"]
    assert '$job' in variables["instance"]["query"]["query"]
    assert '$instance' in variables["consumer"]["query"]["query"]


def test_dashboard_structure(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["editable"] is False  # provisioned: an edit in Grafana would be lost
    ids = [panel["id"] for panel in all_panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in all_panels(dashboard["panels"]):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, f"panel {panel['title']!r} overlaps another"
        cells |= mine
        if panel["type"] != "row":
            assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["refId"] and target["expr"]
                assert target["datasource"]["uid"] == "${datasource}"


def test_dashboard_covers_every_topic(dashboard: dict[str, Any]) -> None:
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == [row.title for row in declared.ROWS]
    assert {"Pause path", "Gateway"} <= set(rows)
    text = " ".join(t["expr"] for _, t in targets(dashboard))
    for needed in (
        "records_in_total", "records_out_total", "consumer_lag_records",
        "end_to_end_latency_seconds_bucket", "dead_letters_total", "gaps_total",
        "duplicates_total", "buffered_events", "active_runs", 'outcome="aborted"',
        "producers_fenced_total", "rebalances_total", "transaction_duration_seconds_bucket",
        "state_restore_duration_seconds",
        # The pause path: routed, escalated (routed by the validator), requests, outcomes.
        'tickets_routed_total{namespace=~"$namespace", job=~"$job", instance=~"$instance", '
        'consumer=~"$consumer", consumer="pauses"}',
        'tickets_routed_total{namespace=~"$namespace", job=~"$job", instance=~"$instance", '
        'consumer=~"$consumer", consumer="resumes"}',
        'type="request"', "resumes_total",
        # The gateway: clients, slow clients, refusals, first message, read-backs.
        "gateway_viewers", 'ending="too_slow"', "gateway_refused_total",
        "gateway_edge_refused_total", "gateway_first_event_seconds_bucket",
        "gateway_read_backs_total", "gateway_held_bytes",
    ):
        assert needed in text, needed
    assert "histogram_quantile(0.5," in text and "histogram_quantile(0.99," in text
