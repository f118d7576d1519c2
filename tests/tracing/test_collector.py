"""The project's OpenTelemetry Collector end to end: the OpenTelemetry SDK's OTLP/HTTP exporter,
configured only by ``OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint``, sends a parent span, its
child and, in a second trace, a span linking to the child; ``collector.spans`` reads them back
from the collector's file with their ids, parent, link, kinds and attributes as sent."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.tracing.collector import Collector


def _hex(number: int, digits: int) -> str:
    return format(number, f"0{digits}x")


async def test_spans_sent_by_the_sdk_come_back_with_their_ids_parent_and_link(
        collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    provider = TracerProvider(resource=Resource.create({"service.name": "otelcol-smoke"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("tests.tracing")
    # The child starts inside the parent (the with's second item is entered after the first).
    with tracer.start_as_current_span("parent", kind=trace.SpanKind.SERVER) as parent, \
            tracer.start_as_current_span(
                "child", kind=trace.SpanKind.CONSUMER,
                attributes={"messaging.batch.message_count": 3, "ok": True, "ratio": 0.5,
                            "topics": ["a", "b"], "text": "é"}) as child:
        pass
    with tracer.start_as_current_span("linker", context=trace.set_span_in_context(
            trace.INVALID_SPAN), links=[trace.Link(child.get_span_context())]) as linker:
        pass
    assert await asyncio.to_thread(provider.force_flush)
    provider.shutdown()
    first = _hex(parent.get_span_context().trace_id, 32)
    second = _hex(linker.get_span_context().trace_id, 32)
    assert first != second

    # The first trace's spans, and the linker, which links to it (a trace viewer's view).
    spans = {span["name"]: span for span in await collector.spans(first, at_least=3, within=30)}
    assert set(spans) == {"parent", "child", "linker"}
    assert spans["linker"]["traceId"] == second
    assert spans["parent"]["spanId"] == _hex(parent.get_span_context().span_id, 16)
    assert spans["parent"]["parentSpanId"] is None
    assert spans["parent"]["kind"] == "SERVER"
    assert spans["child"]["spanId"] == _hex(child.get_span_context().span_id, 16)
    assert spans["child"]["parentSpanId"] == spans["parent"]["spanId"]
    assert spans["child"]["kind"] == "CONSUMER"
    assert spans["child"]["attributes"] == {
        "messaging.batch.message_count": 3, "ok": True, "ratio": 0.5, "topics": ["a", "b"],
        "text": "é"}
    assert spans["child"]["resource"]["service.name"] == "otelcol-smoke"
    assert spans["child"]["scope"] == "tests.tracing"

    (linked,) = await collector.spans(second, at_least=1, within=30)
    assert linked["name"] == "linker" and linked["parentSpanId"] is None
    assert [(link["traceId"], link["spanId"]) for link in linked["links"]] == [
        (first, spans["child"]["spanId"])]


async def test_a_trace_that_never_arrives_fails_naming_what_did(collector: Collector) -> None:
    with pytest.raises(AssertionError, match=r"trace 0{31}1: 0 of at least 1 spans arrived "
                                             r"within 0.3 s: none \(the collector at http"):
        await collector.spans("0" * 31 + "1", at_least=1, within=0.3)
