"""The tracing tests run against the project's OpenTelemetry Collector (scripts/otelcol.sh):
``make test-tracing`` runs them under ``scripts/otelcol.sh run``, which names it in
``SYMFONIC_OTELCOL_URL`` and its spans file in ``SYMFONIC_OTELCOL_SPANS``. With
``SYMFONIC_TEST_TRACING=1`` and neither set, the ``collector`` fixture starts one itself through
the script (on ``SYMFONIC_OTELCOL_PORT``) and stops it afterwards if it started it. Elsewhere
these tests are deselected."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tracing.collector import Collector

_HERE = Path(__file__).parent
_SCRIPT = _HERE.parents[1] / "scripts" / "otelcol.sh"


def _wanted() -> bool:
    return (bool(os.environ.get("SYMFONIC_OTELCOL_URL"))
            or os.environ.get("SYMFONIC_TEST_TRACING") == "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted():
        return
    dropped = [item for item in items if _HERE in item.path.parents]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _HERE not in item.path.parents]


def _script(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(_SCRIPT), *args], capture_output=True, text=True, timeout=900,
                          env=env, check=False)
    if done.returncode != 0:
        pytest.fail(f"scripts/otelcol.sh {' '.join(args)} exited with {done.returncode}: "
                    f"{done.stderr.strip()}", pytrace=False)
    return done.stdout.strip()


@pytest.fixture(scope="session")
def collector() -> Iterator[Collector]:
    """The collector: ``.endpoint`` for ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
    ``await .spans(trace_id, at_least=N, within=S)`` (tests/tracing/collector.py)."""
    url = os.environ.get("SYMFONIC_OTELCOL_URL")
    if url:
        spans = os.environ.get("SYMFONIC_OTELCOL_SPANS")
        if not spans:
            pytest.fail("SYMFONIC_OTELCOL_URL is set without SYMFONIC_OTELCOL_SPANS, the file "
                        "its spans are written to (scripts/otelcol.sh run sets both)",
                        pytrace=False)
        yield Collector(url, Path(spans))
        return
    with tempfile.TemporaryDirectory() as tmp:
        flag = Path(tmp) / "started"
        env = {**os.environ, "SYMFONIC_OTELCOL_STARTED_FLAG": str(flag)}
        url = _script("start", env=env)
        try:
            yield Collector(url, Path(_script("spans", env=env)))
        finally:
            if flag.exists() and flag.read_text().strip():
                _script("stop", env=env)
