"""The projector: decode → ordering guard → typed or chunk projection, for every run of one
input partition.

The same :class:`ProjectorProcessor` runs live (inside the engine, one per input partition),
offline (the ``project`` command) and in a replay, which is what makes the offline output
the live output's oracle.

**The ordering guard** (:class:`OrderingGuard`) gives the kernel's order back out of
whatever order Kafka delivered. Per run it keeps the next expected index and the next output
``seq``. An event at the expected index is released (projected, numbered, emitted) together
with everything buffered right behind it; an earlier or already-buffered index is a
duplicate; a later one waits. A hole that stays open past the gap timeout, or a buffer past
its bound, becomes a ``gap`` record: lost data is reported, never invented, never waited
for forever. A run id is its first event's tenant's (contract §9).

Everything the guard will have to write for an event is checked when the event arrives
(its outputs' sizes, its state record's size): what cannot be carried is dead-lettered
then, never later, when it would fail a punctuation or a commit (docs/engine.md, "Bounds").

Time is always passed in (``now``), never read, so the same input and clock give the same
output: the live engine passes the wall clock, the offline command passes nothing and
calls :meth:`OrderingGuard.flush` at the end of its input instead. What the clock does (gap
timeouts, idle runs, forgetting) is the clock's section below.

**Its state** is two stores (docs/engine.md, "State stores"):

* ``run/<run_id>``: a :class:`RunState`, an 8-element JSON array (``[next_index, next_seq,
  status, closed_at, touched_at, last_ts, pause_expires_at, tenant]``, typically 40 to 70
  bytes; ``tenant`` the run's owner);
* ``buf/<run_id>/<index>``: one :class:`Buffered` event waiting behind a hole, as its
  original record (so a run that closes while it waits can still dead-letter it whole
  after a restore): a JSON header line, then the raw value as it arrived, unescaped.

So a change writes what changed: a run's counters, or one buffered event, never a run's
whole buffer again. The guard indexes the buffered events by run in memory (``held``),
rebuilt from the ``buf`` store after a restore or an abort.
"""

from __future__ import annotations

import base64
import enum
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from symfonic_stream.engine.processor import Collector, Headers, InputRecord, OutputRecord
from symfonic_stream.models.agent_event import (
    CLOSING_KINDS,
    INVALID_INPUT_LABEL,
    KNOWN_KINDS,
    UNKNOWN_KIND_LABEL,
    AgentEvent,
)
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import (
    DEFAULT_LIMITS,
    DecodeError,
    DecodeLimits,
    decode_accepted,
    decode_record,
)
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.models.trace import trace_headers
from symfonic_stream.processors.expiring import pause_kept_until, within_budget
from symfonic_stream.processors.ownership import UNKNOWN_OWNER, Owner, refuse_foreign
from symfonic_stream.projections import Body, Projection
from symfonic_stream.projections.declared import projection
from symfonic_stream.state.store import Codec, StateStore

log = logging.getLogger(__name__)

# -- a run's state, and a buffered event, in the changelog ------------------------------

class RunStatus(enum.IntEnum):
    OPEN = 0
    PAUSED = 1
    CLOSED = 2


#: The ``touched_at`` of a run read from 0.x state, which had none.
NOT_TOUCHED = -1.0


@dataclass(slots=True)
class Buffered:
    """An event that arrived before its turn, waiting behind a hole: only its record (the
    event is decoded again when it is released, which is rarer than holding it)."""

    record: InputRecord
    arrived_at: float
    #: The event's timestamp: a gap before it carries it as its ``ts``.
    ts: float
    #: Its changelog value's length: what the partition's buffered-bytes bound counts.
    size: int = 0


@dataclass(slots=True)
class RunState:
    next_index: int = 0
    next_seq: int = 0
    status: RunStatus = RunStatus.OPEN
    #: When the run closed (clock time), for its grace.
    closed_at: float = 0.0
    #: When its last event arrived (clock time), for the idle timeout.
    touched_at: float = 0.0
    #: Its last released event's timestamp: an ``abandoned`` end's ``ts``.
    last_ts: float = 0.0
    #: A paused run's pause ``expires_at`` (0: not paused).
    pause_expires_at: float = 0.0
    #: The tenant that owns the run id: its first event's ``scope.tenant`` (None: that
    #: event named none; ``UNKNOWN_OWNER``: read from state written before runs had
    #: owners, its next event's tenant becomes it). Every output of the run carries it;
    #: another tenant's events under the id are dead-lettered ``foreign_tenant`` (contract §9).
    tenant: Owner = None
    #: Events a record of 0.x held in itself, by index (None for any other record): the
    #: guard moves them under ``buf`` keys of their own once restored.
    legacy_buffer: dict[int, Buffered] | None = None


