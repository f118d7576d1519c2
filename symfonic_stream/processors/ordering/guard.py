"""The ordering guard: the kernel's order out of whatever order Kafka delivered.

Per run it keeps the next expected index and the next output ``seq``. An event at the
expected index is released (projected, numbered, emitted) together with everything
buffered right behind it; an earlier or already-buffered index is a duplicate; a later one
waits. A hole that stays open past the gap timeout, or a buffer past its bound, becomes a
``gap`` record: lost data is reported, never invented, never waited for forever.

Everything the guard will have to write for an event is checked when the event arrives
(its outputs' sizes, its state record's size): what cannot be carried is dead-lettered
then, never later, when it would fail a punctuation or a commit (docs/engine.md, "Bounds").

Time is always passed in (``now``), never read, so the same input and clock give the same
output: the live engine passes the wall clock, the offline command passes nothing and
calls :meth:`OrderingGuard.flush` at the end of its input instead. (The one clock read,
:mod:`.expiry`'s time budget, decides only how much of what is due one punctuation does.)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.models.agent_event import CLOSING_KINDS, KNOWN_KINDS, AgentEvent
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import decode_accepted
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.processors.expiring import pause_kept_until
from symfonic_stream.processors.ordering.run_state import (
    Pending,
    RunState,
    RunStatus,
    decode_pending,
    decode_run,
    encode_pending,
    encode_run,
    pending_key,
)
from symfonic_stream.processors.ownership import refuse_foreign
from symfonic_stream.projections import Projection
from symfonic_stream.state.store import Codec, StateStore

_END_STATUS = {"done": "completed", "error": "error", "cancelled": "cancelled"}
_dumps = orjson.dumps
# Output records are built with ``tuple.__new__`` on the hot path: the NamedTuple's own
# ``__new__`` is a generated Python function (defaults, keywords) that costs more than
# the tuple. That needs the exact field order, checked here once.
_new_record = tuple.__new__
if OutputRecord._fields != ("topic", "key", "value", "record_type", "source_ts", "headers"):
    raise RuntimeError(f"OutputRecord changed its fields: update {__file__}")

# The hot path's two status tests read these: an enum member looked up on its class
# costs five times a module global (Python 3.11).
_CLOSED, _PAUSED = RunStatus.CLOSED, RunStatus.PAUSED

#: One release's records: (value, record_type) each, in order.
Released = list[tuple[bytes, str]]


@dataclass(frozen=True, slots=True)
class GuardLimits:
    """contract §5's bounds and the guard's share of the state bounds (docs/configuration.md:
    SYMFONIC_GAP_TIMEOUT_S, _RUN_BUFFER_MAX, _CLOSED_RUN_GRACE_S, _RUN_IDLE_TIMEOUT_S,
    _BUFFER_MAX_BYTES, _MAX_OUTPUT_BYTES, _MAX_STATE_RECORD_BYTES, _PUNCTUATE_BUDGET_MS)."""

    gap_timeout_s: float = 30.0
    run_buffer_max: int = 1000
    closed_run_grace_s: float = 600.0
    #: An open run with no event for this long ends ``abandoned`` (0: never).
    run_idle_timeout_s: float = 3600.0
    #: Most bytes one partition's runs may hold behind holes, in all.
    buffer_max_bytes: int = 64 * 1024 * 1024
    #: Largest output record value (an envelope).
    max_output_bytes: int = 1_000_000
    #: Largest state record (a buffered event's changelog value).
    max_state_bytes: int = 2 * 1024 * 1024
    #: Longest one punctuation may run (a fraction of the session timeout).
    punctuate_budget_s: float = 0.05
    #: With the runs on disk: how far ahead their deadlines are kept in memory; a sweep over
    #: the runs, every half of it, schedules those that come within (``expiry.sweep``).
    deadline_horizon_s: float = 600.0


def owner_headers(run: RunState) -> tuple[tuple[str, bytes], ...]:
    """The headers of every record of ``run``: its owner's ``symfonic-tenant`` (contract §9;
    none when its owner named no tenant), so a reader, the gateway among them, knows whose
    each record is from the record alone."""
    tenant = run.tenant
    return ((TENANT_HEADER, tenant.encode()),) if tenant else ()


#: How a run's state, and a buffered event, travel in the changelog (:mod:`.run_state`).
RUN_CODEC: Codec[RunState] = Codec(encode_run, decode_run)
PENDING_CODEC: Codec[Pending] = Codec(encode_pending, decode_pending)


#: The events one run holds behind its holes, by index.
Held = dict[int, Pending]


class OrderingGuard:
    """The guard for every run of one input partition: runs in the ``run`` store, events
    waiting behind holes in the ``buf`` store, and, derived from it in memory, ``held``:
    each run's waiting events by index.

    Each run has one deadline in the run store, never later than when something is due
    for it (its oldest buffered event's gap timeout, its idle timeout, its pause's expiry,
    its grace once closed): a punctuation (:mod:`.expiry`) visits only runs whose deadline
    passed, and works out there what is really due.
    """

    def __init__(self, projection: Projection, output_topic: str, limits: GuardLimits) -> None:
        self._project = projection
        self._topic = output_topic
        self.limits = limits
        self.runs: StateStore[RunState] = StateStore("run", RUN_CODEC)
        self.waiting: StateStore[Pending] = StateStore("buf", PENDING_CODEC)
        self.buffered = 0
        self.buffered_bytes = 0
        #: The runs with something buffered, the longest waiting first (the bytes bound's
        #: order), each with its events by index: what the ``buf`` store holds, in memory.
        #: An OrderedDict: a dict's first key is found past every key deleted before it.
        self.held: OrderedDict[str, Held] = OrderedDict()
        #: With the runs on disk (``expiry.sweep``): whether a sweep over them is under way,
        #: the last run it visited, and the horizon their deadlines are kept until (0: none
        #: yet, every deadline kept).
        self.sweeping = False
        self.swept_to: str | None = None
        self.horizon = 0.0

    # -- the hot path -----------------------------------------------------------------

    def accept(self, event: AgentEvent, record: InputRecord, now: float, out: Collector) -> None:
        """Take one decoded event; emit whatever it releases."""
        run_id = event.run_id
        runs = self.runs
        run = runs.get(run_id)
        new = run is None
        scope = event.scope
        tenant = scope.tenant if scope is not None else None
        if run is None:
            run = RunState(touched_at=now, tenant=tenant)
        elif run.tenant != tenant:  # another tenant's event, or a run of no known owner
            if refuse_foreign(run, run_id, tenant, record, out):
                return
            runs.touch(run_id)
        index = event.index
        held = self.held.get(run_id)
        if index < run.next_index or (held is not None and index in held):
            out.count("duplicates")
            return
        if run.status is _CLOSED:
            out.dead_letter(
                record,
                DeadLetterReason.RUN_CLOSED,
                f"run {run_id!r} ended at index {run.next_index - 1}; index {index} came after",
            )
            return
        if index > run.next_index:
            if self._hold(run_id, run, event, record, now, out):
                if new:
                    runs.put(run_id, run)
                self._limit_buffers(run_id, run, now, out)
            return
        released = self.prepare(run_id, run, event, record, out)
        if released is None:
            return
        if new:
            runs.put(run_id, run)
        else:
            runs.touch(run_id)
        run.touched_at = now
        self._release(run_id, run, event, released, now, out)
        if new:
            self.reschedule(run_id, run)
        # Only a run with something buffered can release more.
        if held is not None:
            self.drain(run_id, run, now, out)

    def flush(self, out: Collector) -> None:
        """End of input (offline, a replay's range): every hole still open becomes a gap."""
        for run_id, _ in self.runs.items():  # in the order runs were first seen
            if run_id not in self.held:
                continue
            run = self.runs.get(run_id)
            while run is not None and run_id in self.held:
                self.fill_first_hole(run_id, run, 0.0, out)

    def forget_all(self) -> None:
        """Delete every run and buffered event (a tombstone each at the next commit)."""
        for run_id, _ in self.runs.items():
            self.runs.delete(run_id)
        for key, _ in self.waiting.items():
            self.waiting.delete(key)
        self.buffered = self.buffered_bytes = 0
        self.held.clear()

    def run(self, run_id: str) -> RunState | None:
        """One run's state (for tests and tools)."""
        return self.runs.get(run_id)

    # -- checking what an event will need, when it arrives -------------------------------

    def prepare(
        self, run_id: str, run: RunState, event: AgentEvent, record: InputRecord,
        out: Collector,
    ) -> Released | None:
        """Everything releasing ``event`` now would write, or None: it was dead-lettered
        (a projection that raises, an output over the size bound). Nothing has changed."""
        try:
            released = self._records_of(run_id, run, event)
        except Exception as exc:  # a projection bug must cost this record, not the partition
            out.dead_letter(record, DeadLetterReason.INVALID_EVENT,
                            f"cannot be projected: {type(exc).__name__}: {exc}")
            return None
        largest = 0
        for value, _ in released:  # (a loop: a generator costs more than one or two records)
            if len(value) > largest:
                largest = len(value)
        if largest > self.limits.max_output_bytes:
            out.dead_letter(record, DeadLetterReason.TOO_LARGE,
                            f"its output would be {largest} bytes, "
                            f"limit {self.limits.max_output_bytes}")
            return None
        return released

    def _hold(self, run_id: str, run: RunState, event: AgentEvent, record: InputRecord,
              now: float, out: Collector) -> bool:
        """Buffer ``event`` behind its hole, if what it will need fits (else dead-letter)."""
        if self.prepare(run_id, run, event, record, out) is None:
            return False
        pending = Pending(record, now, event.timestamp)
        key = pending_key(run_id, event.index)
        pending.size = len(encode_pending(pending))
        state_record = pending.size + len(key) + 4  # (the key carries its store's prefix)
        if state_record > self.limits.max_state_bytes:
            out.dead_letter(record, DeadLetterReason.TOO_LARGE,
                            f"waiting behind a hole it would take a {state_record}-byte state "
                            f"record, limit {self.limits.max_state_bytes}")
            return False
        held = self.held.get(run_id)
        if held is None:
            held = self.held[run_id] = {}
        held[event.index] = pending
        self.waiting.put(key, pending)
        self.buffered += 1
        self.buffered_bytes += pending.size
        run.touched_at = now
        self.runs.touch(run_id)
        self.reschedule(run_id, run)
        return True

    def _limit_buffers(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        """A run's buffer past its bound, or the partition's buffered bytes past theirs:
        the first hole (of this run, of the longest waiting run) becomes a gap."""
        if len(self.held.get(run_id, ())) > self.limits.run_buffer_max:
            self.fill_first_hole(run_id, run, now, out)
        while self.buffered_bytes > self.limits.buffer_max_bytes and self.held:
            oldest = next(iter(self.held))
            waiting = self.runs.get(oldest)
            if waiting is None:  # (paranoid: what is held is derived)
                del self.held[oldest]
                continue
            self.fill_first_hole(oldest, waiting, now, out)
            if oldest in self.held:  # its next hole waits its turn behind the others
                self.held.move_to_end(oldest)

    # -- releasing --------------------------------------------------------------------

    def _records_of(self, run_id: str, run: RunState, event: AgentEvent) -> Released:
        """The records releasing ``event`` writes: its projection, then its end if any."""
        index = event.index
        ts = event.timestamp
        seq = run.next_seq
        released: Released = []
        for body in self._project(event):
            envelope = {"run_id": run_id, "seq": seq, "source_index": index, "ts": ts,
                        "event": body}
            released.append((_dumps(envelope), body["type"]))
            seq += 1
        kind = event.kind
        status = _END_STATUS.get(kind) if kind in CLOSING_KINDS else None
        if status is None and event.interrupt is not None:
            status = "paused"
        if status is not None:
            error = event.error.model_dump() if kind == "error" and event.error else None
            envelope = {"run_id": run_id, "seq": seq, "source_index": index, "ts": ts,
                        "end": {"status": status, "error": error}}
            released.append((_dumps(envelope), f"end_{status}"))
        return released

    def _release(self, run_id: str, run: RunState, event: AgentEvent, released: Released,
                 now: float, out: Collector) -> None:
        key = run_id.encode()
        topic = self._topic
        ts = event.timestamp
        emit = out.emit
        headers = owner_headers(run)
        for value, record_type in released:
            emit(_new_record(OutputRecord, (topic, key, value, record_type, ts, headers)))
        run.next_seq += len(released)
        run.next_index = event.index + 1
        run.last_ts = ts
        kind = event.kind
        if kind not in KNOWN_KINDS:
            out.count("unknown_kind")
        if kind in CLOSING_KINDS:
            self.close(run_id, run, now, out)
        elif event.interrupt is not None:
            run.status = RunStatus.PAUSED
            run.pause_expires_at = event.interrupt.expires_at
            self.reschedule(run_id, run)
        elif run.status is _PAUSED:
            run.status = RunStatus.OPEN  # the run resumed after its pause
            run.pause_expires_at = 0.0

    def drain(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        """Release whatever waits right behind the run's next index."""
        held = self.held.get(run_id)
        while held is not None and run.next_index in held:
            pending = self.unbuffer(run_id, run, run.next_index)
            event = decode_accepted(pending.record.value or b"")
            released = self.prepare(run_id, run, event, pending.record, out)
            if released is None:  # (paranoid: it was checked when it arrived)
                return
            self._release(run_id, run, event, released, now, out)

    def unbuffer(self, run_id: str, run: RunState, index: int) -> Pending:
        """Take one event out of the run's buffer (a tombstone for it at the next commit)."""
        held = self.held[run_id]
        pending = held.pop(index)
        self.waiting.delete(pending_key(run_id, index))
        self.buffered -= 1
        self.buffered_bytes -= pending.size
        if not held:
            del self.held[run_id]
        return pending

    def fill_first_hole(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        """The run's first hole becomes a gap; what waited behind it is released."""
        held = self.held[run_id]
        first = min(held)
        ts = held[first].ts
        envelope = {"run_id": run_id, "seq": run.next_seq, "source_index": None, "ts": ts,
                    "gap": {"from_index": run.next_index, "to_index": first - 1}}
        self.emit(run_id, run, envelope, "gap", ts, out)
        out.count("gaps")
        self.runs.touch(run_id)
        run.next_index = first
        self.drain(run_id, run, now, out)

    def close(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        """The run ended: whatever still waits is late (nothing follows an end record)."""
        run.status = RunStatus.CLOSED
        run.closed_at = now
        for index in sorted(self.held.get(run_id, ())):
            pending = self.unbuffer(run_id, run, index)
            out.dead_letter(
                pending.record,
                DeadLetterReason.RUN_CLOSED,
                f"run {run_id!r} ended at index {run.next_index - 1} while index {index} waited",
            )
        self.runs.touch(run_id)
        self.reschedule(run_id, run)

    def emit(self, run_id: str, run: RunState, envelope: dict[str, Any], record_type: str,
             ts: float, out: Collector) -> None:
        """One record the guard writes of its own (a gap, an abandoned end)."""
        run.next_seq += 1
        out.emit(OutputRecord(self._topic, run_id.encode(), _dumps(envelope), record_type, ts,
                              owner_headers(run)))

    # -- deadlines ----------------------------------------------------------------------

    def oldest_arrival(self, run_id: str) -> float | None:
        """When the run's longest waiting event arrived (None: nothing waits)."""
        held = self.held.get(run_id)
        return None if not held else next(iter(held.values())).arrived_at

    def deadline(self, run_id: str, run: RunState) -> float | None:
        """When something is next due for ``run`` (None: nothing ever, without an event)."""
        limits = self.limits
        if run.status is RunStatus.CLOSED:
            return run.closed_at + limits.closed_run_grace_s
        due: float | None = None
        oldest = self.oldest_arrival(run_id)
        if oldest is not None:
            due = oldest + limits.gap_timeout_s
        idle = limits.run_idle_timeout_s
        if idle > 0:
            ends = run.touched_at + idle
            if run.status is RunStatus.PAUSED:  # until its pause expires, plus the grace
                ends = pause_kept_until(run.pause_expires_at, run.touched_at, idle)
                ends += limits.closed_run_grace_s
            due = ends if due is None else min(due, ends)
        return due

    def reschedule(self, run_id: str, run: RunState) -> None:
        """Keep the run's deadline no later than its next due time (a later one is found
        when the earlier comes up: the hot path never pushes onto the heap)."""
        due = self.deadline(run_id, run)
        if due is None:
            return
        current = self.runs.deadline(run_id)
        if current is None or due < current:
            self.runs.schedule(run_id, due)
