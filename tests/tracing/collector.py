"""The test side of the project's OpenTelemetry Collector (scripts/otelcol.sh): where to send
spans, and the spans it received, read back from its file exporter's output.

The collector writes each batch it receives as one line of OTLP JSON (``resourceSpans``, then
``scopeSpans``, then ``spans``) to one file. :meth:`Collector.spans` reads the lines written
since its last read (a line still being written waits for its newline), flattens each span to a
dict and indexes it by trace id, until the trace asked for has enough spans or the time is up.

A span, as :meth:`Collector.spans` returns it::

    {"name": str, "traceId": str, "spanId": str, "parentSpanId": str | None,
     "kind": "INTERNAL" | "SERVER" | "CLIENT" | "PRODUCER" | "CONSUMER" | "UNSPECIFIED",
     "links": [{"traceId": str, "spanId": str, "attributes": {...}}],
     "attributes": {key: python value}, "resource": {key: python value},
     "scope": str, "status": {"code": "UNSET" | "OK" | "ERROR", "message": str},
     "startTimeUnixNano": int, "endTimeUnixNano": int,
     "events": [{"name": str, "attributes": {...}}]}

Ids are lowercase hex (32 digits for a trace, 16 for a span); a root span's ``parentSpanId``
is None; attribute values are Python values (str, bool, int, float, bytes, list, dict).
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

# OTLP's Span.SpanKind and Status.StatusCode, by number (opentelemetry-proto trace.proto).
_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUS = ("UNSET", "OK", "ERROR")
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_POLL_SECONDS = 0.05


def value(any_value: dict[str, Any]) -> Any:
    """An OTLP JSON AnyValue as a Python value (int64 comes as a string in OTLP JSON)."""
    if "stringValue" in any_value:
        return any_value["stringValue"]
    if "boolValue" in any_value:
        return bool(any_value["boolValue"])
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "doubleValue" in any_value:
        return float(any_value["doubleValue"])
    if "bytesValue" in any_value:
        return base64.b64decode(any_value["bytesValue"])
    if "arrayValue" in any_value:
        return [value(v) for v in any_value["arrayValue"].get("values", [])]
    if "kvlistValue" in any_value:
        return attributes(any_value["kvlistValue"].get("values", []))
    return None  # an empty AnyValue


def attributes(key_values: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: value(kv.get("value", {})) for kv in key_values}


def _hex(text: str | None) -> str | None:
    return text.lower() if text else None


def flatten(batch: dict[str, Any]) -> list[dict[str, Any]]:
    """Every span of one OTLP JSON export request, as the module's docstring shows it."""
    spans = []
    for resource_spans in batch.get("resourceSpans", []):
        resource = attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scopeSpans", []):
            scope = scope_spans.get("scope", {}).get("name", "")
            for span in scope_spans.get("spans", []):
                status = span.get("status", {})
                spans.append({
                    "name": span.get("name", ""),
                    "traceId": _hex(span.get("traceId")),
                    "spanId": _hex(span.get("spanId")),
                    "parentSpanId": _hex(span.get("parentSpanId")),
                    "kind": _KINDS[int(span.get("kind", 0))],
                    "links": [{"traceId": _hex(link.get("traceId")),
                               "spanId": _hex(link.get("spanId")),
                               "attributes": attributes(link.get("attributes", []))}
                              for link in span.get("links", [])],
                    "attributes": attributes(span.get("attributes", [])),
                    "resource": resource,
                    "scope": scope,
                    "status": {"code": _STATUS[int(status.get("code", 0))],
                               "message": status.get("message", "")},
                    "startTimeUnixNano": int(span.get("startTimeUnixNano", 0)),
                    "endTimeUnixNano": int(span.get("endTimeUnixNano", 0)),
                    "events": [{"name": event.get("name", ""),
                                "attributes": attributes(event.get("attributes", []))}
                               for event in span.get("events", [])],
                })
    return spans


def _brief(span: dict[str, Any]) -> str:
    return f"{span['name']!r} (span {span['spanId']}, parent {span['parentSpanId']})"


class Collector:
    """One collector as the tests see it: ``endpoint`` (the OTLP/HTTP base URL, what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes) and the spans it has written to ``spans_file``."""

    def __init__(self, endpoint: str, spans_file: Path) -> None:
        self.endpoint = endpoint
        self.spans_file = spans_file
        self._offset = 0
        self._partial = b""
        self._by_trace: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self._lines = 0

    def _read_new(self) -> None:
        """The lines written since the last read; a line without its newline yet waits."""
        try:
            with self.spans_file.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                self._lines += 1
                for span in flatten(orjson.loads(line)):
                    # (a batch consumer's span is in a trace of its own and links the
                    # traces it consumed: it belongs to each of them as a trace viewer
                    # shows them)
                    for trace in dict.fromkeys([span["traceId"], *(
                            link["traceId"] for link in span.get("links") or [])]):
                        self._by_trace[trace].append(span)

    async def spans(self, trace_id: str, *, at_least: int, within: float) -> list[dict[str, Any]]:
        """The spans of trace ``trace_id`` (hex), and the spans that link to it, once at
        least ``at_least`` have arrived,
        waiting up to ``within`` seconds; then fails naming what did arrive."""
        trace_id = trace_id.lower()
        if not _TRACE_ID.fullmatch(trace_id):
            raise ValueError(f"trace_id must be 32 hex digits, not {trace_id!r}")
        if at_least < 1 or within <= 0:
            raise ValueError(f"at_least must be 1 or more and within positive, "
                             f"not {at_least} and {within}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            self._read_new()
            found = self._by_trace.get(trace_id, [])
            if len(found) >= at_least:
                return list(found)
            if loop.time() >= deadline:
                arrived = "; ".join(_brief(span) for span in found) or "none"
                raise AssertionError(
                    f"trace {trace_id}: {len(found)} of at least {at_least} spans arrived "
                    f"within {within} s: {arrived} (the collector at {self.endpoint} wrote "
                    f"{self._lines} batches of {len(self._by_trace)} traces to {self.spans_file})")
            await asyncio.sleep(_POLL_SECONDS)
