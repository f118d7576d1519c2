"""The gateway's span per stream served (docs/metrics.md, "Tracing"), read back from the
SDK's in-memory exporter: kind SERVER, a child of the run's context when its records carry
one (the context the tail filed with the run), a root span when they do not; the messages
the client receives are those it receives with tracing off, byte for byte; off, the tail
keeps no context at all (pure: no broker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from symfonic_stream.config import Settings
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.runs import RunStore
from symfonic_stream.gateway.tail import TopicTail
from symfonic_stream.observability import tracing
from symfonic_stream.observability.gateway import GatewayMetrics
from tests.unit.test_trace_context import PARENT, STATE, TRACE_ID, TRACED

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")  # the [otel] extra
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")

RUN = "run-1"


@pytest.fixture
def spans() -> Iterator[Any]:
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracing.install(provider, {})
    yield exporter
    tracing.shutdown()


def _gateway(headers: Any = ()) -> tuple[GatewayState, RunStore]:
    """A gateway whose tails hold ``RUN``: three records, each with ``headers``, the
    last its closing end, filed as the tail files what it polls."""
    store = RunStore(cache_bytes=10**6, max_runs=10)
    tails = {stream: TopicTail(Settings(), f"agent-{stream}", store)
             for stream in ("events", "chunks")}
    for seq in range(3):
        closes = seq == 2
        value = orjson.dumps({"run_id": RUN, "seq": seq, "source_index": seq, "ts": 1.0,
                              **({"end": {"status": "completed", "error": None}} if closes
                                 else {"event": {"type": "text_delta", "text": "hi"}})})
        tails["events"]._file(0, seq, RUN.encode(), value, list(headers), 1.0)
    return GatewayState(Settings(), dict(tails), GatewayMetrics()), store


async def _get(state: GatewayState, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway",
                                 timeout=30) as client:
        return await client.get(path)


async def test_a_stream_served_is_a_server_span_in_its_runs_trace(spans: Any) -> None:
    state, _ = _gateway(TRACED)
    answer = await _get(state, f"/v1/runs/{RUN}/events?after_seq=0")
    assert answer.status_code == 200 and "event: end" in answer.text
    [span] = spans.get_finished_spans()
    assert (span.name, span.kind.name) == ("stream served", "SERVER")
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == PARENT[36:52] and span.parent.is_remote
    assert span.parent.trace_state.to_header() == STATE
    assert dict(span.attributes) == {
        "symfonic.run_id": RUN, "symfonic.stream": "events", "symfonic.format": "envelope",
        "symfonic.from_seq": 1, "symfonic.messages_sent": 2, "symfonic.ending": "run_ended"}


@pytest.mark.parametrize(("query", "wire"), [("?format=ag-ui", "ag-ui"),
                                             ("?format=ai-sdk", "ai-sdk")])
async def test_each_format_s_stream_is_a_span(spans: Any, query: str, wire: str) -> None:
    state, _ = _gateway(TRACED)
    answer = await _get(state, f"/v1/runs/{RUN}/events{query}")
    assert answer.status_code == 200
    [span] = spans.get_finished_spans()
    assert span.attributes["symfonic.format"] == wire
    assert span.attributes["symfonic.from_seq"] == 0
    assert span.attributes["symfonic.messages_sent"] > 0
    assert f"{span.context.trace_id:032x}" == TRACE_ID


async def test_a_run_without_a_context_gets_a_root_span(spans: Any) -> None:
    state, _ = _gateway()
    await _get(state, f"/v1/runs/{RUN}/events")
    [span] = spans.get_finished_spans()
    assert span.parent is None and span.kind.name == "SERVER"


async def test_the_client_receives_the_same_messages_traced_or_not(spans: Any) -> None:
    traced = await _get(_gateway(TRACED)[0], f"/v1/runs/{RUN}/events")
    tracing.shutdown()
    untraced = await _get(_gateway(TRACED)[0], f"/v1/runs/{RUN}/events")
    assert traced.content == untraced.content and b"traceparent" not in traced.content


def test_tracing_off_the_tail_keeps_no_context() -> None:
    assert tracing.TRACER is None
    _, store = _gateway(TRACED)
    run = store.get(RUN)
    assert run is not None and run.trace == ()


def test_the_gateway_command_refuses_a_bad_otel_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from symfonic_stream.cli import main

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    result = CliRunner().invoke(main, ["gateway"])
    assert result.exit_code == 2
    assert "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL" in result.output
    assert tracing.TRACER is None
