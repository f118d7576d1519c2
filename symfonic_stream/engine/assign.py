"""Setting tasks up: when partitions are assigned, and again after a failed transaction.

Before a task consumes its partition, in this order (the engine then seeks and resumes it,
under its lock):

1. **fence**: start the task's producer: its InitProducerId bumps the epoch of the task's
   transactional id, fencing any zombie still holding the partition and finishing whatever
   transaction it left open. From here on nobody else writes the task's outputs,
   changelog or offsets.
2. **restore**: a fresh processor's stores are replayed from the changelog
   (:mod:`symfonic_stream.state.restore`), then told so (``restored``).
3. **position**: where to resume: the position the changelog restored, unless the
   group's committed offset was moved by someone else since (:func:`.position.resume_offset`);
   without a position (a stateless consumer, or ``SYMFONIC_GROUP_OFFSET_INTERVAL_MS=0``), the
   group's committed offset, the beginning when never committed; both final now that step 1
   resolved every transaction that could still move them. For a task without a group, the
   position its own store restored (or its range's start).
4. **settle**: one full garbage collection, then what is alive is frozen out of later
   ones (:mod:`symfonic_stream.engine.heap`): the restored state lives as long as its task.

aio-libs/aiokafka#738: aiokafka lets the fetcher run before ``on_partitions_assigned``
completes, so records of a partition can arrive before it is set up; the engine drops them
and the seek after step 3 makes the fetcher start over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine import heap
from symfonic_stream.engine.restoring import (
    KeptTasks,
    TaskState,
    disagrees,
    restore_again,
    restore_tasks,
)
from symfonic_stream.engine.topology import RangeSource, Topology
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.producer import TaskProducer
from symfonic_stream.kafka.retry import OnWait
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.position import KEY as POSITION
from symfonic_stream.state.position import Progress, resume_offset
from symfonic_stream.state.store import StateStore

if TYPE_CHECKING:
    from symfonic_stream.engine.task import StreamTask

log = logging.getLogger(__name__)

#: How long start-up waits for missing topics to appear before giving up.
TOPIC_WAIT_S = 10.0


class EngineError(Exception):
    """The consumer cannot start (Kafka unreachable, missing topics, broken co-partitioning)."""


class Superseded(Exception):
    """A rebalance (or stop) happened while setting tasks up; the work is discarded."""


@dataclass(slots=True)
class Prepared:
    """One task after steps 1-3: fenced, restored, and where to resume."""

    producer: TaskProducer
    state: TaskState
    offset: int
    #: The group's committed offset (None: never committed, or no group).
    group_offset: int | None = None


async def check_topics(
    settings: Settings,
    topology: Topology,
    *,
    timeout_s: float | None = None,
    on_wait: OnWait | None = None,
) -> None:
    """Every topic the consumer reads or writes must exist; a group's changelog must have as
    many partitions as its source. (A missing output topic would otherwise fail every
    transaction, after a metadata timeout each.) An unreachable Kafka is waited for within
    ``timeout_s`` (:class:`~symfonic_stream.kafka.retry.KafkaUnavailable` after it)."""
    wanted = [topology.source_topic, *topology.output_topics]
    wanted += [t for t in (topology.dead_letter_topic, topology.changelog_topic) if t]
    wanted = list(dict.fromkeys(wanted))
    deadline = time.monotonic() + TOPIC_WAIT_S
    while True:
        counts = await partition_counts(settings, wanted, timeout_s=timeout_s, on_wait=on_wait)
        missing = [name for name in wanted if name not in counts]
        # A topic created a moment ago (``topics ensure`` running alongside the first
        # pods) may not be in every broker's metadata yet: give it a little time.
        if not missing or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    if missing:
        raise EngineError(
            f"topic(s) {', '.join(missing)} do not exist; run `symfonic-stream topics ensure`"
        )
    if topology.changelog_topic is not None and topology.source.grouped:
        source, changelog = counts[topology.source_topic], counts[topology.changelog_topic]
        if source != changelog:
            raise EngineError(
                f"{topology.changelog_topic} has {changelog} partitions but "
                f"{topology.source_topic} has {source}: a changelog must be co-partitioned "
                f"with its source topic"
            )


async def prepare_tasks(
    settings: Settings,
    topology: Topology,
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    *,
    metrics: ConsumerMetrics,
    kept: KeptTasks | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    on_progress: Callable[[], None] = lambda: None,
) -> dict[TopicPartition, Prepared]:
    """Steps 1-4 for ``tps`` (a partition ``kept`` holds restores only its tail). On any
    failure every producer started here is closed."""
    producers: dict[TopicPartition, TaskProducer] = {}
    try:
        # 1. fence: every partition's InitProducerId runs concurrently.
        started = await asyncio.gather(
            *(start_producer(settings, topology, tp) for tp in tps), return_exceptions=True
        )
        for tp, result in zip(tps, started, strict=True):
            if isinstance(result, TaskProducer):
                producers[tp] = result
        for result in started:
            if isinstance(result, BaseException):
                raise result
        _check(cancelled)
        # 2. restore (only the tail of what was kept)
        states = await restore_tasks(settings, topology, tps, metrics, kept=kept,
                                     cancelled=cancelled, on_progress=on_progress)
        _check(cancelled)
        # 3. position
        groups = await _group_offsets(consumer, topology, tps)
        disagree = [tp for tp in tps if disagrees(states[tp].position, groups[tp])]
        if disagree:
            await restore_again(settings, topology, disagree, states, groups, metrics,
                                cancelled=cancelled, on_progress=on_progress)
            _check(cancelled)
        offsets = await _positions(consumer, topology,
                                   {tp: states[tp].position for tp in tps}, groups)
        _check(cancelled)
        # 4. settle
        heap.settle()
    except BaseException:
        await asyncio.gather(*(producer.close() for producer in producers.values()))
        raise
    return {tp: Prepared(producers[tp], states[tp], offsets[tp], groups[tp]) for tp in tps}


async def _group_offsets(
    consumer: AIOKafkaConsumer, topology: Topology, tps: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The group's committed offset of each partition (None for a task without a group)."""
    if not topology.source.grouped:
        return dict.fromkeys(tps)
    return await committed_offsets(consumer, tps)