#: A run's state in the changelog: the JSON array of these fields (``tenant`` ``false``:
#: an owner not known yet).
RUN_FIELDS = ("next_index", "next_seq", "status", "closed_at", "touched_at", "last_ts",
              "pause_expires_at", "tenant")


def decode_run(data: bytes) -> RunState:
    """A run's state as :data:`RUN_FIELDS` wrote it, or as an older version did. A
    7-element array was written before runs had owners (its owner is its next event's
    tenant). A 4- or 5-element array is the format of 0.x, before buffered events had their
    own keys: its buffer is read into :attr:`RunState.legacy_buffer`, and the guard writes
    it under ``buf/`` keys once restored."""
    parts = orjson.loads(data)
    state = RunState(
        next_index=parts[0], next_seq=parts[1], status=RunStatus(parts[2]), closed_at=parts[3]
    )
    state.tenant = UNKNOWN_OWNER
    if len(parts) >= 7:
        state.touched_at, state.last_ts, state.pause_expires_at = parts[4], parts[5], parts[6]
        if len(parts) == 8:
            state.tenant = parts[7]
        return state
    state.touched_at = NOT_TOUCHED
    if len(parts) == 5 and parts[4]:
        state.legacy_buffer = {}
        for item in parts[4]:
            buffered_event = _legacy_buffered(item)
            state.legacy_buffer[orjson.loads(item[6])["index"]] = buffered_event
    return state


def _legacy_buffered(item: list[object]) -> Buffered:
    arrived_at, topic, partition, offset, timestamp_ms, key, value, headers = item
    assert isinstance(value, str) and isinstance(headers, list)
    record = InputRecord(str(topic), int(partition), int(offset), _unb64(key),  # type: ignore[call-overload]
                         value.encode(), tuple((str(n), _unb64(d) or b"") for n, d in headers),
                         int(timestamp_ms))  # type: ignore[call-overload]
    event = orjson.loads(value)
    buffered_event = Buffered(record, float(arrived_at), float(event["timestamp"]))  # type: ignore[arg-type]
    buffered_event.size = len(encode_buffered(buffered_event))
    return buffered_event


def buffered_key(run_id: str, index: int) -> str:
    """The ``buf`` store's key of one buffered event."""
    return f"{run_id}/{index}"


def split_buffered_key(key: str) -> tuple[str, int]:
    """Inverse of :func:`buffered_key` (a run id may hold ``/``; an index never does)."""
    run_id, _, index = key.rpartition("/")
    return run_id, int(index)


def encode_buffered(buffered_event: Buffered) -> bytes:
    """One JSON header line (arrival, source, key, headers), then the value, unescaped."""
    record = buffered_event.record
    head = orjson.dumps([
        buffered_event.arrived_at, buffered_event.ts, record.topic, record.partition, record.offset,
        record.timestamp_ms, _b64(record.key),
        [[name, _b64(data)] for name, data in record.headers],
    ])
    return head + b"\n" + (record.value or b"")


def decode_buffered(data: bytes) -> Buffered:
    """Inverse of :func:`encode_buffered` (orjson never writes a raw newline)."""
    head, _, value = data.partition(b"\n")
    arrived_at, ts, topic, partition, offset, timestamp_ms, key, headers = orjson.loads(head)
    record = InputRecord(
        topic=str(topic),
        partition=int(partition),
        offset=int(offset),
        key=_unb64(key),
        value=value,
        headers=tuple((str(name), _unb64(data) or b"") for name, data in headers),
        timestamp_ms=int(timestamp_ms),
    )
    return Buffered(record, float(arrived_at), float(ts), len(data))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: object) -> bytes | None:
    return None if text is None else base64.b64decode(str(text))


# -- the ordering guard ---------------------------------------------------------------------

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


