"""One stream task: an input partition the engine owns, its processor and its stores; and
the process's committer, which commits what every task has pending, one transaction at a
time.

Records are processed as soon as they are fetched (:meth:`StreamTask.absorb`) into what is
*pending*; the committer (:class:`Committer`) takes what every task has pending into one
transaction at a time (:mod:`symfonic_stream.engine.transaction`), and records fetched
meanwhile wait for the next.

A failed transaction drops what was pending (the processor ran ahead on state whose
transaction is dropped too) and ignores what is fetched until the engine rebuilt the task.
A processor that raises on a record fails the task the same way, and the record's offset
is remembered: on the retry it is dead-lettered (``invalid_event``) instead of processed,
so the partition goes on. docs/engine.md has the whole lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from symfonic_stream.engine.processor import (
    Collector,
    DeadLetterReason,
    InputRecord,
    Processor,
    feed,
)
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transaction import (
    POSITION,
    CommitOutcome,
    Progress,
    Taken,
    TaskTurn,
    Transactions,
)
from symfonic_stream.kafka.group import GroupMetadata
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.store import Backend, StateStore, StorePartition

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TaskState:
    """What one task remembers: its processor, its position store, and the partition of
    stores both live in (in memory, or on its persistent store, ``SYMFONIC_STATE_DIR``)."""

    processor: Processor
    position: StateStore[Progress] | None
    store_partition: StorePartition

    @property
    def changelog_offset(self) -> int | None:
        """The stores hold every changelog record before this offset (None: not restored)."""
        return self.store_partition.offset


def task_state(processor: Processor, position: StateStore[Progress] | None,
               backend: Backend | None = None) -> TaskState:
    """A task's state: its processor's stores and its position's, in one partition."""
    stores = [*processor.stores, *([position] if position is not None else [])]
    return TaskState(processor, position, StorePartition(stores, backend))


# One InputRecord per record consumed, built with ``tuple.__new__`` (the NamedTuple's
# keyword ``__new__`` costs more than the tuple), so the field order is checked once.
_new_input = tuple.__new__
if InputRecord._fields != (
    "topic", "partition", "offset", "key", "value", "headers", "timestamp_ms"
):
    raise RuntimeError(f"InputRecord changed its fields: update {__file__}")


def to_input(record: Any) -> InputRecord:
    """An aiokafka ConsumerRecord as the processors see it: the one conversion every
    consumer and a replay share. A header with a null value becomes ``b""``."""
    headers = record.headers
    if headers:
        headers = tuple(headers)
        for _, value in headers:  # (a loop: a generator per record cost more than this)
            if value is None:
                headers = tuple((k, v if v is not None else b"") for k, v in headers)
                break
    else:
        headers = ()
    return _new_input(InputRecord, (
        record.topic, record.partition, record.offset, record.key, record.value, headers,
        record.timestamp or 0,
    ))

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
        group_offset: int | None = None,
    ) -> None:
        self.topology = topology
        self.tp = TopicPartition(topology.source_topic, partition)
        self._changelog_place = topology.changelog_place(partition)
        #: The process's committer, shared by its tasks (:class:`Committer`).
        self.committer = committer
        self.processor = state.processor
        #: Where the task keeps its position, if it does (``engine/transaction.py``), and
        #: the position its last committed transaction wrote (None: not read yet).
        self.position = state.position
        self.progress: Progress | None = None
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
        self.progress = None
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

    def take(self) -> TaskTurn:
        """Commit step 1, take: everything pending, handed over to one transaction."""
        assert self._pending is not None
        taken = Taken(self._pending, self._pending_offset, self._pending_records,
                      self._pending_ends_input)
        self._drop_pending()
        offset = self.next_offset if taken.next_offset is None else taken.next_offset
        position = self.position
        if position is not None and self.progress is None:
            self.progress = position.peek(POSITION)
        return TaskTurn(self.tp, taken, self.store_partition, position, self.progress, offset,
                        self._changelog_place)

    def committed(self, turn: TaskTurn) -> None:
        """Commit step 9, advance, for this task: the transaction carrying ``turn`` committed
        (telling the group, for a grouped consumer); the state changes it prepared are the
        changelog's before its changelog offset, flushed into the backend with it."""
        self.store_partition.flush(turn.changelog_offset)
        if turn.written_progress is not None:
            self.progress = turn.written_progress
        next_offset = turn.taken.next_offset
        if next_offset is None:
            return
        if self._failure is None:  # records got past whatever failed before
            self.failures = 0
        self.next_offset = next_offset
        if self.topology.source.grouped:
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
        if item.headers:  # (its trace context in hand; a record without headers has none)
            feed(self.processor, item, now, out)
        else:
            self.processor.process(item, now, out)


#: Starts the process's producer with the transactional id of the given partition.
NewProducer = Callable[[int], Awaitable[ProcessProducer]]


