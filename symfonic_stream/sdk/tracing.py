"""The caller's OpenTelemetry context, when ``opentelemetry-api`` is installed (the
``tracing`` extra): what the publisher and the reviewer inject into the records they write
when the caller names no context of its own (docs/metrics.md, "Tracing").

Only W3C Trace Context is injected (``traceparent``, ``tracestate``), by the API's own
``TraceContextTextMapPropagator``, whatever the process's global propagators are: baggage
is not carried. Without the package, or without a current span, nothing is injected.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from symfonic_stream.models.trace import TraceContext

__all__ = ["TraceLike", "current_context", "trace_context"]

#: What the SDKs take as a context: a checked one, a ``traceparent`` string, or None.
TraceLike = TraceContext | str | None


@functools.cache
def _propagator() -> Any:
    """The API's W3C propagator, or None without ``opentelemetry-api`` (looked for once)."""
    try:
        module = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
    except ImportError:
        return None
    return module.TraceContextTextMapPropagator()


def current_context() -> TraceContext | None:
    """The caller's current OpenTelemetry span context as a W3C context (None: no
    ``opentelemetry-api``, no current span, or one that is not valid)."""
    propagator = _propagator()
    if propagator is None:
        return None
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return TraceContext.of_carrier(carrier) if carrier else None


def trace_context(given: TraceLike) -> TraceContext | None:
    """``given`` (a ``traceparent`` string is checked: ``ValueError`` when it is not W3C),
    else the caller's current context."""
    if isinstance(given, str):
        return TraceContext(given)
    return given if given is not None else current_context()
