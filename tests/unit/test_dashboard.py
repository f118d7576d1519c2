"""The Grafana dashboard and the alert rules only query metrics the code exports.

A dashboard panel or an alert on a misspelt metric shows "no data" or never fires, and
nothing else would notice: these tests build the metric list from a real ConsumerMetrics
registry and check every PromQL expression against it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from symfonic_stream.observability import ConsumerMetrics
from tests.unit.test_observability import exercise

FILES = Path(__file__).resolve().parents[2] / "helm" / "symfonic-stream" / "files"
DASHBOARD = FILES / "grafana-dashboard.json"
RULES = FILES / "prometheus-rules.yaml"

METRIC = re.compile(r"\bsymfonic_stream_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(symfonic_stream_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*')
DURATION = re.compile(r"^\d+[smhdw]$")


def exercised_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    for consumer in ("typed", "pauses", "resumes"):
        exercise(ConsumerMetrics(consumer, registry))
    return registry


@pytest.fixture(scope="module")
def exported() -> dict[str, dict[str, set[str]]]:
    """Sample name -> label name -> values seen, as a scrape would show them."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for family in exercised_registry().collect():
        for sample in family.samples:
            labels = out[sample.name]
            for name, value in sample.labels.items():
                labels[name].add(value)
    return {name: dict(labels) for name, labels in out.items()}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    assert isinstance(data, dict) and isinstance(data["groups"], list) and data["groups"]
    out = []
    for group in data["groups"]:
        assert group["name"] and isinstance(group["rules"], list)
        out.extend(group["rules"])
    return out


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))  # collapsed rows nest theirs


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [
        target["expr"]
        for panel in all_panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def check_expr(expr: str, exported: dict[str, dict[str, set[str]]]) -> None:
    names = METRIC.findall(expr)
    assert names, f"no symfonic_stream_ metric in {expr!r}"
    for name in names:
        assert name in exported, f"{name} is not exported (in {expr!r})"
    for name, body in SELECTOR.findall(expr):
        for matcher in filter(None, (m.strip() for m in body.split(","))):
            parsed = MATCHER.fullmatch(matcher)
            assert parsed, f"cannot read matcher {matcher!r} in {expr!r}"
            label, op, value = parsed.groups()
            assert label in exported[name], f"{name} has no label {label!r} (in {expr!r})"
            if op == "=":
                assert value in exported[name][label], f"{name}{{{matcher}}} matches nothing"
    assert not re.search(r"run_?id", expr), expr
    for opening, closing in ("()", "[]", "{}"):
        assert expr.count(opening) == expr.count(closing), f"unbalanced {opening} in {expr!r}"
    assert expr.count('"') % 2 == 0, expr


def test_exported_names_include_suffixes(exported: dict[str, dict[str, set[str]]]) -> None:
    for name in (
        "symfonic_stream_records_in_total",
        "symfonic_stream_end_to_end_latency_seconds_bucket",
        "symfonic_stream_end_to_end_latency_seconds_sum",
        "symfonic_stream_end_to_end_latency_seconds_count",
        "symfonic_stream_build_info",
    ):
        assert name in exported
    assert "symfonic_stream_records_in" not in exported  # counters are only *_total


def test_dashboard_structure(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["consumer"]["type"] == "query"
    ids = [panel["id"] for panel in all_panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in all_panels(dashboard["panels"]):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, f"panel {panel['title']!r} overlaps another"
        cells |= mine
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["refId"] and target["expr"]
                assert target["datasource"]["uid"] == "${datasource}"
                assert 'consumer=~"$consumer"' in target["expr"], target["expr"]


def test_dashboard_covers_every_topic(dashboard: dict[str, Any]) -> None:
    text = " ".join(dashboard_exprs(dashboard))
    for needed in (
        "records_in_total",
        "records_out_total",
        "consumer_lag_records",
        "end_to_end_latency_seconds_bucket",
        "dead_letters_total",
        "gaps_total",
        "duplicates_total",
        "buffered_events",
        "active_runs",
        "tickets_routed_total",
        "resumes_total",
        'outcome="aborted"',
        "producers_fenced_total",
        "rebalances_total",
        "transaction_duration_seconds_bucket",
        "state_restore_duration_seconds",
    ):
        assert needed in text, needed
    assert "histogram_quantile(0.5," in text and "histogram_quantile(0.99," in text


def test_dashboard_exprs_use_exported_metrics(
    dashboard: dict[str, Any], exported: dict[str, dict[str, set[str]]]
) -> None:
    exprs = dashboard_exprs(dashboard)
    assert len(exprs) >= 15
    for expr in exprs:
        check_expr(expr, exported)


def test_alert_rules_use_exported_metrics(
    rules: list[dict[str, Any]], exported: dict[str, dict[str, set[str]]]
) -> None:
    for rule in rules:
        check_expr(rule["expr"], exported)


# Alerts on a state (a level, an absence) need `for` so one bad scrape does not page.
NEEDS_FOR = {
    "SymfonicStreamConsumerLagGrowing": "10m",
    "SymfonicStreamTransactionsAborting": None,
    "SymfonicStreamConsumerNotReady": "5m",
    "SymfonicStreamMetricsAbsent": "5m",
}


def test_alert_rules_shape(rules: list[dict[str, Any]]) -> None:
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert set(names) >= {
        "SymfonicStreamConsumerLagGrowing",
        "SymfonicStreamDeadLetters",
        "SymfonicStreamGaps",
        "SymfonicStreamTransactionsAborting",
        "SymfonicStreamConsumerNotReady",
        "SymfonicStreamMetricsAbsent",
    }
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert isinstance(rule["expr"], str) and rule["expr"].strip()
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"].strip()
        assert rule["annotations"]["description"].strip()
        if "for" in rule:
            assert DURATION.match(rule["for"]), rule["alert"]
        if rule["alert"] in NEEDS_FOR:
            assert "for" in rule, f"{rule['alert']} needs a `for`"
            expected = NEEDS_FOR[rule["alert"]]
            assert expected is None or rule["for"] == expected, rule["alert"]


def test_specific_alert_expressions(rules: list[dict[str, Any]]) -> None:
    by_name = {rule["alert"]: " ".join(rule["expr"].split()) for rule in rules}
    lag = by_name["SymfonicStreamConsumerLagGrowing"]
    assert "deriv(symfonic_stream_consumer_lag_records[10m]) > 0" in lag
    assert "symfonic_stream_consumer_lag_records > 0" in lag
    assert "increase(symfonic_stream_dead_letters_total" in by_name["SymfonicStreamDeadLetters"]
    assert by_name["SymfonicStreamConsumerNotReady"] == "symfonic_stream_ready == 0"
    assert by_name["SymfonicStreamMetricsAbsent"] == "absent(symfonic_stream_ready)"
