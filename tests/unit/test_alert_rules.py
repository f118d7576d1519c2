"""The alert rules query only metrics the code registers, each has a runbook in
docs/metrics.md, and each has a promtool unit test that fires it and one that does not.

``make chart-check`` runs those promtool tests (``promtool test rules``); this module checks
that none is missing, so a new alert without a test or a runbook fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_dashboard import Exported, check_expr, exported_labels
from tests.unit.test_docs_links import anchors

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "symfonic-stream"
RULES = CHART / "files" / "prometheus-rules.yaml"
ALERT_TESTS = CHART / "tests" / "alerts"
RUNBOOKS = ROOT / "docs" / "metrics.md"
DURATION = re.compile(r"^\d+[smhdw]$")
# Alerts on a state (a level, an absence) need `for` so one bad scrape does not page.
NEEDS_FOR = {
    "SymfonicStreamConsumerLagGrowing": "10m",
    "SymfonicStreamTransactionsAborting": None,
    "SymfonicStreamConsumerNotReady": "5m",
    "SymfonicStreamMetricsAbsent": "5m",
    "SymfonicStreamTicketNearExpiry": "5m",
    "SymfonicStreamQueueUnclaimed": None,
    "SymfonicStreamGatewayDeliveryLag": "10m",
    "SymfonicStreamGatewayClientsRefused": None,
}


@pytest.fixture(scope="module")
def exported() -> Exported:
    return exported_labels()


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    assert isinstance(data, dict) and isinstance(data["groups"], list) and data["groups"]
    out = []
    for group in data["groups"]:
        assert group["name"] and isinstance(group["rules"], list)
        out.extend(group["rules"])
    return out


def alert_tests() -> list[tuple[Path, dict[str, Any]]]:
    """Every ``alert_rule_test`` case of the promtool test files, with its file."""
    files = sorted(ALERT_TESTS.glob("*.yaml"))
    assert files, f"no promtool tests in {ALERT_TESTS}"
    cases = []
    for path in files:
        data = yaml.safe_load(path.read_text())
        # Relative to the test file, as promtool reads it.
        assert [(path.parent / f).resolve() for f in data["rule_files"]] == [RULES], path
        for test in data["tests"]:
            for case in test.get("alert_rule_test", []):
                cases.append((path, case))
    return cases


def test_alert_rules_use_registered_metrics(
    rules: list[dict[str, Any]], exported: Exported
) -> None:
    for rule in rules:
        check_expr(rule["expr"], exported)


def test_every_alert_has_a_runbook_in_metrics_md(rules: list[dict[str, Any]]) -> None:
    """Each ``runbook_url`` is the alert's own section of docs/metrics.md, by its path in the
    repository (the chart replaces the leading ``docs``), and that section exists."""
    sections = anchors(RUNBOOKS)
    for rule in rules:
        anchor = rule["alert"].lower()
        assert rule["annotations"].get("runbook_url") == f"docs/metrics.md#{anchor}", (
            rule["alert"])
        assert anchor in sections, f"docs/metrics.md has no section {rule['alert']}"


def test_every_alert_fires_and_stays_quiet_in_a_promtool_test(
    rules: list[dict[str, Any]]
) -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for _, case in alert_tests():
        (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {rule["alert"] for rule in rules}
    assert not names - fired, f"no promtool test fires {sorted(names - fired)}"
    assert not names - quiet, f"no promtool test where {sorted(names - quiet)} stays quiet"
    assert fired | quiet <= names, f"tests of alerts that do not exist: {(fired | quiet) - names}"


def test_every_firing_case_checks_the_runbook(rules: list[dict[str, Any]]) -> None:
    """promtool compares every annotation of an alert, so each firing case also pins the
    runbook_url: a test that leaves annotations out would pass on an alert without any."""
    urls = {rule["alert"]: rule["annotations"]["runbook_url"] for rule in rules}
    for path, case in alert_tests():
        for alert in case.get("exp_alerts") or []:
            assert alert["exp_annotations"]["runbook_url"] == urls[case["alertname"]], path


def test_alert_rules_shape(rules: list[dict[str, Any]]) -> None:
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["alert"].startswith("SymfonicStream")
        assert isinstance(rule["expr"], str) and rule["expr"].strip()
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert set(rule["annotations"]) == {"runbook_url", "summary", "description"}
        if "for" in rule:
            assert DURATION.match(rule["for"]), rule["alert"]
        if rule["alert"] in NEEDS_FOR:
            assert "for" in rule, f"{rule['alert']} needs a `for`"
            expected = NEEDS_FOR[rule["alert"]]
            assert expected is None or rule["for"] == expected, rule["alert"]


def test_specific_alert_expressions(rules: list[dict[str, Any]]) -> None:
    by_name = {rule["alert"]: " ".join(rule["expr"].split()) for rule in rules}
    lag = by_name["SymfonicStreamConsumerLagGrowing"]
    # The lag on the left of `and`: its value is what the description shows.
    assert lag.startswith("symfonic_stream_consumer_lag_records > 0 and ")
    assert "deriv(symfonic_stream_consumer_lag_records[10m]) > 0" in lag
    assert "increase(symfonic_stream_dead_letters_total" in by_name["SymfonicStreamDeadLetters"]
    assert by_name["SymfonicStreamConsumerNotReady"] == "symfonic_stream_ready == 0"
    assert by_name["SymfonicStreamMetricsAbsent"] == "absent(symfonic_stream_ready)"


def test_aggregations_keep_the_release(rules: list[dict[str, Any]]) -> None:
    """Two releases in one Prometheus alert apart: every ``by`` keeps namespace and job."""
    for rule in rules:
        for grouping in re.findall(r"\bby \(([^)]*)\)", rule["expr"]):
            assert grouping.split(", ")[:2] == ["namespace", "job"], rule["alert"]
        for grouping in re.findall(r"\bon \(([^)]*)\)", rule["expr"]):
            assert grouping.split(", ")[:2] == ["namespace", "job"], rule["alert"]
