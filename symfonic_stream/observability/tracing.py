"""Spans, when tracing is on (docs/metrics.md, "Tracing"): the OpenTelemetry SDK, a batch
span processor and the OTLP/HTTP exporter, configured by the standard ``OTEL_*`` variables
(the ``otel`` extra). Off by default.

Tracing is on when ``OTEL_TRACES_EXPORTER=otlp``, or when that is unset and an OTLP
endpoint is (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
``OTEL_TRACES_EXPORTER=none`` and ``OTEL_SDK_DISABLED=true`` turn it off whatever else is
set. Off, :data:`TRACER` is None and the hot path checks only that (one module attribute):
no tracer is called, no link is kept.

What becomes a span: each transaction (kind CONSUMER, linked to the distinct trace contexts
of the records it consumed, at most :data:`LINKS_MAX`: a batch consumer links, it does not
parent), each restore and each rebalance, and the review path's decisions per record (a
ticket routed, a claim decided, an answer's verdict), parented by the record's own context
and ended when their transaction commits; and each stream the gateway serves, in its run's
context. The attribute names follow the OpenTelemetry messaging
conventions: the old names by default, the new ones when ``OTEL_SEMCONV_STABILITY_OPT_IN``
names ``messaging`` (both for ``messaging/dup``), as instrumentations do.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symfonic_stream.config import ConfigError
from symfonic_stream.models.trace import Headers

__all__ = [
    "EXTRA",
    "LINKS_MAX",
    "NOTED_MAX",
    "TRACER",
    "Noted",
    "configure",
    "install",
    "link",
    "record_spans",
    "shutdown",
    "span",
    "stream_span",
    "transaction_span",
    "wanted",
]

#: The extra that installs the SDK and the exporter.
EXTRA = "otel"
#: Links of one transaction span, and per-record spans one task's transaction keeps.
LINKS_MAX = 128
NOTED_MAX = 1024

#: The tracer when tracing is on; None when off (what the hot path checks, and only that).
TRACER: Any | None = None
_provider: Any | None = None
#: Which messaging attribute names the spans carry: "old", "new" or "dup" (both).
_names = "old"

_SAMPLERS = {"always_on", "always_off", "traceidratio", "parentbased_always_on",
             "parentbased_always_off", "parentbased_traceidratio"}
_PROTOCOLS = {"http/protobuf"}
_COMPRESSIONS = {"gzip", "deflate", "none"}
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_POSITIVE_INTEGERS = ("OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT",
                      "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
#: (The Python exporter reads its timeout in seconds, a number.)
_POSITIVE_NUMBERS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")


def _value(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables of ``environ`` ask for tracing; every one read is
    checked (:class:`ConfigError` naming the variable)."""
    disabled = _value(environ, "OTEL_SDK_DISABLED").lower()
    if disabled not in ("", "true", "false"):
        raise ConfigError(f"OTEL_SDK_DISABLED must be true or false, not {disabled[:32]!r}")
    exporter = _value(environ, "OTEL_TRACES_EXPORTER").lower()
    if exporter not in ("", "otlp", "none"):
        raise ConfigError(f"OTEL_TRACES_EXPORTER must be otlp or none (the only exporter "
                          f"installed is OTLP/HTTP), not {exporter[:32]!r}")
    endpoint = any(_value(environ, name) for name in _ENDPOINTS)
    on = exporter == "otlp" or (exporter == "" and endpoint)
    if disabled == "true" or not on:
        return False
    _check(environ)
    return True


def _check(environ: Mapping[str, str]) -> None:
    for name in _ENDPOINTS:
        url = _value(environ, name)
        if url:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{name} must be an http:// or https:// URL with a host, "
                                  f"not {url[:64]!r}")
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        protocol = _value(environ, name)
        if protocol and protocol not in _PROTOCOLS:
            raise ConfigError(f"{name} must be http/protobuf (the exporter installed), "
                              f"not {protocol[:32]!r}")
    for name in ("OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"):
        compression = _value(environ, name)
        if compression and compression not in _COMPRESSIONS:
            raise ConfigError(f"{name} must be one of {sorted(_COMPRESSIONS)}, "
                              f"not {compression[:32]!r}")
    for name in _POSITIVE_INTEGERS:
        number = _value(environ, name)
        if number and not (number.isascii() and number.isdigit() and int(number) > 0):
            raise ConfigError(f"{name} must be a positive whole number, not {number[:32]!r}")
    for name in _POSITIVE_NUMBERS:
        number = _value(environ, name)
        if number and not 0 < _number(number) < float("inf"):
            raise ConfigError(f"{name} must be a positive number of seconds, "
                              f"not {number[:32]!r}")
    sampler = _value(environ, "OTEL_TRACES_SAMPLER")
    if sampler and sampler not in _SAMPLERS:
        raise ConfigError(f"OTEL_TRACES_SAMPLER must be one of {sorted(_SAMPLERS)}, "
                          f"not {sampler[:32]!r}")
    argument = _value(environ, "OTEL_TRACES_SAMPLER_ARG")
    if argument and sampler.endswith("traceidratio") and not 0.0 <= _number(argument) <= 1.0:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, "
                          f"not {argument[:32]!r}")


