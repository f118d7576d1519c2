"""One stream task: an input partition the engine owns, its processor and its stores.

Records are processed as soon as they are fetched (:meth:`StreamTask.absorb`) into what is
*pending*; the process's *committer* (``engine/committer.py``) takes what every task has
pending into one transaction at a time (:mod:`symfonic_stream.engine.commit`), and records
fetched meanwhile wait for the next.

A failed transaction drops what was pending (the processor ran ahead on state that was
rolled back) and ignores what is fetched until the engine rebuilt the task. A processor
that raises on a record fails the task the same way, and the record's offset is
remembered: on the retry it is dead-lettered (``invalid_event``) instead of processed, so
the partition goes on. docs/engine.md has the whole lifecycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from symfonic_stream.engine.commit import CommitOutcome, Taken
from symfonic_stream.engine.committer import Committer
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.records import Collector, DeadLetterReason, InputRecord, to_input
from symfonic_stream.engine.restoring import TaskState
from symfonic_stream.engine.topology import Topology
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

class StreamTask:
    """The engine's handle on one input partition it owns."""

    def __init__(
        self,
        topology: Topology,
        partition: int,
        committer: Committer,
        state: TaskState,
        next_offset: int,
        *,
        metrics: ConsumerMetrics,
        max_record_bytes: int,
        on_demand: OnDemandTopics | None = None,
        group_offset: int | None = None,
    ) -> None:
        self.topology = topology
        self.tp = TopicPartition(topology.source_topic, partition)
        #: The process's committer, shared by its tasks (``engine/committer.py``).
        self.committer = committer
        self.processor = state.processor
        #: Where the task keeps its position, if it does (:mod:`symfonic_stream.state.position`).
        self.position = state.position
        #: Its stores, their committed values and transactions (:mod:`symfonic_stream.state.store`).
        self.store_partition = state.store_partition
        #: The group's committed offset, as this task last told it (None: never).
        self.group_offset = group_offset
        #: The offset of the next record to process (the committed offset after a commit).
        self.next_offset = next_offset
        #: Consecutive failed transactions, for the back-off before retrying.
        self.failures = 0
        #: While ``time.monotonic()`` is below this, the partition stays paused.
        self.paused_until = 0.0
        self.metrics = metrics
        self.on_demand = on_demand
        #: A bounded task whose range is processed: nothing more is absorbed.
        self.input_done = False
        self._poison: dict[int, str] = {}  # offsets of records the processor raised on
        self._max_record_bytes = max_record_bytes
        self._pending: Collector | None = None
        self._pending_records = 0
        self._pending_offset: int | None = None
        self._pending_ends_input = False
        #: When the first record now pending was processed (the linger counts from it).
        self.pending_since = 0.0
        self._failure: CommitOutcome | None = None  # until :meth:`reset`
        self._failure_reported = False

    @property
    def partition(self) -> int:
        partition: int = self.tp.partition
        return partition

    @property
    def changelog_offset(self) -> int | None:
        """Its stores hold every changelog record before this offset (None: unknown)."""
        return self.store_partition.offset

    @property
    def pending_records(self) -> int:
        return self._pending_records

    @property
    def failed(self) -> bool:
        """It failed and is not rebuilt yet (:meth:`failure` reports it once)."""
        return self._failure is not None

    @property
    def has_pending(self) -> bool:
        return self._pending is not None

    @property
    def idle(self) -> bool:
        """Nothing pending and no transaction in flight carrying its records."""
        return self._pending is None and not self.committer.waits_for(self)

    def absorb(self, records: Sequence[Any], position: int | None = None) -> None:
        """Process ``records`` (aiokafka ConsumerRecords, in offset order) into what is
        pending. ``position``, the consumer's position after them, may be past the last
        record (commit markers): the offset to commit then moves past them too."""
        if self._failure is not None or self.input_done or not records:
            return
        out = self._pending if self._pending is not None else Collector()
        now = self.topology.clock()
        record: Any = None
        try:
            for record in records:
                self._process_one(to_input(record), now, out)
        except Exception as exc:
            log.exception("processor failed; its record is dead-lettered on the retry",
                          extra={**self.log_context(), "offset": record.offset})
            self._poison[record.offset] = f"{type(exc).__name__}: {exc}"
            self.fail(CommitOutcome.ABORTED)
            return
        after = records[-1].offset + 1
        self._add_pending(out, len(records), max(after, position or after))

    def end_input(self) -> None:
        """A bounded task reached the end of its range: the processor's last word, then
        nothing more."""
        if self._failure is not None or self.input_done:
            return
        self.input_done = True
        out = self._pending if self._pending is not None else Collector()
        try:
            self.processor.end_of_input(out)
        except Exception:
            log.exception("processor failed at the end of its input", extra=self.log_context())
            self.fail(CommitOutcome.ABORTED)
            return
        end = self.topology.source.end(self.partition)
        self._pending_ends_input = True
        self._add_pending(out, 0, end, hurry=True)

    def punctuate(self, now: float) -> None:
        """Fire timers (gap timeouts, grace expiry) into what is pending."""
        if self._failure is not None:
            return
        out = self._pending if self._pending is not None else Collector()
        try:
            self.processor.punctuate(now, out)
        except Exception:
            log.exception("processor punctuation failed", extra=self.log_context())
            self.fail(CommitOutcome.ABORTED)
            return
        if self._pending is None:
            if not (out.outputs or out.dead_letters or self.store_partition.changed):
                if out.counts:
                    self.metrics.add_counts(out.counts)
                return
            # Nothing to wait for: the timers already waited.
            self._add_pending(out, 0, None, hurry=True)

    def failure(self) -> CommitOutcome | None:
        """The failure the engine must act on, once no transaction in flight carries the
        task's records; else None."""
        if self.committer.carries(self):
            return None
        if self._failure is None or self._failure_reported:
            return None
        self._failure_reported = True
        return self._failure

    async def flush(self) -> CommitOutcome:
        """Commit everything pending; COMMITTED, or the failure the engine must act on."""
        await self.committer.flush()
        return self.failure() or CommitOutcome.COMMITTED

    def reset(self, state: TaskState, next_offset: int, group_offset: int | None = None) -> None:
        """After a failure: the processor rolled back (or rebuilt), the committed offset."""
        if self.committer.carries(self):
            raise RuntimeError("reset while a transaction is in flight")
        self._drop_pending()
        self._failure = None
        self._failure_reported = False
        self.input_done = False
        self.processor = state.processor
        self.position = state.position
        self.store_partition = state.store_partition
        self.next_offset = next_offset
        self.group_offset = group_offset

    async def close(self) -> bool:
        """Commit what is pending (the partition is still ours; a linger is no reason to
        keep it). True when everything it processed is committed: its state is then what
        the changelog holds up to its own last write."""
        clean = False
        try:
            clean = await self.flush() is CommitOutcome.COMMITTED
        except Exception:
            log.exception("the last transaction failed while closing", extra=self.log_context())
            clean = False
        return clean and self._failure is None

    def state(self) -> TaskState:
        return TaskState(self.processor, self.position, self.store_partition)

    # -- the commit protocol's side of the task ---------------------------------------

    def take(self) -> Taken:
        """Commit step 1: everything pending, handed over to one transaction."""
        assert self._pending is not None
        taken = Taken(self._pending, self._pending_offset, self._pending_records,
                      self._pending_ends_input)
        self._drop_pending()
        return taken

    def committed(self, next_offset: int | None, *, to_group: bool = True,
                  changelog_offset: int | None = None) -> None:
        """Commit step 8: the transaction carrying ``next_offset`` (and, ``to_group``,
        telling the group so) committed; its state changes are the changelog's before
        ``changelog_offset``, flushed into the backend with it."""
        self.store_partition.flush(changelog_offset)
        if next_offset is None:
            return
        if self._failure is None:  # records got past whatever failed before
            self.failures = 0
        self.next_offset = next_offset
        if to_group:
            self.group_offset = next_offset
        if self._poison:
            self._poison = {o: e for o, e in self._poison.items() if o >= next_offset}

    def log_context(self) -> dict[str, object]:
        return {"topic": self.tp.topic, "partition": self.tp.partition}

    # -- pending work and the committer -------------------------------------------------

    def _add_pending(self, out: Collector, records: int, next_offset: int | None, *,
                     hurry: bool = False) -> None:
        if self._pending is None:
            self._pending = out
            self.pending_since = time.monotonic()
        self._pending_records += records
        if next_offset is not None:
            self._pending_offset = next_offset
        self.committer.pending(self)
        if hurry:  # nothing to wait for (timers already waited, or the input ended)
            self.committer.hurry()

    def _drop_pending(self) -> None:
        self._pending = None
        self._pending_records = 0
        self._pending_offset = None
        self._pending_ends_input = False

    def fail(self, outcome: CommitOutcome, *, counted: bool = False) -> None:
        """Stop: drop what is pending and remember why (a fenced producer outranks). One
        failure episode counts once towards the back-off, however many parts of it fail,
        and once as an abort (``counted``: the committer counted the transaction's): what
        was processed is rolled back, as an aborted transaction's would be."""
        if outcome is CommitOutcome.ABORTED and self._failure is None and not counted:
            self.metrics.count_abort()
        self._drop_pending()
        self.committer.forget(self)
        if self._failure is None:
            self.failures += 1
        if self._failure is not CommitOutcome.UNUSABLE:
            self._failure = outcome
            self._failure_reported = False

    def _process_one(self, item: InputRecord, now: float, out: Collector) -> None:
        poison = self._poison.get(item.offset) if self._poison else None
        if poison is not None:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(
                item,
                DeadLetterReason.INVALID_EVENT,
                f"the {self.topology.consumer} processor failed on this record: {poison}",
            )
            return
        value = item.value
        # contract §6 checks too_large first, before any decoding, for every consumer.
        if value is not None and len(value) > self._max_record_bytes:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(
                item,
                DeadLetterReason.TOO_LARGE,
                f"value is {len(value)} bytes, limit {self._max_record_bytes}",
            )
            return
        self.processor.process(item, now, out)