class Committer:
    """Commits what the process's tasks have pending, one transaction at a time.

    Tasks process records as they are fetched into what is *pending* and tell the committer
    (:meth:`pending`). It begins a transaction once the oldest pending record has waited
    ``SYMFONIC_BATCH_MAX_LATENCY_MS`` for company (a producer's ``linger.ms``), at once when
    a task has ``SYMFONIC_BATCH_MAX_RECORDS`` pending or the engine stopped fetching for
    lack of room (:meth:`hurry`); it takes what every task has pending (commit step 1, take) and
    commits it as one transaction (:meth:`Transactions.commit`). Records fetched meanwhile
    wait for the next. So a process's transactions per second do not grow with its
    partitions (Kafka Streams' ``exactly_once_v2``: one producer per thread).

    The one producer is started when first needed, with the transactional id of the lowest
    partition it writes for (``Topology.transactional_id``): whoever is assigned that
    partition after this process died fences the id, and so ends what it left open
    (:mod:`symfonic_stream.kafka.producer`). After a failed transaction it is replaced: an
    error aiokafka calls abortable leaves the broker's transaction open, and its next
    commit would commit the aborted records too (docs/engine.md, "aiokafka, read closely").
    """

    def __init__(self, new_producer: NewProducer, transactions: Transactions, *,
                 linger_s: float = 0.0, max_records: int = 1000,
                 member: Callable[[], GroupMetadata | None] = lambda: None,
                 on_taken: asyncio.Event | None = None) -> None:
        self._new_producer = new_producer
        self._transactions = transactions
        self._metrics = transactions.metrics
        self._linger_s = linger_s
        self._max_records = max_records
        self._member = member
        self._on_taken = on_taken  # set when it takes (room to fetch more)
        self.producer: ProcessProducer | None = None
        self._waiting: dict[TopicPartition, StreamTask] = {}  # tasks with something pending
        self._in_flight: frozenset[TopicPartition] = frozenset()
        self._run: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # cuts a linger short

    def pending(self, task: StreamTask) -> None:
        """``task`` has something pending (again): commit it with the next transaction."""
        self._waiting.setdefault(task.tp, task)
        if task.pending_records >= self._max_records:
            self._wake.set()
        if self._run is None or self._run.done():
            if self._run is not None:
                self._run.result()  # finished cleanly (a failure is the tasks')
            self._run = asyncio.create_task(self._commit_pending(), name="committer")

    def hurry(self) -> None:
        """End a linger now (the engine stopped fetching, or a partition is given back)."""
        self._wake.set()

    def carries(self, task: StreamTask) -> bool:
        """Whether the transaction in flight carries what ``task`` processed."""
        return task.tp in self._in_flight

    def waits_for(self, task: StreamTask) -> bool:
        """Whether ``task`` has something pending here or in flight."""
        return task.tp in self._waiting or self.carries(task)

    def forget(self, task: StreamTask) -> None:
        """``task`` dropped what was pending (a failure): room to fetch again."""
        self._waiting.pop(task.tp, None)
        if self._on_taken is not None:
            self._on_taken.set()

    async def flush(self) -> None:
        """Commit everything pending (or fail the tasks it belongs to)."""
        while self._run is not None and not self._run.done():
            self.hurry()
            await asyncio.shield(self._run)
        if self._run is not None:
            self._run.result()  # a bug in the committer surfaces here

    async def close(self) -> None:
        """Flush, then stop the producer (the tasks are being revoked or stopped)."""
        await self.flush()
        await self._drop_producer()

    async def _drop_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.close()

    async def _commit_pending(self) -> None:
        """One transaction after another, until nothing is pending."""
        while self._waiting:
            oldest = min(task.pending_since for task in self._waiting.values())
            wait = oldest + self._linger_s - time.monotonic()
            if wait > 0 and not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()
            member = self._member()
            lost = member is not None and not member.in_generation
            # The producer first: from commit step 1 (take) to commit step 2 (prepare state)
            # nothing may wait, or records processed meanwhile would change the stores
            # whose changes commit step 2 (prepare state) writes into this transaction.
            started = lost or await self._start_producer(self._waiting.values())
            waiting, self._waiting = self._waiting, {}
            # 1. take
            turn = [task.take() for task in waiting.values() if task.has_pending]
            if self._on_taken is not None:
                self._on_taken.set()
            if not turn:
                continue
            self._in_flight = frozenset(each.tp for each in turn)
            try:
                if lost:  # a zombie woken: what it processed is another's now
                    given_back = sorted(tp.partition for tp in self._in_flight)
                    log.warning("not a member of the group's generation; partitions given "
                                "back", extra={"partitions": given_back})
                    outcome = CommitOutcome.UNUSABLE
                elif not started or self.producer is None:
                    outcome = CommitOutcome.ABORTED
                else:
                    outcome = await self._transactions.commit(self.producer, turn, member)
            finally:
                self._in_flight = frozenset()
            if outcome is CommitOutcome.COMMITTED:
                # 9. advance
                for each in turn:
                    waiting[each.tp].committed(each)
            else:
                if outcome is CommitOutcome.ABORTED:
                    self._metrics.count_abort()
                for each in turn:
                    waiting[each.tp].fail(outcome, counted=True)
                await self._drop_producer()
        self._wake.clear()  # (a hurry is for what was pending then)

    async def _start_producer(self, tasks: Iterable[StreamTask]) -> bool:
        """A usable producer, started with the id of the lowest of ``tasks``' partitions
        when there is none; False when it could not be started."""
        if self.producer is not None and self.producer.usable:
            return True
        partitions = sorted(task.partition for task in tasks)
        await self._drop_producer()
        if not partitions:
            return False
        try:
            self.producer = await self._new_producer(partitions[0])
        except Exception:
            log.exception("starting the producer failed", extra={"partitions": partitions})
            return False
        return True
