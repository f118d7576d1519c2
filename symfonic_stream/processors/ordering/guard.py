"""The ordering guard: the kernel's order out of whatever order Kafka delivered.

Per run it keeps the next expected index and the next output ``seq``. An event at the
expected index is released (projected, numbered, emitted) together with everything
buffered right behind it; an earlier or already-buffered index is a duplicate; a later one
waits. A hole that stays open past the gap timeout, or a buffer past its bound, becomes a
``gap`` record: lost data is reported, never invented, never waited for forever.

Time is always passed in (``now``), never read, so the same input and clock give the same
output: the live engine passes the wall clock, the offline command passes nothing and
calls :meth:`OrderingGuard.flush` at the end of its input instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from symfonic_stream.engine.records import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.store import Codec, StateStore
from symfonic_stream.models.agent_event import CLOSING_KINDS, KNOWN_KINDS, AgentEvent
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.processors.ordering.run_state import (
    Pending,
    RunState,
    RunStatus,
    decode_run,
    encode_run,
)
from symfonic_stream.projections import Projection

_END_STATUS = {"done": "completed", "error": "error", "cancelled": "cancelled"}
_dumps = orjson.dumps
# Output records are built with ``tuple.__new__`` on the hot path: the NamedTuple's own
# ``__new__`` is a generated Python function (defaults, keywords) that costs more than
# the tuple. That needs the exact field order, checked here once.
_new_record = tuple.__new__
if OutputRecord._fields != ("topic", "key", "value", "record_type", "source_ts", "headers"):
    raise RuntimeError(f"OutputRecord changed its fields: update {__file__}")


@dataclass(frozen=True, slots=True)
class GuardLimits:
    """SPEC §5's bounds (SYMFONIC_GAP_TIMEOUT_S, _RUN_BUFFER_MAX, _CLOSED_RUN_GRACE_S)."""

    gap_timeout_s: float = 30.0
    run_buffer_max: int = 1000
    closed_run_grace_s: float = 600.0


#: How a run's state travels in the changelog (:mod:`.run_state`).
RUN_CODEC: Codec[RunState] = Codec(encode_run, decode_run)


