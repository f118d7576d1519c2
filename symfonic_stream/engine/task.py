"""One stream task: an input partition the engine owns, its processor, stores and producer.

Records are processed as soon as they are fetched (:meth:`StreamTask.absorb`) into what is
*pending*; the task's *committer* turns what is pending into one transaction at a time
(:mod:`symfonic_stream.engine.commit`), and records fetched meanwhile wait for the next. A
transaction begins once its first pending record has waited ``SYMFONIC_BATCH_MAX_LATENCY_MS``
for company (a producer's ``linger.ms``), at once when ``SYMFONIC_BATCH_MAX_RECORDS`` are
pending or the engine stopped fetching for lack of room (:meth:`StreamTask.hurry`). At
most one transaction per task is in flight, each begun after the previous committed.

A failed transaction drops what was pending (the processor ran ahead on state that was
rolled back) and ignores what is fetched until the engine rebuilt the task. A processor
that raises on a record fails the task the same way, and the record's offset is
remembered: on the retry it is dead-lettered (``invalid_event``) instead of processed, so
the partition goes on. docs/engine.md has the whole lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from symfonic_stream.engine.commit import CommitOutcome, Taken, commit
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.records import Collector, DeadLetterReason, InputRecord, to_input
from symfonic_stream.engine.restoring import TaskState
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.producer import TaskProducer
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.store import StateStore

log = logging.getLogger(__name__)

#: An idle task whose last transaction committed this long ago tells its group its offset
#: without waiting for ``SYMFONIC_GROUP_OFFSET_INTERVAL_MS`` (at a trickle of a record every
#: few ms per partition it seldom is, so the interval still spares most transactions).
QUIET_S = 0.1

class StreamTask:
    """The engine's handle on one input partition it owns."""

    def __init__(
        self,
        topology: Topology,
        partition: int,
        producer: TaskProducer,
        state: TaskState,
        next_offset: int,
        *,
        metrics: ConsumerMetrics,
        max_record_bytes: int,
        max_records: int = 1000,
        linger_s: float = 0.0,
        on_taken: asyncio.Event | None = None,
        on_demand: OnDemandTopics | None = None,
        group_offset: int | None = None,
        group_interval_s: float = 0.0,
    ) -> None:
        self.topology = topology
        self.tp = TopicPartition(topology.source_topic, partition)
        self.producer = producer
        self.processor = state.processor
        #: Where the task keeps its position, if it does (:mod:`symfonic_stream.state.position`).
        self.position = state.position
        #: Its stores hold every changelog record before this offset (None: unknown).
        self.changelog_offset = state.changelog_offset
        #: Its persistent store (``SYMFONIC_STATE_DIR``): every commit's state changes.
        self.disk = state.disk
        #: The group's committed offset, as this task last told it (None: never).
        self.group_offset = group_offset
        self._group_interval_s = group_interval_s
        self._group_told_at = self._committed_at = time.monotonic()
        self._closing = False
        self._telling = False  # the pending transaction is there to tell the group
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
        self._max_records = max_records
        self._linger_s = linger_s
        self._on_taken = on_taken  # set when the committer takes (room to fetch more)
        self._pending: Collector | None = None
        self._pending_records = 0
        self._pending_offset: int | None = None
        self._pending_ends_input = False
        self._pending_since = 0.0
        self._committer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # cuts a linger short
        self._failure: CommitOutcome | None = None  # until :meth:`reset`
        self._failure_reported = False
        self._track_uncommitted()

    @property
    def partition(self) -> int:
        partition: int = self.tp.partition
        return partition

    @property
    def stores(self) -> tuple[StateStore[Any], ...]:
        """Every store the commit writes: the processor's, and the position if any."""
        own = tuple(self.processor.stores)
        return own if self.position is None else (*own, self.position)

    @property
    def pending_records(self) -> int:
        return self._pending_records

    @property
    def idle(self) -> bool:
        """Nothing pending and no transaction in flight."""
        return self._pending is None and (self._committer is None or self._committer.done())

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
            self._fail(CommitOutcome.ABORTED)
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
            self._fail(CommitOutcome.ABORTED)
            return
        end = self.topology.source.end(self.partition)
        self._pending_ends_input = True
        self._add_pending(out, 0, end, since=time.monotonic() - self._linger_s)

    def punctuate(self, now: float) -> None:
        """Fire timers (gap timeouts, grace expiry) into what is pending."""
        if self._failure is not None:
            return
        out = self._pending if self._pending is not None else Collector()
        try:
            self.processor.punctuate(now, out)
        except Exception:
            log.exception("processor punctuation failed", extra=self.log_context())
            self._fail(CommitOutcome.ABORTED)
            return
        if self._pending is None:
            if not (out.outputs or out.dead_letters or any(s.dirty for s in self.stores)):
                if out.counts:
                    self.metrics.add_counts(out.counts)
                return
            # Nothing to wait for: the timers already waited.
            self._add_pending(out, 0, None, since=time.monotonic() - self._linger_s)

    def hurry(self) -> None:
        """End a linger now: the engine stopped fetching until something is committed."""
        self._wake.set()

    def failure(self) -> CommitOutcome | None:
        """The failure the engine must act on, once the committer stopped; else None."""
        committer = self._committer
        if committer is not None:
            if not committer.done():
                return None
            self._committer = None
            committer.result()  # a bug in the committer surfaces here
        if self._failure is None or self._failure_reported:
            return None
        self._failure_reported = True
        return self._failure

    async def flush(self) -> CommitOutcome:
        """Commit everything pending; COMMITTED, or the failure the engine must act on."""
        committer = self._committer
        if committer is not None:
            await committer
        return self.failure() or CommitOutcome.COMMITTED

    def reset(self, state: TaskState, next_offset: int, group_offset: int | None = None) -> None:
        """After a failure: the processor rolled back (or rebuilt), the committed offset."""
        if self._committer is not None and not self._committer.done():
            raise RuntimeError("reset while a transaction is in flight")
        self._committer = None
        self._drop_pending()
        self._failure = None
        self._failure_reported = False
        self.input_done = False
        self.processor = state.processor
        self.position = state.position
        self.changelog_offset = state.changelog_offset
        self.disk = state.disk
        self.next_offset = next_offset
        self.group_offset = group_offset
        self._track_uncommitted()

    def _track_uncommitted(self) -> None:
        for store in self.stores:  # (rolled back by ``engine.assign.rebuild_task``)
            store.track_uncommitted()

    async def close(self) -> bool:
        """Commit what is pending (the partition is still ours), and tell the group where
        the task stands, then stop the producer. True when everything it processed is
        committed: its state is then what the changelog holds up to its own last write."""
        self._closing = True
        self.hurry()  # a linger is no reason to keep a partition being given back
        clean = False
        try:
            clean = await self.flush() is CommitOutcome.COMMITTED
            if clean and self._group_behind():
                self._tell_group()
                clean = await self.flush() is CommitOutcome.COMMITTED
        except Exception:
            log.exception("the last transaction failed while closing", extra=self.log_context())
            clean = False
        await self.producer.close()
        return clean and self._failure is None

    def state(self) -> TaskState:
        return TaskState(self.processor, self.position, self.changelog_offset, self.disk)

    # -- the commit protocol's side of the task ---------------------------------------

    def take(self) -> Taken:
        """Commit step 1: everything pending, handed over to one transaction."""
        assert self._pending is not None
        taken = Taken(self._pending, self._pending_offset, self._pending_records,
                      self._pending_ends_input, to_group=self._telling or self._group_due())
        self._drop_pending()
        if self._on_taken is not None:
            self._on_taken.set()
        return taken

    def committed(self, next_offset: int | None, *, to_group: bool = True,
                  changelog_offset: int | None = None,
                  changes: dict[bytes, bytes | None] | None = None) -> None:
        """Commit step 8: the transaction carrying ``next_offset`` (and, ``to_group``,
        telling the group so; ``changelog_offset``: its ``changes`` to the changelog are
        before it) committed."""
        for store in self.stores:
            store.committed()
        if changelog_offset is not None:
            self.changelog_offset = max(self.changelog_offset or 0, changelog_offset)
            if self.disk is not None and changes:
                self.disk.records(changes)
                self.disk.mark(self.changelog_offset)
        if next_offset is None:
            return
        if self._failure is None:  # records got past whatever failed before
            self.failures = 0
        self.next_offset = next_offset
        self._committed_at = time.monotonic()
        if to_group:
            self.group_offset = next_offset
            self._group_told_at = self._committed_at
        if self._poison:
            self._poison = {o: e for o, e in self._poison.items() if o >= next_offset}

    def log_context(self) -> dict[str, object]:
        return {"topic": self.tp.topic, "partition": self.tp.partition,
                "transactional_id": self.producer.transactional_id}

    # -- pending work and the committer -------------------------------------------------

    def _add_pending(
        self, out: Collector, records: int, next_offset: int | None, *, since: float | None = None
    ) -> None:
        if self._pending is None:
            self._pending = out
            self._pending_since = time.monotonic() if since is None else since
        self._pending_records += records
        if next_offset is not None:
            self._pending_offset = next_offset
        if self._pending_records >= self._max_records:
            self._wake.set()
        if self._committer is None or self._committer.done():
            if self._committer is not None:
                self._committer.result()  # finished cleanly (a failure stops absorb)
            self._committer = asyncio.create_task(
                self._commit_pending(), name=f"commit-{self.producer.transactional_id}"
            )

    def _drop_pending(self) -> None:
        self._pending = None
        self._pending_records = 0
        self._pending_offset = None
        self._pending_ends_input = False
        self._telling = False

    def _group_due(self) -> bool:
        """Whether the next transaction tells the group its offset (commit step 6): always
        for a task without a position, else once the interval passed, and when closing."""
        if self.position is None or not self.topology.source.grouped:
            return True
        return self._closing or time.monotonic() - self._group_told_at >= self._group_interval_s

    def tell_group_when_due(self) -> None:
        """The engine's loop, every turn: an idle task whose group lags its position tells
        it once the interval passed, or once it has been quiet for :data:`QUIET_S` (a burst
        ended: no reason to leave the lag dashboards behind)."""
        if self._group_behind() and (
                time.monotonic() - self._committed_at >= QUIET_S or self._group_due()):
            self._tell_group()

    def _group_behind(self) -> bool:
        """A group task keeping its position, idle and healthy, whose group lags it. Only
        when idle: a transaction begun while another commits would carry an older offset."""
        return (self.group_offset != self.next_offset and self.position is not None
                and self.topology.source.grouped and self._failure is None and self.idle)

    def _tell_group(self) -> None:
        """A transaction of the offset alone (and the position record)."""
        self._telling = True
        self._add_pending(Collector(), 0, self.next_offset,
                          since=time.monotonic() - self._linger_s)

    def _fail(self, outcome: CommitOutcome) -> None:
        """Stop: drop what is pending and remember why (a fenced producer outranks). One
        failure episode counts once towards the back-off, however many parts of it fail,
        and once as an abort: what was processed is rolled back, as an aborted
        transaction's would be."""
        if outcome is CommitOutcome.ABORTED and self._failure is None:
            self.metrics.count_abort()
        self._drop_pending()
        if self._on_taken is not None:
            self._on_taken.set()  # what was pending is gone: room to fetch again
        if self._failure is None:
            self.failures += 1
        if self._failure is not CommitOutcome.UNUSABLE:
            self._failure = outcome
            self._failure_reported = False

    async def _commit_pending(self) -> None:
        """One transaction after another, until nothing is pending."""
        while self._pending is not None:
            wait = self._pending_since + self._linger_s - time.monotonic()
            if wait > 0 and self._pending_records < self._max_records and not self._closing:
                self._wake.clear()  # the first pending record waits for company
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                if self._pending is None:  # dropped by a failure meanwhile
                    return
            outcome = await commit(self, self.take())
            if outcome is not CommitOutcome.COMMITTED:
                self._fail(outcome)
                return

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
        # SPEC §6 checks too_large first, before any decoding, for every consumer.
        if value is not None and len(value) > self._max_record_bytes:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(
                item,
                DeadLetterReason.TOO_LARGE,
                f"value is {len(value)} bytes, limit {self._max_record_bytes}",
            )
            return
        self.processor.process(item, now, out)