def _number(text: str) -> float:
    """``text`` as a number; NaN (no comparison holds) when it is none."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


def names_of(environ: Mapping[str, str]) -> str:
    """The attribute names ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for: "old", "new", "dup"."""
    opted = {part.strip() for part in _value(environ, "OTEL_SEMCONV_STABILITY_OPT_IN").split(",")}
    if "messaging/dup" in opted:
        return "dup"
    return "new" if "messaging" in opted else "old"


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"tracing is on (OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT) and needs "
            f"the [{EXTRA}] extra: pip install 'symfonic-stream[{EXTRA}]' ({exc})") from None


def configure(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Tracing as ``environ``'s ``OTEL_*`` variables say (default: the process's): when on,
    a tracer provider with a batch span processor and the OTLP/HTTP exporter, named
    ``service`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) names it.
    Whether it is on. Bad variables, or a missing extra, raise :class:`ConfigError`."""
    environ = os.environ if environ is None else environ
    if not wanted(environ):
        return False
    sdk_trace = _import("opentelemetry.sdk.trace")
    export = _import("opentelemetry.sdk.trace.export")
    resources = _import("opentelemetry.sdk.resources")
    otlp = _import("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    named = _value(environ, "OTEL_SERVICE_NAME") or "service.name=" in _value(
        environ, "OTEL_RESOURCE_ATTRIBUTES")
    resource = resources.Resource.create({} if named else {"service.name": service})
    provider = sdk_trace.TracerProvider(resource=resource)
    provider.add_span_processor(export.BatchSpanProcessor(otlp.OTLPSpanExporter()))
    install(provider, environ)
    return True


def install(provider: Any, environ: Mapping[str, str] | None = None) -> None:
    """Tracing on with ``provider`` (an SDK ``TracerProvider``; the tests' has an in-memory
    exporter), the attribute names as ``environ`` opts in."""
    global TRACER, _provider, _names
    from symfonic_stream import __version__
    _names = names_of(os.environ if environ is None else environ)
    _provider = provider
    TRACER = provider.get_tracer("symfonic_stream", __version__)


def shutdown() -> None:
    """Tracing off: every span ended so far exported (flushed), the provider shut down."""
    global TRACER, _provider
    provider, TRACER, _provider = _provider, None, None
    if provider is not None:
        provider.force_flush()
        provider.shutdown()


# -- contexts and links --------------------------------------------------------------------

def link(links: dict[bytes, bytes | None], trace: Headers) -> None:
    """Keep a record's checked ``trace`` headers among ``links`` (distinct, at most
    :data:`LINKS_MAX`), for its transaction span."""
    if len(links) < LINKS_MAX:
        links.setdefault(trace[0][1], trace[1][1] if len(trace) > 1 else None)


def _span_context(traceparent: bytes, tracestate: bytes | None) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags
    return SpanContext(
        trace_id=int(traceparent[3:35], 16), span_id=int(traceparent[36:52], 16),
        is_remote=True, trace_flags=TraceFlags(int(traceparent[53:55], 16)),
        trace_state=_trace_state(tracestate) if tracestate else None)


#: A trace's records mostly repeat their vendors' state: parsed once each (it is immutable),
#: up to a bound.
@functools.lru_cache(maxsize=1024)
def _trace_state(tracestate: bytes) -> Any:
    from opentelemetry.trace import TraceState
    return TraceState.from_header([tracestate.decode("ascii")])


