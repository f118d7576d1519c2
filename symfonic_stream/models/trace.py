"""W3C Trace Context on Kafka records: a record's ``traceparent`` and ``tracestate``
headers, checked, so that the context can be carried onto what is projected from it
(docs/metrics.md, "Tracing"; https://www.w3.org/TR/trace-context/).

A record's own trace headers are hostile input like the rest of it. A ``traceparent`` is
carried only when it is version ``00`` exactly as W3C writes it (``00-<32 hex trace id, not
all zero>-<16 hex parent id, not all zero>-<2 hex flags>``, lowercase, 55 bytes) and the
record has exactly one; else neither it nor the ``tracestate`` is carried (W3C: without a
valid ``traceparent`` the ``tracestate`` means nothing). A ``tracestate`` (several are
joined with ``,``, as HTTP joins repeated headers) is carried when it is at most 512 bytes
of at most 32 well-formed, distinct list members; else it is dropped and the
``traceparent`` alone is carried. A bad trace header is never a reason to dead-letter a
record: it is dropped, never copied.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, PrivateAttr

from symfonic_stream.models.headers import TRACEPARENT_HEADER, TRACESTATE_HEADER

__all__ = [
    "TRACESTATE_MAX_BYTES",
    "TRACESTATE_MAX_MEMBERS",
    "TRACE_HEADERS",
    "Headers",
    "TraceContext",
    "Traced",
    "trace_headers",
    "without_trace",
]

#: The header names this module owns (a record's are replaced by its checked ones).
TRACE_HEADERS = frozenset({TRACEPARENT_HEADER, TRACESTATE_HEADER})
#: W3C's bounds of a ``tracestate``: list members, and the length it must propagate.
TRACESTATE_MAX_MEMBERS = 32
TRACESTATE_MAX_BYTES = 512

_TRACEPARENT = re.compile(rb"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE_ID = b"0" * 32
_ZERO_PARENT_ID = b"0" * 16
# W3C tracestate list members: a simple key, or a multi-tenant ``tenant@system`` key; a
# value of printable ASCII without ``,`` and ``=``, not ending in a space.
_MEMBER = re.compile(
    r"(?P<key>[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)

#: Kafka headers as the consumers hold them (name, bytes).
Headers = tuple[tuple[str, bytes], ...]


def _valid_traceparent(value: bytes) -> bool:
    return (_TRACEPARENT.fullmatch(value) is not None and value[3:35] != _ZERO_TRACE_ID
            and value[36:52] != _ZERO_PARENT_ID)


def _checked_tracestate(joined: bytes) -> bytes | None:
    """The ``tracestate`` to carry, or None: empty or invalid."""
    if len(joined) > TRACESTATE_MAX_BYTES or not _valid_tracestate(joined):
        return None
    return joined


#: A trace's records mostly repeat their vendors' state: checked once each, up to a bound.
@functools.lru_cache(maxsize=1024)
def _valid_tracestate(joined: bytes) -> bool:
    if not joined.strip(b" \t,"):
        return False
    try:
        text = joined.decode("ascii")
    except UnicodeDecodeError:
        return False
    keys: set[str] = set()
    for part in text.split(","):
        member = part.strip(" \t")
        if not member:
            continue  # (W3C allows empty list members; they do not count)
        match = _MEMBER.fullmatch(member)
        if match is None or match.group("key") in keys:
            return False
        keys.add(match.group("key"))
        if len(keys) > TRACESTATE_MAX_MEMBERS:
            return False
    return True


def trace_headers(headers: Iterable[tuple[str, bytes | None]]) -> Headers:
    """The trace headers of a record with ``headers``, checked: ``(traceparent,)`` or
    ``(traceparent, tracestate)``, or ``()`` when it has no valid context (the module's
    rules). What every record projected from it carries."""
    parent: bytes | None = None
    states: list[bytes] = []
    size = 0  # (of the states joined: past the bound, none is kept; no quadratic joins)
    for name, value in headers:
        if name == TRACEPARENT_HEADER:
            if parent is not None:
                return ()  # (two: which one is the record's?)
            parent = value or b""
        elif name == TRACESTATE_HEADER:
            size += len(value or b"") + 1
            if size <= TRACESTATE_MAX_BYTES + 1:
                states.append(value or b"")
    if parent is None or not _valid_traceparent(parent):
        return ()
    state = None
    if states and size <= TRACESTATE_MAX_BYTES + 1:
        state = _checked_tracestate(states[0] if len(states) == 1 else b",".join(states))
    if state is None:
        return ((TRACEPARENT_HEADER, parent),)
    return ((TRACEPARENT_HEADER, parent), (TRACESTATE_HEADER, state))


def without_trace(headers: Iterable[tuple[str, bytes]]) -> Headers:
    """``headers`` without any trace header (to put checked ones in their place)."""
    return tuple(header for header in headers if header[0] not in TRACE_HEADERS)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One W3C trace context, checked: what the SDKs take from a caller and give back with
    each record they read (``traceparent``, and ``tracestate`` when there is one)."""

    traceparent: str
    tracestate: str | None = None

    def __post_init__(self) -> None:
        if not _valid_traceparent(self.traceparent.encode("utf-8", "replace")):
            raise ValueError(f"not a W3C traceparent (version 00): {self.traceparent[:64]!r}")
        if self.tracestate is not None and _checked_tracestate(
                self.tracestate.encode("utf-8", "replace")) is None:
            raise ValueError(f"not a W3C tracestate (at most {TRACESTATE_MAX_MEMBERS} members, "
                             f"{TRACESTATE_MAX_BYTES} bytes): {self.tracestate[:64]!r}")

    @property
    def trace_id(self) -> str:
        """The 32 hex digits of the trace."""
        return self.traceparent[3:35]

    @property
    def parent_id(self) -> str:
        """The 16 hex digits of the span (or record) that is the parent."""
        return self.traceparent[36:52]

    @property
    def sampled(self) -> bool:
        return bool(int(self.traceparent[53:55], 16) & 1)

    @property
    def headers(self) -> Headers:
        """As Kafka headers."""
        if self.tracestate is None:
            return ((TRACEPARENT_HEADER, self.traceparent.encode()),)
        return ((TRACEPARENT_HEADER, self.traceparent.encode()),
                (TRACESTATE_HEADER, self.tracestate.encode()))

    @classmethod
    def of_headers(cls, headers: Iterable[tuple[str, bytes | None]] | None) -> TraceContext | None:
        """The checked context of a record's ``headers`` (None: it carries none valid)."""
        checked = trace_headers(headers or ())
        if not checked:
            return None
        return cls(*(value.decode("ascii") for _, value in checked))

    @classmethod
    def of_carrier(cls, carrier: dict[str, str]) -> TraceContext | None:
        """The checked context in a text map (what an OpenTelemetry propagator injects)."""
        return cls.of_headers([(name.lower(), value.encode("utf-8", "replace"))
                               for name, value in carrier.items()])


class Traced(BaseModel):
    """A record model the SDKs read with its record's trace context (:attr:`trace_context`:
    None when the record carries none valid). Not a field: not in the JSON, nor in the
    schemas; pydantic's equality compares it, though."""

    _trace_context: TraceContext | None = PrivateAttr(default=None)

    @property
    def trace_context(self) -> TraceContext | None:
        """The checked W3C trace context of the Kafka record this was read from."""
        return self._trace_context

    def traced(self, headers: Iterable[tuple[str, bytes | None]] | None) -> None:
        """Take the trace context of the record with ``headers`` (an SDK's, once, when it
        reads the record)."""
        self._trace_context = TraceContext.of_headers(headers)