async def _positions(
    consumer: AIOKafkaConsumer,
    topology: Topology,
    positions: dict[TopicPartition, StateStore[Progress] | None],
    groups: dict[TopicPartition, int | None],
) -> dict[TopicPartition, int]:
    """Where each task resumes (step 3)."""
    offsets: dict[TopicPartition, int] = {}
    source = topology.source
    if isinstance(source, RangeSource):
        for tp, store in positions.items():
            saved = store.get(POSITION) if store is not None else None
            offsets[tp] = source.start(tp.partition) if saved is None else saved.next_offset
        return offsets
    resumes = {tp: resume_offset(store.get(POSITION) if store is not None else None, groups[tp])
               for tp, store in positions.items()}
    offsets = {tp: at for tp, at in resumes.items() if at is not None}
    fresh = [tp for tp, at in resumes.items() if at is None]
    if fresh:  # never committed: the beginning (auto_offset_reset=earliest)
        offsets.update(await consumer.beginning_offsets(fresh))
    for tp, store in positions.items():
        if store is not None:  # seeds the next transaction's position record
            store.put(POSITION, Progress(offsets[tp], group_offset=groups[tp]))
    return offsets


async def rebuild_task(
    settings: Settings,
    topology: Topology,
    consumer: AIOKafkaConsumer,
    task: StreamTask,
    *,
    metrics: ConsumerMetrics,
    on_progress: Callable[[], None],
) -> None:
    """After a failed transaction: a new producer, the task back at its last commit, and a
    seek there.

    Always a new producer: an error aiokafka calls abortable leaves the old one's broker
    transaction open, and its next commit would commit the aborted records too (docs/
    engine.md, "aiokafka, read closely"); the new one's InitProducerId ends that
    transaction. The stores roll back in memory (:func:`_roll_back`): no restore. Only when
    that fails, steps 1-3 again, whole: the new producer's InitProducerId also waits until
    the markers of our last committed transaction are written (the broker answers EndTxn
    before writing them, KAFKA-5477), so the changelog's stable end and the position both
    include that transaction, or neither.
    """
    await task.producer.close()
    # (The producer before the roll back: once reset, the task could be handed records.)
    task.producer = await start_producer(settings, topology, task.tp)
    try:
        undone = _roll_back(task)
    except Exception:
        log.exception("rolling back in memory failed; restoring the task",
                      extra=task.log_context())
        await task.producer.close()
    else:
        log.info("rolled back to the last commit", extra={**task.log_context(), "keys": undone})
        consumer.seek(task.tp, task.next_offset)
        return
    if task.disk is not None:  # it holds what was committed: the rebuild loads it again
        task.disk.close()
    prepared = (await prepare_tasks(settings, topology, consumer, [task.tp], metrics=metrics,
                                    on_progress=on_progress))[task.tp]
    task.producer = prepared.producer
    task.reset(prepared.state, prepared.offset, prepared.group_offset)
    consumer.seek(task.tp, task.next_offset)


def _roll_back(task: StreamTask) -> int:
    """The task's stores back to its last commit, in memory, what derives from them rebuilt
    (as after a restore), at its committed offset; the keys put back. Raises when it cannot."""
    undone = sum(store.roll_back() for store in task.stores)
    task.processor.restored()
    task.reset(task.state(), task.next_offset, task.group_offset)
    return undone


async def committed_offsets(
    consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The group's committed offset of each partition (None: never committed; a task then
    starts at the beginning, auto_offset_reset=earliest)."""
    tps = list(tps)
    committed = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
    return {tp: None if off is None else int(off) for tp, off in zip(tps, committed, strict=True)}


async def start_producer(
    settings: Settings, topology: Topology, tp: TopicPartition
) -> TaskProducer:
    """Step 1 for ``tp``: a started producer, every earlier transaction of its id finished."""
    producer = TaskProducer(settings, topology.transactional_id(tp.partition), tp.partition)
    await producer.start()
    fault_point("init_producer")
    return producer


def _check(cancelled: Callable[[], bool]) -> None:
    if cancelled():
        raise Superseded


Rebalanced = Callable[[set[TopicPartition]], Awaitable[None]]


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks to the engine."""

    def __init__(self, on_revoked: Rebalanced, on_assigned: Rebalanced) -> None:
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._on_assigned(set(assigned))
