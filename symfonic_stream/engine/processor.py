"""The processor interface: what flows between the Kafka edges of the engine and the pure
processors.

Processors never touch Kafka: they receive :class:`InputRecord` values and write
:class:`OutputRecord`, :class:`DeadLetter` and counts into a :class:`Collector` (their
stores' changes reach it at the commit). The engine turns what its tasks collected into one
Kafka transaction (``engine/transaction.py``).

Records are NamedTuples rather than frozen dataclasses: the projector builds one per
output on the hot path, and a tuple is created several times faster.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.trace import Headers, trace_headers
from symfonic_stream.observability import tracing
from symfonic_stream.state.store import StateStore

__all__ = [
    "Collector",
    "DeadLetter",
    "DeadLetterReason",
    "Headers",
    "InputRecord",
    "OutputRecord",
    "Processor",
    "feed",
]


class InputRecord(NamedTuple):
    """One consumed record, as the engine hands it to a processor.

    The offline ``project`` command builds these too (``offset`` = 1-based line number),
    so the live and offline paths run the same processor code.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int = 0

    @property
    def source(self) -> str:
        """``topic/partition/offset``: where this record came from."""
        return f"{self.topic}/{self.partition}/{self.offset}"


class OutputRecord(NamedTuple):
    """One record to produce inside the input partition's transaction.

    ``record_type`` feeds the records-out metric (a StreamEvent type, ``end_<status>``,
    ``gap``, ``ticket``, …); ``source_ts`` is the kernel timestamp the end-to-end latency
    histogram is measured from.
    """

    topic: str
    key: bytes | None
    value: bytes | None
    record_type: str
    source_ts: float | None = None
    headers: Headers = ()


class DeadLetter(NamedTuple):
    """A record that could not be processed, with why. The original is kept whole."""

    record: InputRecord
    reason: DeadLetterReason
    detail: str


