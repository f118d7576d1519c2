"""Two releases in one Prometheus are told apart on every panel of the dashboard: checked by
Prometheus' own engine (``promtool test rules``), not by reading the queries.

The series are every sample the code's registries export (tests/unit/test_dashboard.py's
``registries``), scraped twice: as release ``symfonic`` in namespace ``streaming`` and as
release ``other`` in namespace ``elsewhere``, each with its own instance. Every panel query,
rendered as Grafana sends it, must then give

* with that one release picked (Namespace, Job), series of that release and of no other;
* with every variable at All, series of both releases, apart (``namespace`` and ``job`` kept).

Each query is wrapped in ``group by (namespace, job) (...)``, so the test compares which
releases a panel shows, whatever its values. The variables' own queries are run the same
way: with the namespace and the release picked, each later variable offers values of that
release only. A query that does not parse fails too. Usage (``make chart-dashboard``):

    python -m tests.chart.dashboard_releases --promtool PATH --out DIR
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_dashboard import DASHBOARD, all_panels, registries, variable_queries

RULES = Path(__file__).resolve().parents[2] / "helm" / "symfonic-stream" / "files" / \
    "prometheus-rules.yaml"
#: (namespace, job, instance) of each release.
RELEASES = (("streaming", "symfonic", "10.0.0.1:9400"), ("elsewhere", "other", "10.0.1.1:9400"))
#: The variables as Grafana fills them in: one release picked, or everything at All.
PICKED = {"$namespace": "streaming", "$job": "symfonic", "$instance": ".+", "$consumer": ".*",
          "$__rate_interval": "2m"}
ALL = {**PICKED, "$namespace": ".*", "$job": ".+"}
EVAL_TIME = "20m"
LABEL_VALUES = re.compile(r"^label_values\((.+), (\w+)\)$")


def _render(expr: str, values: dict[str, str]) -> str:
    for variable, value in values.items():
        expr = expr.replace(variable, value)
    if "$" in expr:
        raise ValueError(f"a variable left in {expr!r}")
    return expr


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def input_series() -> list[dict[str, str]]:
    """Every exported sample, once per release, rising by one a minute (a counter's rate and a
    histogram's buckets are then defined; a gauge is some value)."""
    series = []
    for registry in registries():
        for family in registry.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                for namespace, job, instance in RELEASES:
                    labels = {**sample.labels, "namespace": namespace, "job": job,
                              "instance": instance}
                    series.append({"series": sample.name + _labels(labels), "values": "1+1x30"})
    return series


def expr_tests(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    tests = []
    picked = [{"namespace": RELEASES[0][0], "job": RELEASES[0][1]}]
    both = [{"namespace": namespace, "job": job} for namespace, job, _ in RELEASES]
    for panel in all_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            for values, expected in ((PICKED, picked), (ALL, both)):
                tests.append({
                    "expr": f"group by (namespace, job) ({_render(target['expr'], values)})",
                    "eval_time": EVAL_TIME,
                    "exp_samples": [{"labels": _labels(e), "value": 1} for e in expected],
                })
    for query in variable_queries(dashboard):
        found = LABEL_VALUES.match(query)
        if found is None:
            raise ValueError(f"a variable's query is not label_values(selector, label): {query}")
        selector, label = found.groups()
        # The namespace variable is filtered by nothing: it offers every release's namespace.
        expected = both if label == "namespace" else picked
        tests.append({"expr": f"group by (namespace, job) ({_render(selector, PICKED)})",
                      "eval_time": EVAL_TIME,
                      "exp_samples": [{"labels": _labels(e), "value": 1} for e in expected]})
    return tests


def promtool_file(dashboard: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"name": "every panel shows the release picked, and releases apart",
                   "interval": "1m", "input_series": input_series(),
                   "promql_expr_test": expr_tests(dashboard)}],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promtool", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    dashboard = json.loads(DASHBOARD.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "dashboard-releases-test.yaml"
    tests = promtool_file(dashboard)
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    checks = len(tests["tests"][0]["promql_expr_test"])
    print(f"promtool test rules {path} ({checks} queries of the panels and variables, "
          "two releases)")
    return subprocess.run([args.promtool, "test", "rules", str(path)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