def trace_of(record: InputRecord) -> Headers:
    """``record``'s checked trace headers (:mod:`symfonic_stream.models.trace`)."""
    return trace_headers(record.headers) if record.headers else ()


def owner_headers(run: RunState) -> Headers:
    """The headers of every record of ``run``: its owner's ``symfonic-tenant`` (contract §9;
    none when its owner named no tenant), so a reader, the gateway among them, knows whose
    each record is from the record alone."""
    tenant = run.tenant
    return ((TENANT_HEADER, tenant.encode()),) if tenant else ()


#: How a run's state, and a buffered event, travel in the changelog (:mod:`.run_state`).
RUN_CODEC: Codec[RunState] = Codec.fields(RUN_FIELDS, decode_run)
BUFFERED_CODEC: Codec[Buffered] = Codec(encode_buffered, decode_buffered)


#: The events one run holds behind its holes, by index.
Held = dict[int, Buffered]


class OrderingGuard:
    """The guard for every run of one input partition: runs in the ``run`` store, events
    waiting behind holes in the ``buf`` store, and, derived from it in memory, ``held``:
    each run's waiting events by index.

    Each run has one deadline in the run store, never later than when something is due
    for it (its oldest buffered event's gap timeout, its idle timeout, its pause's expiry,
    its grace once closed): a punctuation (the clock, below) visits only runs whose deadline
    passed, and works out there what is really due.
    """

    def __init__(self, projection: Projection, output_topic: str, limits: GuardLimits) -> None:
        self._project = projection
        self._topic = output_topic
        self.limits = limits
        self.runs: StateStore[RunState] = StateStore("run", RUN_CODEC)
        self.waiting: StateStore[Buffered] = StateStore("buf", BUFFERED_CODEC)
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
        """Take one decoded event; emit whatever it releases. ``record`` is the record in
        hand, whose checked trace headers ``out.trace`` holds (:func:`~symfonic_stream.engine.
        processor.feed`, as the engine hands every record over)."""
        run_id = event.run_id
        runs = self.runs
        run = runs.get(run_id)
        new = run is None
        scope = event.scope
        tenant = scope.tenant if scope is not None else None
        if run is None:
            run = RunState(touched_at=now, tenant=tenant)
        elif run.tenant != tenant and refuse_foreign(run, run_id, tenant, record, out):
            return  # another tenant's event (a run of no known owner is now the tenant's)
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
        run.touched_at = now
        self._release(run_id, run, event, out.trace, released, now, out)  # (``feed``'s)
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
        buffered_event = Buffered(record, now, event.timestamp)
        key = buffered_key(run_id, event.index)
        buffered_event.size = len(encode_buffered(buffered_event))
        state_record = buffered_event.size + len(key) + 4  # (the key carries its store's prefix)
        if state_record > self.limits.max_state_bytes:
            out.dead_letter(record, DeadLetterReason.TOO_LARGE,
                            f"waiting behind a hole it would take a {state_record}-byte state "
                            f"record, limit {self.limits.max_state_bytes}")
            return False
        held = self.held.get(run_id)
        if held is None:
            held = self.held[run_id] = {}
        held[event.index] = buffered_event
        self.waiting.put(key, buffered_event)
        self.buffered += 1
        self.buffered_bytes += buffered_event.size
        run.touched_at = now
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

    def _release(self, run_id: str, run: RunState, event: AgentEvent, trace: Headers,
                 released: Released, now: float, out: Collector) -> None:
        """Emit what ``event`` releases, each record with the run's owner and ``trace``,
        the checked trace headers of the event's own record (held, or in hand)."""
        key = run_id.encode()
        topic = self._topic
        ts = event.timestamp
        emit = out.outputs.append  # (the list's own: no call of the collector's per record)
        headers = owner_headers(run) + trace if trace else owner_headers(run)
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
            buffered_event = self.unbuffer(run_id, run, run.next_index)
            event = decode_accepted(buffered_event.record.value or b"")
            released = self.prepare(run_id, run, event, buffered_event.record, out)
            if released is None:  # (paranoid: it was checked when it arrived)
                return
            self._release(run_id, run, event, trace_of(buffered_event.record), released, now,
                          out)

    def unbuffer(self, run_id: str, run: RunState, index: int) -> Buffered:
        """Take one event out of the run's buffer (a tombstone for it at the next commit)."""
        held = self.held[run_id]
        buffered_event = held.pop(index)
        self.waiting.delete(buffered_key(run_id, index))
        self.buffered -= 1
        self.buffered_bytes -= buffered_event.size
        if not held:
            del self.held[run_id]
        return buffered_event

    def fill_first_hole(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        """The run's first hole becomes a gap; what waited behind it is released. The gap
        carries the trace context of the event that waited behind the hole (the record
        that showed it)."""
        held = self.held[run_id]
        first = min(held)
        ts = held[first].ts
        envelope = {"run_id": run_id, "seq": run.next_seq, "source_index": None, "ts": ts,
                    "gap": {"from_index": run.next_index, "to_index": first - 1}}
        self.emit(run_id, run, envelope, "gap", ts, out, trace_of(held[first].record))
        out.count("gaps")
        run.next_index = first
        self.drain(run_id, run, now, out)

    def close(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        """The run ended: whatever still waits is late (nothing follows an end record)."""
        run.status = RunStatus.CLOSED
        run.closed_at = now
        for index in sorted(self.held.get(run_id, ())):
            buffered_event = self.unbuffer(run_id, run, index)
            out.dead_letter(
                buffered_event.record,
                DeadLetterReason.RUN_CLOSED,
                f"run {run_id!r} ended at index {run.next_index - 1} while index {index} waited",
            )
        self.reschedule(run_id, run)

    def emit(self, run_id: str, run: RunState, envelope: dict[str, Any], record_type: str,
             ts: float, out: Collector, trace: Headers = ()) -> None:
        """One record the guard writes of its own (a gap, an abandoned end), with the
        trace headers it is given (not the record in hand's: an event that fills a hole is
        not what the gap before it came of)."""
        run.next_seq += 1
        out.outputs.append(OutputRecord(self._topic, run_id.encode(), _dumps(envelope),
                                        record_type, ts, owner_headers(run) + trace))

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


# -- the clock: gap timeouts, idle runs abandoned, closed runs forgotten ---------------------
#
# A punctuation visits only the runs whose deadline passed (the run store's heap), and at
# most for ``punctuate_budget_s``: what is left stays due and the next punctuation goes on,
# so the event loop (and with it the consumer's heartbeat) is never held for long, however
# many runs come due at once. A run whose expiry fails is evicted instead of stopping the
# partition.

#: Runs one step of a sweep reads (between two looks at the clock).
SWEEP_SLICE = 512


def punctuate(guard: OrderingGuard, now: float, out: Collector) -> None:
    """Fire what is due at ``now``, for at most the guard's time budget."""
    runs, budget = guard.runs, guard.limits.punctuate_budget_s
    if runs.on_disk:  # the deadlines a sweep schedules: at most half the budget
        began = time.perf_counter()
        sweep(guard, now, budget / 2)
        budget = max(budget / 2, budget - (time.perf_counter() - began))
    for run_id in within_budget(runs.due(now), budget, out):
        run = runs.get(run_id)
        if run is not None:
            _expire_isolated(guard, run_id, run, now, out)


def _expire_isolated(
    guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector
) -> None:
    """:func:`_expire`, and if it raises: nothing it emitted is kept, the run is evicted."""
    outputs, letters = len(out.outputs), len(out.dead_letters)
    counters = run.next_index, run.next_seq
    try:
        _expire(guard, run_id, run, now, out)
    except Exception as exc:
        del out.outputs[outputs:]
        del out.dead_letters[letters:]
        run.next_index, run.next_seq = counters
        log.exception("expiring a run failed; the run is evicted", extra={"run_id": run_id})
        evict(guard, run_id, run, now, out, f"{type(exc).__name__}: {exc}")


def _expire(guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector) -> None:
    limits = guard.limits
    if run.status is RunStatus.CLOSED:
        if run.closed_at + limits.closed_run_grace_s <= now:
            guard.runs.delete(run_id)  # its grace is over: a tombstone at the next commit
            return
    else:
        if run.touched_at == NOT_TOUCHED:  # from 0.x state: its idle clock starts now
            run.touched_at = now
            if run.status is RunStatus.PAUSED and not run.pause_expires_at:
                run.pause_expires_at = now + limits.run_idle_timeout_s
        while ((oldest := guard.oldest_arrival(run_id)) is not None
               and oldest + limits.gap_timeout_s <= now):
            guard.fill_first_hole(run_id, run, now, out)
        due = guard.deadline(run_id, run)
        if _still_open(run) and due is not None and due <= now:
            abandon(guard, run_id, run, now, out)
    due = guard.deadline(run_id, run)
    if due is not None:
        guard.runs.schedule(run_id, due)  # (its entry was taken off the heap)


def abandon(guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector) -> None:
    """No event for the idle timeout (or a pause long expired): every hole becomes a gap,
    then ``end: abandoned`` (``source_index`` null, ``ts`` the last event's), and the run
    closes like any other (contract §5)."""
    while run_id in guard.held and run.status is not RunStatus.CLOSED:
        guard.fill_first_hole(run_id, run, now, out)
    if run.status is RunStatus.CLOSED:  # a filled hole released its closing event
        return
    envelope = {"run_id": run_id, "seq": run.next_seq, "source_index": None,
                "ts": run.last_ts, "end": {"status": "abandoned", "error": None}}
    guard.emit(run_id, run, envelope, "end_abandoned", run.last_ts, out)
    out.count("abandoned_runs")
    guard.close(run_id, run, now, out)


def evict(
    guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector, why: str
) -> None:
    """A run the guard cannot go on with: what it holds is dead-lettered with ``why``, and
    it is closed (so what comes later for it is ``run_closed``, and its grace forgets it)."""
    for index in sorted(guard.held.get(run_id, ())):
        buffered_event = guard.unbuffer(run_id, run, index)
        out.dead_letter(buffered_event.record, DeadLetterReason.INVALID_EVENT,
                        f"run {run_id!r} was evicted: {why}")
    out.count("evicted_runs")
    guard.close(run_id, run, now, out)


def restored(guard: OrderingGuard) -> None:
    """After a restore (or an abort): the events held behind holes, by run (oldest first),
    their counts, and every run's deadline.

    With the runs on disk (``state/disk.py``) only the runs with events held are scheduled
    here; every other run's deadline is left to the sweeps (:func:`sweep`), the first of
    which begins at the next punctuation: reading half a million runs back from the
    database was most of a restart's time (docs/engine.md, "Values on disk")."""
    runs, waiting = guard.runs, guard.waiting
    guard.held = OrderedDict()
    guard.buffered = guard.buffered_bytes = 0
    for key, buffered_event in sorted(waiting.items(), key=lambda item: item[1].arrived_at):
        run_id, index = split_buffered_key(key)
        run = runs.peek(run_id)
        if run is None or run.status is RunStatus.CLOSED or index < run.next_index:
            waiting.delete(key)  # (paranoid: its run moved on in the same transaction)
            continue
        guard.held.setdefault(run_id, {})[index] = buffered_event
        guard.buffered += 1
        guard.buffered_bytes += buffered_event.size
    guard.sweeping, guard.horizon = False, 0.0  # (a sweep begins at the next punctuation)
    runs.limit_deadlines_to(None)
    if runs.on_disk:
        for run_id in list(guard.held):
            run = runs.peek(run_id)
            if run is not None:
                _restore_run(guard, run_id, run)
    else:
        for run_id, run in runs.items():
            _restore_run(guard, run_id, run)


def sweep(guard: OrderingGuard, now: float, budget_s: float) -> None:
    """With the runs on disk, keep in memory only the deadlines due within the horizon.

    Their store drops any deadline later than ``guard.horizon``; a sweep over every run,
    begun each time half of the horizon has passed (``GuardLimits.deadline_horizon_s``),
    schedules the deadlines that are within the new one, a slice of runs at a time for at
    most ``budget_s`` per punctuation, each run read as it is then. A run scheduled meanwhile
    (its events, a punctuation) is passed over. So a deadline beyond the horizon is found by
    the sweep that begins before the horizon passes, as long as a sweep takes less than half
    of it (83,000 runs take a few seconds of punctuations; the horizon is minutes)."""
    runs, limits = guard.runs, guard.limits
    if not guard.sweeping:
        if now < guard.horizon - limits.deadline_horizon_s / 2:
            return
        guard.sweeping, guard.swept_to = True, None
        guard.horizon = now + limits.deadline_horizon_s
        runs.limit_deadlines_to(guard.horizon)
    stop = time.perf_counter() + budget_s
    while time.perf_counter() < stop:
        keys = runs.keys_after(guard.swept_to, SWEEP_SLICE)
        if not keys:
            guard.sweeping = False
            return
        for key in keys:
            if runs.deadline(key) is None:
                _schedule_swept(guard, key)
        guard.swept_to = keys[-1]


def _schedule_swept(guard: OrderingGuard, key: str) -> None:
    run = guard.runs.peek(key)
    if run is not None:
        _restore_run(guard, key, run)


def _restore_run(guard: OrderingGuard, run_id: str, run: RunState) -> None:
    """One restored run (read, not changed): its events of a 0.x record moved under ``buf``
    keys of their own, its deadline scheduled."""
    if run.legacy_buffer:
        held = guard.held.setdefault(run_id, {})
        for index, buffered_event in sorted(run.legacy_buffer.items()):
            key = buffered_key(run_id, index)
            if key not in guard.waiting:
                guard.waiting.put(key, buffered_event)
                held[index] = buffered_event
                guard.buffered += 1
                guard.buffered_bytes += buffered_event.size
        if not held:
            del guard.held[run_id]
        changed = guard.runs.get(run_id)  # (written again, without them)
        assert changed is not None
        changed.legacy_buffer = None
    due = guard.deadline(run_id, run)
    if due is not None:
        guard.runs.schedule(run_id, due)


def _still_open(run: RunState) -> bool:
    """(A function, not an expression: a filled hole may have closed the run.)"""
    return run.status is not RunStatus.CLOSED


# -- the projector ----------------------------------------------------------------------------

#: The typed events that carry their ticket's token (the chunks carry none).
_TOKEN_EVENTS = frozenset({"ask_user", "interrupt"})


def projection_of(name: str, *, ticket_tokens: bool = True) -> Projection:
    """The projection ``name`` (:data:`~symfonic_stream.projections.declared.PROJECTIONS`),
    live, offline and in a replay alike. Without ``ticket_tokens``
    (``SYMFONIC_STREAM_TICKET_TOKENS=false``, for deployments that answer only through the
    gateway) a pause's typed event carries ``"token": ""``: whoever reads stream-events then
    cannot answer the pause (docs/security.md)."""
    declared = projection(name)
    project = declared.project
    if ticket_tokens or not declared.carries_tokens:
        return project

    def without_tokens(event: AgentEvent) -> list[Body]:
        bodies = project(event)
        if event.interrupt is not None:
            for body in bodies:
                if body["type"] in _TOKEN_EVENTS:
                    body["token"] = ""
        return bodies

    return without_tokens


class ProjectorProcessor:
    """One input partition's projector: its runs' guard state and the projection."""

    def __init__(
        self,
        projection: Projection,
        output_topic: str,
        limits: GuardLimits,
        *,
        check_keys: bool = True,
        decode: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self.guard = OrderingGuard(projection, output_topic, limits)
        self._check_keys = check_keys
        self._decode = decode

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        try:
            event = decode_record(record.value, record.key, self._check_keys, self._decode)
        except DecodeError as rejected:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(record, rejected.reason, rejected.detail)
            return
        kind = event.kind  # (Collector.count_input and decoding.kind_label, inline)
        out.inputs[kind if kind in KNOWN_KINDS else UNKNOWN_KIND_LABEL] += 1
        self.guard.accept(event, record, now, out)

    def punctuate(self, now: float, out: Collector) -> None:
        punctuate(self.guard, now, out)

    @property
    def stores(self) -> tuple[StateStore[Any], ...]:
        return (self.guard.runs, self.guard.waiting)

    def restored(self) -> None:
        restored(self.guard)

    def end_of_input(self, out: Collector) -> None:
        """Every hole still open becomes a gap; then no run needs remembering (a replay's
        progress topic keeps only its position)."""
        self.guard.flush(out)
        self.guard.forget_all()

    @property
    def buffered_events(self) -> int:
        return self.guard.buffered

    @property
    def active_runs(self) -> int:
        return len(self.guard.runs)