def _link_of(traceparent: bytes, tracestate: bytes | None) -> Any:
    from opentelemetry.trace import Link
    return Link(_span_context(traceparent, tracestate))


# -- spans -----------------------------------------------------------------------------------

def _messaging(consumer: str, group: str | None, topics: Sequence[str],
               partition: int | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"messaging.system": "kafka", "symfonic.consumer": consumer}
    if topics:
        attributes["messaging.destination.name"] = ",".join(topics)
    if _names in ("old", "dup"):
        attributes["messaging.operation"] = "process"
        if group:
            attributes["messaging.kafka.consumer.group"] = group
        if partition is not None:
            attributes["messaging.kafka.destination.partition"] = partition
    if _names in ("new", "dup"):
        attributes["messaging.operation.type"] = "process"
        attributes["messaging.operation.name"] = "process"
        if group:
            attributes["messaging.consumer.group.name"] = group
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
    return attributes


def transaction_span(consumer: str, group: str | None, topics: Sequence[str],
                     partition: int | None, links: Iterable[dict[bytes, bytes | None]],
                     consumed: int, written: int, outcome: str, start_ns: int) -> Any:
    """One transaction's span, ended now (the caller checked :data:`TRACER`): its context."""
    from opentelemetry.trace import SpanKind
    assert TRACER is not None
    linked: dict[bytes, bytes | None] = {}
    for each in links:
        for traceparent, tracestate in each.items():
            if len(linked) >= LINKS_MAX:
                break
            linked.setdefault(traceparent, tracestate)
    attributes = _messaging(consumer, group, topics, partition)
    attributes.update({"messaging.batch.message_count": consumed,
                       "symfonic.transaction.records_written": written,
                       "symfonic.transaction.outcome": outcome})
    destination = ",".join(topics) or consumer
    name = f"{destination} process" if _names == "old" else f"process {destination}"
    span_ = TRACER.start_span(name, kind=SpanKind.CONSUMER, attributes=attributes,
                              links=[_link_of(*pair) for pair in linked.items()],
                              start_time=start_ns)
    span_.end()
    return span_.get_span_context()


@dataclass(frozen=True, slots=True)
class Noted:
    """A per-record decision to become a span when its transaction commits: its name, the
    record's checked trace headers (its parent), when it was made, its attributes."""

    name: str
    trace: Headers
    at_ns: int
    attributes: Mapping[str, str | int]


def note(noted: list[Noted], name: str, trace: Headers, attributes: Mapping[str, str | int]
         ) -> None:
    """Keep a per-record span (the caller checked :data:`TRACER`; a record without a
    context gets none: tracing joins a run's trace, it does not start one per record)."""
    if trace and len(noted) < NOTED_MAX:
        noted.append(Noted(name, trace, time.time_ns(), attributes))


def record_spans(noted: Iterable[Noted], transaction: Any) -> None:
    """The per-record spans of a committed transaction, each a child of its record's context,
    linked to the transaction's span (``transaction``, its context)."""
    from opentelemetry.trace import Link
    assert TRACER is not None
    for each in noted:
        span_ = TRACER.start_span(each.name, context=_parent(each.trace),
                                  attributes=each.attributes,
                                  links=[Link(transaction)] if transaction else None,
                                  start_time=each.at_ns)
        span_.end()


def _parent(trace: Headers) -> Any:
    """The context whose span is a record's context (``trace``, checked and not empty)."""
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context
    return set_span_in_context(NonRecordingSpan(_span_context(
        trace[0][1], trace[1][1] if len(trace) > 1 else None)))


def stream_span(trace: Headers, attributes: Mapping[str, str | int], start_ns: int) -> None:
    """A gateway's stream of one run, ended now (the caller checked :data:`TRACER`): kind
    SERVER, a child of the run's context (``trace``), a root span when the run has none."""
    from opentelemetry.trace import SpanKind
    assert TRACER is not None
    span_ = TRACER.start_span("stream served", context=_parent(trace) if trace else None,
                              kind=SpanKind.SERVER, attributes=attributes,
                              start_time=start_ns)
    span_.end()


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, str | int | Sequence[int]]) -> Iterator[None]:
    """An INTERNAL span around the block when tracing is on (a restore, a rebalance: not
    the hot path), current within it (a restore's span is its rebalance's child)."""
    if TRACER is None:
        yield
        return
    with TRACER.start_as_current_span(name, attributes=dict(attributes)):
        yield
