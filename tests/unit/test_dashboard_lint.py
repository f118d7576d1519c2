"""The rules of Grafana's dashboard-linter (github.com/grafana/dashboard-linter, v0.2.0,
``lint/rule_*.go``), applied to the chart's dashboard: one test per rule, named as the
linter names it.

The linter itself does not build here: the Go module proxy refuses v0.1.1, and v0.2.0
needs ``github.com/grafana/grafana/apps/dashboard`` (AGPL, and refused too) for the v2
schema, which this dashboard does not use. Its PromQL rule (every query parses) is
``make chart-dashboard``'s, where promtool runs every query; ``target-job-rule`` and
``target-instance-rule`` are test_dashboard's ``test_every_selector_is_filtered_by_the_release``
(with namespace and consumer besides). The LogQL rules have nothing to check.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.test_dashboard import all_panels, load_dashboard, targets

#: The panel types the linter's panel rules look at (lint/constants.go).
LINTED_PANELS = {"stat", "singlestat", "graph", "table-old", "timeseries", "gauge"}
#: Those whose data source it checks (rule_panel_datasource.go).
DATASOURCE_PANELS = {"singlestat", "graph", "table-old", "timeseries"}
#: The units this dashboard uses, each one of rule_panel_units.go's valid units (which
#: enumerates Grafana's own list); add from there when a panel needs another.
VALID_UNITS = {"none", "short", "percent", "percentunit", "bytes", "decbytes", "s", "ms",
               "ops", "reqps", "rps", "cps"}
TEMPLATED_DATASOURCES = {"$datasource", "${datasource}"}
RANGE = re.compile(r"\[([^\]]+)\]")
COUNTER = re.compile(r"(\w*)\(?(symfonic_stream_\w+_total)\{[^}]*\}(\[[^\]]+\])?")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load_dashboard()


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def test_template_datasource_rule(dashboard: dict[str, Any]) -> None:
    datasources = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert len(datasources) == 1
    (datasource,) = datasources
    assert datasource["name"] in {"datasource", "prometheus_datasource"}
    assert datasource["label"] in {"Data source", "Prometheus data source"}


def test_template_job_rule_and_template_instance_rule(dashboard: dict[str, Any]) -> None:
    variables = _variables(dashboard)
    for name in ("job", "instance"):
        variable = variables[name]
        assert variable["datasource"]["uid"] in TEMPLATED_DATASOURCES
        assert variable["type"] == "query"
        assert variable["label"] == name.title()
        assert variable["multi"] is True
        assert variable["allValue"] == ".+"


def test_template_label_promql_rule(dashboard: dict[str, Any]) -> None:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found = re.search(r"([a-z_]+)\((.+)\)", variable["query"]["query"])
            assert found, variable["name"]
            assert found.group(1) in {"label_names", "label_values", "metrics", "query_result"}


def test_template_on_time_change_reload_rule(dashboard: dict[str, Any]) -> None:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["refresh"] == 2, variable["name"]


def test_panel_datasource_rule(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] in DATASOURCE_PANELS:
            assert panel["datasource"]["uid"] in TEMPLATED_DATASOURCES, panel["title"]


def test_panel_title_description_rule(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] in LINTED_PANELS:
            assert panel["title"] and panel["description"], panel["title"]


def test_panel_units_rule(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] not in LINTED_PANELS:
            continue
        defaults = panel["fieldConfig"]["defaults"]
        if defaults.get("mappings"):  # the linter skips a panel that maps its values
            continue
        assert defaults.get("unit") in VALID_UNITS, panel["title"]


def test_panel_no_targets_rule(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] in LINTED_PANELS:
            assert panel.get("targets"), panel["title"]


def test_target_rate_interval_rule(dashboard: dict[str, Any]) -> None:
    """The linter asks this of ranges under rate() and irate(); here every range is."""
    for title, target in targets(dashboard):
        ranges = RANGE.findall(target["expr"])
        assert all(r == "$__rate_interval" for r in ranges), (title, ranges)


def test_target_counter_agg_rule(dashboard: dict[str, Any]) -> None:
    """A counter (``*_total``) is only read through rate(), irate() or increase() of a
    range, never as a raw value."""
    for title, target in targets(dashboard):
        for function, name, range_ in COUNTER.findall(target["expr"]):
            assert function in {"rate", "irate", "increase"} and range_, (title, name)


def test_uneditable_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["editable"] is False