@dataclass(slots=True)
class Collector:
    """Everything one batch of one input partition produces, in production order.

    ``changelog`` maps a changelog key to its new serialized value (``None`` = tombstone):
    the state stores prepare their changes into it at commit step 2, one value per key,
    which is what a compacted changelog keeps (:mod:`symfonic_stream.state.store`).
    ``counts`` carries processor-level counters (``duplicates``, ``gaps``, ``unknown_kind``)
    for the metrics; ``inputs`` the type of each input record as the processor read it (an
    AgentEvent's kind, ``invalid`` for one it dead-letters): the ``type`` of records in.
    """

    outputs: list[OutputRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    changelog: dict[bytes, bytes | None] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    inputs: Counter[str] = field(default_factory=Counter)
    #: Tickets routed by (queue, kind), resumes by outcome: the pause metrics' labels, from
    #: the processors' own closed sets (never a record's headers, never a tenant).
    tickets: Counter[tuple[str, str]] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)
    #: Claims decided by (queue, outcome), the same way.
    claims: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The checked trace headers of the record being processed (:func:`feed`; none during
    #: a punctuation or at the end of the input): :meth:`emit` carries them onto every
    #: output (docs/metrics.md, "Tracing").
    trace: Headers = ()
    #: Only when tracing is on (:mod:`~symfonic_stream.observability.tracing`): the distinct
    #: trace contexts of the records processed (``traceparent`` → ``tracestate``, bounded),
    #: the transaction span's links; and the per-record spans :meth:`note_span` kept.
    links: dict[bytes, bytes | None] = field(default_factory=dict)
    noted: list[tracing.Noted] = field(default_factory=list)

    def emit(self, record: OutputRecord) -> None:
        """One output; with the trace headers of the record in hand, when it has any."""
        if self.trace:
            record = record._replace(headers=(*record.headers, *self.trace))
        self.outputs.append(record)

    @contextlib.contextmanager
    def carrying(self, trace: Headers) -> Iterator[None]:
        """Within the block :meth:`emit` carries ``trace`` (a processor's own record of the
        context that caused what it emits: a ticket's, on its timers)."""
        before, self.trace = self.trace, trace
        try:
            yield
        finally:
            self.trace = before

    def note_span(self, name: str, **attributes: str | int) -> None:
        """When tracing is on, a span ``name`` for the record in hand, parented by its
        context (none for a record without one), ended when its transaction commits."""
        if tracing.TRACER is not None:
            tracing.note(self.noted, name, self.trace, attributes)

    def dead_letter(self, record: InputRecord, reason: DeadLetterReason, detail: str) -> None:
        self.dead_letters.append(DeadLetter(record, reason, detail[:1024]))

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def count_input(self, record_type: str) -> None:
        self.inputs[record_type] += 1

    def clear(self) -> None:
        self.outputs.clear()
        self.dead_letters.clear()
        self.changelog.clear()
        self.counts.clear()
        self.inputs.clear()
        self.tickets.clear()
        self.resumes.clear()
        self.claims.clear()
        self.trace = ()
        self.links.clear()
        self.noted.clear()


class Processor(Protocol):
    """The pure part of one consumer: what one input partition's records turn into.

    The engine creates one processor per task (input partition), restores its
    :attr:`stores` from the task's changelog, calls :meth:`restored`, then :meth:`process`
    for every record in offset order and :meth:`punctuate` on the clock (gap timeouts,
    grace expiry); a bounded source (a replay) ends with :meth:`end_of_input`. What the
    stores change is the open state transaction's, written at the commit
    (:mod:`symfonic_stream.state.store`). Nothing here does I/O. A processor's memory runs
    ahead of what has committed: when a transaction aborts, its state transactions are
    dropped (the stores hold the last commit) and :meth:`restored` is called again, to
    rebuild what the processor derives from its stores.
    """

    @property
    def stores(self) -> Sequence[StateStore[Any]]:
        """The state stores the engine writes to, and restores from, the changelog."""

    def restored(self) -> None:
        """The stores hold what the changelog held: rebuild what is derived from them."""

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        """Handle one input record at clock time ``now`` (Unix seconds)."""

    def punctuate(self, now: float, out: Collector) -> None:
        """Fire whatever is due at ``now`` even when no record arrives."""

    def end_of_input(self, out: Collector) -> None:
        """A bounded source has nothing more: its end stands in for every timeout."""

    @property
    def buffered_events(self) -> int:
        """Events currently held behind holes (a gauge)."""

    @property
    def active_runs(self) -> int:
        """Runs (or tickets) currently in the state stores (a gauge)."""


def feed(processor: Processor, record: InputRecord, now: float, out: Collector) -> None:
    """``processor.process(record, now, out)`` with ``record``'s checked trace headers in
    hand (:attr:`Collector.trace`): how the engine, a replay and the offline command hand
    a processor each record, so that what it emits for the record carries its context."""
    headers = record.headers
    if not headers:  # (the common case, and nothing to carry: no context manager per record)
        processor.process(record, now, out)
        return
    trace = trace_headers(headers)
    if trace and tracing.TRACER is not None:  # (off: this check is all tracing costs)
        tracing.link(out.links, trace)
    before, out.trace = out.trace, trace
    try:
        processor.process(record, now, out)
    finally:
        out.trace = before


class Stateless:
    """What a processor with no state and no timers (the copier, the resume intake) has
    of :class:`Processor` besides ``process``: nothing to restore, fire or hold back."""

    #: No state store: nothing in a changelog.
    stores: tuple[()] = ()

    def restored(self) -> None:
        """Nothing to restore."""

    def punctuate(self, now: float, out: Collector) -> None:
        """No timers."""

    def end_of_input(self, out: Collector) -> None:
        """Nothing held back."""

    @property
    def buffered_events(self) -> int:
        return 0

    @property
    def active_runs(self) -> int:
        return 0