class OrderingGuard:
    """The guard for every run of one input partition: its runs live in one state store.

    Each run with something due has one deadline in the store: its oldest buffered event's
    gap timeout while it waits behind a hole, its grace once closed. A punctuation visits
    only the runs whose deadline passed.
    """

    def __init__(self, projection: Projection, output_topic: str, limits: GuardLimits) -> None:
        self._project = projection
        self._topic = output_topic
        self._limits = limits
        self.runs: StateStore[RunState] = StateStore("run", RUN_CODEC)
        self._buffered = 0

    # -- the hot path -----------------------------------------------------------------

    def accept(self, event: AgentEvent, record: InputRecord, now: float, out: Collector) -> None:
        """Take one decoded event; emit whatever it releases."""
        run_id = event.run_id
        runs = self.runs
        run = runs.get(run_id)
        if run is None:
            run = RunState()
            runs.put(run_id, run)
        index = event.index
        if index < run.next_index or index in run.buffer:
            out.count("duplicates")
            return
        if run.status is RunStatus.CLOSED:
            out.dead_letter(
                record,
                DeadLetterReason.RUN_CLOSED,
                f"run {run_id!r} ended at index {run.next_index - 1}; index {index} came after",
            )
            return
        runs.touch(run_id)
        if index > run.next_index:
            if not run.buffer:  # the run starts waiting: its oldest event's gap timeout
                runs.schedule(run_id, now + self._limits.gap_timeout_s)
            run.buffer[index] = Pending(event, record, now)
            self._buffered += 1
            if len(run.buffer) > self._limits.run_buffer_max:
                self._fill_first_hole(run_id, run, now, out)
            return
        self._release(run_id, run, event, now, out)
        # Only a run with something buffered can release more.
        if run.buffer:
            self._drain(run_id, run, now, out)

    def punctuate(self, now: float, out: Collector) -> None:
        """Fill holes older than the gap timeout; forget closed runs past their grace."""
        runs = self.runs
        for run_id in list(runs.due(now)):
            run = runs.get(run_id)
            if run is None:
                continue
            if run.status is RunStatus.CLOSED:
                runs.delete(run_id)  # its grace is over: a tombstone at the next commit
                continue
            timeout = self._limits.gap_timeout_s
            while run.buffer and _oldest_arrival(run) + timeout <= now:
                self._fill_first_hole(run_id, run, now, out)
            if run.buffer:  # (a run the gaps closed has none: it was scheduled its grace)
                runs.schedule(run_id, _oldest_arrival(run) + timeout)

    def flush(self, out: Collector) -> None:
        """End of input (offline, a replay's range): every hole still open becomes a gap."""
        for run_id, run in self.runs.items():
            while run.buffer:
                self._fill_first_hole(run_id, run, 0.0, out)

    def forget_all(self) -> None:
        """Delete every run (a tombstone each at the next commit): the input is over."""
        for run_id, _ in self.runs.items():
            self.runs.delete(run_id)
        self._buffered = 0

    def restored(self) -> None:
        """After a restore: count what is buffered and schedule every run's deadline."""
        runs = self.runs
        self._buffered = 0
        for run_id, run in runs.items():
            self._buffered += len(run.buffer)
            if run.status is RunStatus.CLOSED:
                runs.schedule(run_id, run.closed_at + self._limits.closed_run_grace_s)
            elif run.buffer:
                runs.schedule(run_id, _oldest_arrival(run) + self._limits.gap_timeout_s)

    @property
    def buffered_events(self) -> int:
        return self._buffered

    @property
    def active_runs(self) -> int:
        return len(self.runs)

    def run(self, run_id: str) -> RunState | None:
        """One run's state (for tests and tools)."""
        return self.runs.get(run_id)

    # -- releasing --------------------------------------------------------------------

    def _release(
        self, run_id: str, run: RunState, event: AgentEvent, now: float, out: Collector
    ) -> None:
        key = run_id.encode()
        index = event.index
        ts = event.timestamp
        bodies = self._project(event)
        if bodies:
            # _emit inlined: the loop runs once or twice for nearly every input event.
            topic = self._topic
            emit = out.emit
            seq = run.next_seq
            for body in bodies:
                envelope = {
                    "run_id": run_id,
                    "seq": seq,
                    "source_index": index,
                    "ts": ts,
                    "event": body,
                }
                value = _dumps(envelope)
                emit(_new_record(OutputRecord, (topic, key, value, body["type"], ts, ())))
                seq += 1
            run.next_seq = seq
        run.next_index = index + 1
        kind = event.kind
        if kind not in KNOWN_KINDS:
            out.count("unknown_kind")
        if kind in CLOSING_KINDS:
            error = event.error.model_dump() if kind == "error" and event.error else None
            self._end(key, run, event, _END_STATUS[kind], error, out)
            self._close(run_id, run, now, out)
        elif event.interrupt is not None:
            self._end(key, run, event, "paused", None, out)
            run.status = RunStatus.PAUSED
        elif run.status is RunStatus.PAUSED:
            run.status = RunStatus.OPEN  # the run resumed after its pause

    def _drain(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        buffer = run.buffer
        while run.next_index in buffer:
            pending = buffer.pop(run.next_index)
            self._buffered -= 1
            self._release(run_id, run, pending.event, now, out)
        if not buffer and run.status is not RunStatus.CLOSED:
            self.runs.unschedule(run_id)  # nothing waits any more

    def _fill_first_hole(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        first = min(run.buffer)
        ts = run.buffer[first].event.timestamp
        gap = {"from_index": run.next_index, "to_index": first - 1}
        envelope = {
            "run_id": run_id,
            "seq": run.next_seq,
            "source_index": None,
            "ts": ts,
            "gap": gap,
        }
        self._emit(run_id.encode(), run, envelope, "gap", ts, out)
        out.count("gaps")
        self.runs.touch(run_id)
        run.next_index = first
        self._drain(run_id, run, now, out)

    def _end(
        self,
        key: bytes,
        run: RunState,
        event: AgentEvent,
        status: str,
        error: dict[str, Any] | None,
        out: Collector,
    ) -> None:
        envelope = {
            "run_id": event.run_id,
            "seq": run.next_seq,
            "source_index": event.index,
            "ts": event.timestamp,
            "end": {"status": status, "error": error},
        }
        self._emit(key, run, envelope, f"end_{status}", event.timestamp, out)

    def _close(self, run_id: str, run: RunState, now: float, out: Collector) -> None:
        run.status = RunStatus.CLOSED
        run.closed_at = now
        self.runs.schedule(run_id, now + self._limits.closed_run_grace_s)
        # Nothing follows a run's closing end record: whatever still waits is late.
        for index in sorted(run.buffer):
            pending = run.buffer[index]
            out.dead_letter(
                pending.record,
                DeadLetterReason.RUN_CLOSED,
                f"run {run_id!r} ended at index {run.next_index - 1} while index {index} waited",
            )
        self._buffered -= len(run.buffer)
        run.buffer.clear()

    def _emit(
        self,
        key: bytes,
        run: RunState,
        envelope: dict[str, Any],
        record_type: str,
        ts: float,
        out: Collector,
    ) -> None:
        run.next_seq += 1
        out.emit(OutputRecord(self._topic, key, _dumps(envelope), record_type, ts))


def _oldest_arrival(run: RunState) -> float:
    return min(pending.arrived_at for pending in run.buffer.values())
