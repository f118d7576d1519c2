"""tests/tracing/collector.py without a collector: OTLP JSON lines as the file exporter writes
them, flattened to the dicts the tracing tests read; a line still being written waits for its
newline, each read takes only what is new, and a trace that does not arrive fails naming what
did."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.tracing.collector import Collector

TRACE = "5B8EFFF798038103D269B633813FC60C"
OTHER = "0" * 31 + "2"


def _batch(trace: str, span: str, name: str, *, parent: str = "",
           attributes: list[dict[str, Any]] | None = None,
           links: list[dict[str, Any]] | None = None) -> bytes:
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name",
                                     "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"scope": {"name": "scope"}, "spans": [{
            "traceId": trace, "spanId": span, "parentSpanId": parent, "name": name,
            "kind": 5, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": attributes or [], "links": links or [],
            "status": {"code": 2, "message": "boom"}}]}]}]}) + b"\n"


async def test_spans_are_flattened_with_python_values_and_lowercase_ids(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    file.write_bytes(_batch(TRACE, "EEE19B7EC3C1B174", "root", attributes=[
        {"key": "s", "value": {"stringValue": "x"}}, {"key": "i", "value": {"intValue": "7"}},
        {"key": "b", "value": {"boolValue": True}}, {"key": "d", "value": {"doubleValue": 0.5}},
        {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "1"}]}}},
        {"key": "m", "value": {"kvlistValue": {"values": [
            {"key": "k", "value": {"stringValue": "v"}}]}}},
        {"key": "y", "value": {"bytesValue": "AAE="}}, {"key": "n", "value": {}}],
        links=[{"traceId": OTHER, "spanId": "00000000000000AB"}]))
    (span,) = await Collector("http://x", file).spans(TRACE.lower(), at_least=1, within=1)
    assert span["traceId"] == TRACE.lower() and span["spanId"] == "eee19b7ec3c1b174"
    assert span["parentSpanId"] is None and span["kind"] == "CONSUMER"
    assert span["attributes"] == {"s": "x", "i": 7, "b": True, "d": 0.5, "a": [1],
                                  "m": {"k": "v"}, "y": b"\x00\x01", "n": None}
    assert span["links"] == [{"traceId": OTHER, "spanId": "00000000000000ab", "attributes": {}}]
    assert span["resource"] == {"service.name": "svc"} and span["scope"] == "scope"
    assert span["status"] == {"code": "ERROR", "message": "boom"}
    assert (span["startTimeUnixNano"], span["endTimeUnixNano"]) == (1, 2)


async def test_a_line_being_written_waits_for_its_newline(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    first = _batch(TRACE, "1" * 16, "root")
    second = _batch(TRACE, "2" * 16, "child", parent="1" * 16)
    file.write_bytes(first + second[:20])
    collector = Collector("http://x", file)
    waiting = asyncio.create_task(collector.spans(TRACE, at_least=2, within=10))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    with file.open("ab") as out:
        out.write(second[20:])
    spans = await waiting
    assert [s["name"] for s in spans] == ["root", "child"]
    assert spans[1]["parentSpanId"] == "1" * 16
    # Read once: asking again returns the same spans, not doubled.
    assert len(await collector.spans(TRACE, at_least=2, within=1)) == 2


async def test_a_trace_short_of_spans_fails_naming_what_arrived(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    file.write_bytes(_batch(TRACE, "1" * 16, "root"))
    with pytest.raises(AssertionError, match=r"1 of at least 2 spans "
                                             r"arrived within 0.2 s: 'root' \(span 1{16}"):
        await Collector("http://x", file).spans(TRACE, at_least=2, within=0.2)


@pytest.mark.parametrize(("trace", "at_least", "within"),
                         [("xyz", 1, 1.0), (OTHER, 0, 1.0), (OTHER, 1, 0.0)])
async def test_bad_arguments_are_refused(tmp_path: Path, trace: str, at_least: int,
                                         within: float) -> None:
    with pytest.raises(ValueError, match=r"trace_id|at_least"):
        await Collector("http://x", tmp_path / "none").spans(trace, at_least=at_least,
                                                             within=within)
