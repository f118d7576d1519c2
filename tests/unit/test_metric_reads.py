"""The integration harness's metric reads (tests/integration/harness.py, observe.py): a name no
metric family declares fails, where it used to read as 0 and so pass every upper-bound check
(issue 45); a declared series without a value yet reads as 0; a label nothing has fails.
No broker: a consumer process's ``/metrics`` is served from a registry here, and the
in-process engine is built, not run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings
from symfonic_stream.observability.metrics import ConsumerMetrics
from tests.integration.harness import ConsumerProcess, InProcessEngine
from tests.integration.observe import metric_value

RENAMED = "symfonic_stream_transactions_renamed_total"


@pytest.fixture
def served() -> Iterator[tuple[int, ConsumerMetrics]]:
    """A ``/metrics`` endpoint serving one typed consumer's metrics."""
    registry = CollectorRegistry()
    metrics = ConsumerMetrics("typed", registry=registry)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], metrics
    server.shutdown()
    server.server_close()


def _process(tmp_path: Path, port: int) -> ConsumerProcess:
    process = ConsumerProcess("typed", "unit", tmp_path)
    process.port = port
    return process


def test_a_consumer_process_metric_nothing_declares_fails(
        tmp_path: Path, served: tuple[int, ConsumerMetrics]) -> None:
    process = _process(tmp_path, served[0])
    with pytest.raises(AssertionError, match=f"no metric family declares {RENAMED}"):
        process.metric(RENAMED)
    with pytest.raises(AssertionError, match="has no label"):
        process.metric("symfonic_stream_transactions_total", outcom="committed")


def test_a_declared_series_without_a_value_yet_reads_as_zero(
        tmp_path: Path, served: tuple[int, ConsumerMetrics]) -> None:
    port, metrics = served
    process = _process(tmp_path, port)
    assert process.metric("symfonic_stream_producers_fenced_total") == 0
    metrics.producer_fenced()
    assert process.metric("symfonic_stream_producers_fenced_total") == 1


def test_the_sum_of_a_metric_nothing_declares_fails(
        tmp_path: Path, served: tuple[int, ConsumerMetrics]) -> None:
    process = _process(tmp_path, served[0])
    process.proc = type("Running", (), {"poll": lambda self: None})()  # type: ignore[assignment]
    assert asyncio.run(metric_value(process, "symfonic_stream_producers_fenced_total")) == 0
    with pytest.raises(AssertionError, match=f"no metric family declares {RENAMED}"):
        asyncio.run(metric_value(process, RENAMED))


def test_an_in_process_engines_sample_nothing_declares_fails() -> None:
    settings = Settings(topic_prefix="unit")
    engine = InProcessEngine(projector_topology("typed", settings), settings)
    assert engine.sample("transactions_total", outcome="committed") == 0
    with pytest.raises(AssertionError, match="no metric family declares"):
        engine.sample("transactions_renamed_total", outcome="committed")
    with pytest.raises(AssertionError, match="has no label"):
        engine.sample("transactions_total", outcom="committed")
