"""The committer: one transaction at a time for the whole process, over all its tasks.

Tasks process records as they are fetched into what is *pending* (``engine/task.py``) and
tell the committer (:meth:`Committer.pending`). The committer begins a transaction once
the oldest pending record has waited ``SYMFONIC_BATCH_MAX_LATENCY_MS`` for company (a
producer's ``linger.ms``), at once when a task has ``SYMFONIC_BATCH_MAX_RECORDS`` pending or
the engine stopped fetching for lack of room (:meth:`hurry`); it takes what every task has
pending (commit step 1) and commits it as one transaction (:func:`~.commit.commit`).
Records fetched meanwhile wait for the next. So a process's transactions per second do
not grow with its partitions (Kafka Streams' ``exactly_once_v2``: one producer per
thread).

The one producer is started when first needed, with the transactional id of the lowest
partition it writes for (``Topology.transactional_id``): whoever is assigned that partition
after this process died fences the id, and so ends what it left open
(:mod:`symfonic_stream.kafka.id_fencing`). After a failed transaction it is replaced: an
error aiokafka calls abortable leaves the broker's transaction open, and its next commit
would commit the aborted records too (docs/engine.md, "aiokafka, read closely").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from aiokafka import TopicPartition

from symfonic_stream.engine.commit import CommitOutcome, Committing, Taken, commit
from symfonic_stream.kafka.group_fencing import GroupMetadata
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

#: Starts the process's producer with the transactional id of the given partition.
NewProducer = Callable[[int], Awaitable[ProcessProducer]]


class PendingTask(Committing, Protocol):
    """What the committer needs of a task (``engine/task.py``)."""

    @property
    def pending_records(self) -> int: ...

    #: When the first record now pending was processed.
    pending_since: float

    @property
    def has_pending(self) -> bool: ...

    def take(self) -> Taken: ...

    def fail(self, outcome: CommitOutcome, *, counted: bool = False) -> None: ...


class Committer:
    """Commits what the process's tasks have pending, one transaction at a time."""

    def __init__(self, new_producer: NewProducer, metrics: ConsumerMetrics, *,
                 linger_s: float = 0.0, max_records: int = 1000,
                 member: Callable[[], GroupMetadata | None] = lambda: None,
                 on_taken: asyncio.Event | None = None) -> None:
        self._new_producer = new_producer
        self._metrics = metrics
        self._linger_s = linger_s
        self._max_records = max_records
        self._member = member
        self._on_taken = on_taken  # set when it takes (room to fetch more)
        self.producer: ProcessProducer | None = None
        self._waiting: dict[TopicPartition, PendingTask] = {}  # tasks with something pending
        self._in_flight: frozenset[TopicPartition] = frozenset()
        self._run: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # cuts a linger short

    def pending(self, task: PendingTask) -> None:
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

    def carries(self, task: PendingTask) -> bool:
        """Whether the transaction in flight carries what ``task`` processed."""
        return task.tp in self._in_flight

    def waits_for(self, task: PendingTask) -> bool:
        """Whether ``task`` has something pending here or in flight."""
        return task.tp in self._waiting or self.carries(task)

    def forget(self, task: PendingTask) -> None:
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
            # The producer first: from the take (step 1) to the state written (step 2)
            # nothing may wait, or records processed meanwhile would change the stores
            # whose changes step 2 writes into this transaction.
            started = lost or await self._start_producer(self._waiting.values())
            waiting, self._waiting = self._waiting, {}
            turn = [(task, task.take()) for task in waiting.values() if task.has_pending]
            if self._on_taken is not None:
                self._on_taken.set()
            if not turn:
                continue
            self._in_flight = frozenset(task.tp for task, _ in turn)
            try:
                if lost:  # a zombie woken: what it processed is another's now
                    given_back = sorted(tp.partition for tp in self._in_flight)
                    log.warning("not a member of the group's generation; partitions given "
                                "back", extra={"partitions": given_back})
                    outcome = CommitOutcome.UNUSABLE
                elif not started or self.producer is None:
                    outcome = CommitOutcome.ABORTED
                else:
                    outcome = await commit(self.producer, turn, member)
            finally:
                self._in_flight = frozenset()
            if outcome is not CommitOutcome.COMMITTED:
                if outcome is CommitOutcome.ABORTED:
                    self._metrics.count_abort()
                for task, _ in turn:
                    task.fail(outcome, counted=True)
                await self._drop_producer()
        self._wake.clear()  # (a hurry is for what was pending then)

    async def _start_producer(self, tasks: Iterable[PendingTask]) -> bool:
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
