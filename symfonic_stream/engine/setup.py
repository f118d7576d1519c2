"""Setting tasks up: when partitions are assigned, and again after a failed transaction.

Before a task consumes its partition, in this order (the engine then seeks and resumes it,
under its lock):

1. **fence**: InitProducerId of the partition's transactional id
   (:mod:`symfonic_stream.kafka.id_fencing`): a process that died holding the partition
   wrote through the id of one of its partitions, and its open transaction is aborted by
   whoever is assigned that one. A zombie that still runs is fenced by its generation
   (commit step 6), which the group ended before assigning the partition here.
2. **wait for stable offsets**: the group's committed offsets, asked with
   ``require_stable`` (:func:`~symfonic_stream.kafka.group.fetch_stable_offsets`):
   while a transaction of the previous owner still holds offsets of the partition, the
   coordinator says so, and the set-up waits for it to end. From here on the committed
   offsets are final, and nobody else writes the task's outputs, changelog or offsets.
3. **restore**: the task's state (:class:`~symfonic_stream.engine.task.TaskState`). A
   partition this process kept since it was revoked (:mod:`symfonic_stream.state.kept`)
   comes back with its stores as they were, and only the changelog written since they last
   read it is restored; any other gets a fresh processor whose stores are restored from the
   changelog's beginning, or from its persistent store's checkpoint
   (:mod:`symfonic_stream.state.restore`); the processor is then told so (``restored``).
4. **position**: where to resume: the position the changelog restored, unless the
   group's committed offset was moved by someone else since
   (:func:`~symfonic_stream.engine.transaction.resume_offset`); without a position (a
   stateless consumer, or ``SYMFONIC_GROUP_OFFSET_INTERVAL_MS=0``), the group's committed
   offset, the beginning when never committed. A restore that disagrees with the group (it
   read before the last transaction's markers reached the changelog) is read again. For a
   task without a group, the position its own store restored (or its range's start).
5. **settle**: one full garbage collection, then what is alive is frozen out of later
   ones (:mod:`symfonic_stream.engine.garbage`): the restored state lives as long as its
   task.

aio-libs/aiokafka#738: aiokafka lets the fetcher run before ``on_partitions_assigned``
completes, so records of a partition can arrive before it is set up; the engine drops them
and the seek after set-up step 4 (position) makes the fetcher start over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine import garbage
from symfonic_stream.engine.task import StreamTask, TaskState, task_state
from symfonic_stream.engine.topology import RangeSource, Topology
from symfonic_stream.engine.transaction import (
    POSITION,
    Progress,
    position_store,
    resume_offset,
)
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.group import OffsetsUnstable, fetch_stable_offsets
from symfonic_stream.kafka.id_fencing import fence_ids
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.kafka.retry import OnWait
from symfonic_stream.observability import tracing
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.disk import DiskBackend
from symfonic_stream.state.kept import Kept, KeptState
from symfonic_stream.state.restore import Restored, restore_stores
from symfonic_stream.state.store import StateStore, StorePartition

log = logging.getLogger(__name__)


#: How long start-up waits for missing topics to appear before giving up.
TOPIC_WAIT_S = 10.0
#: Between two asks for offsets a transaction still holds (step 2).
UNSTABLE_RETRY_S = 0.05


class EngineError(Exception):
    """The consumer cannot start (Kafka unreachable, missing topics, broken co-partitioning)."""


class Superseded(Exception):
    """A rebalance (or stop) happened while setting tasks up; the work is discarded."""


@dataclass(slots=True)
class Prepared:
    """One task after steps 1-4: fenced, restored, and where to resume."""

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
    fence: bool = True,
) -> dict[TopicPartition, Prepared]:
    """Steps 1-5 for ``tps`` (a partition ``kept`` holds restores only its tail; ``fence``
    False: partitions this process owns still, after a failure)."""
    # 1. fence: every partition's InitProducerId runs concurrently.
    if fence:
        await fence_ids(consumer._client, [topology.transactional_id(tp.partition) for tp in tps],
                        transaction_timeout_ms=settings.transaction_timeout_ms,
                        timeout_s=settings.transaction_timeout_ms / 1000)
        fault_point("init_producer")
        _check(cancelled)
    # 2. wait for stable offsets
    groups = await _group_offsets(settings, consumer, topology, tps, cancelled)
    # 3. restore (only the tail of what was kept)
    states = await restore_tasks(settings, topology, tps, metrics, kept=kept,
                                 cancelled=cancelled, on_progress=on_progress)
    try:
        _check(cancelled)
        # 4. position
        disagree = [tp for tp in tps if disagrees(states[tp].position, groups[tp])]
        if disagree:
            await restore_again(settings, topology, disagree, states, groups, metrics,
                                cancelled=cancelled, on_progress=on_progress)
            _check(cancelled)
        offsets = await _positions(consumer, topology,
                                   {tp: states[tp].position for tp in tps}, groups)
        _check(cancelled)
    except BaseException:  # what was restored is not lost with the set-up
        give_back(kept, states)
        raise
    # 5. settle
    garbage.settle()
    return {tp: Prepared(states[tp], offsets[tp], groups[tp]) for tp in tps}


async def _group_offsets(
    settings: Settings, consumer: AIOKafkaConsumer, topology: Topology,
    tps: list[TopicPartition], cancelled: Callable[[], bool],
) -> dict[TopicPartition, int | None]:
    """Set-up step 2, wait for stable offsets: the group's committed offset of each
    partition, once no transaction holds one any more (None for a task without a group)."""
    if not topology.source.grouped:
        return dict.fromkeys(tps)
    deadline = time.monotonic() + settings.transaction_timeout_ms / 1000
    while True:
        try:
            return await fetch_stable_offsets(consumer, tps)
        except OffsetsUnstable as unstable:
            if time.monotonic() > deadline:
                raise
            log.info("waiting for a transaction that holds offsets to end",
                     extra={"partitions": sorted(tp.partition for tp in unstable.partitions)})
        _check(cancelled)
        await asyncio.sleep(UNSTABLE_RETRY_S)


async def _positions(
    consumer: AIOKafkaConsumer,
    topology: Topology,
    positions: dict[TopicPartition, StateStore[Progress] | None],
    groups: dict[TopicPartition, int | None],
) -> dict[TopicPartition, int]:
    """Where each task resumes (set-up step 4, position)."""
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
    """After a failed transaction or processor: the task back at its last commit, and a
    seek there. (The committer took a new producer: ``engine/task.py``.)

    The state transactions are dropped (:func:`roll_back`): no restore. Only when that fails,
    steps 2-4 again, whole: the offsets and the changelog then both include the last
    committed transaction, or neither (a restore that read before its markers disagrees
    with the group, and is read again).
    """
    try:
        undone = roll_back(task)
    except Exception:
        log.exception("rolling back in memory failed; restoring the task",
                      extra=task.log_context())
    else:
        log.info("rolled back to the last commit", extra={**task.log_context(), "keys": undone})
        consumer.seek(task.tp, task.next_offset)
        return
    task.store_partition.backend.close()  # (it holds what was committed: loaded again)
    prepared = (await prepare_tasks(settings, topology, consumer, [task.tp], metrics=metrics,
                                    on_progress=on_progress, fence=False))[task.tp]
    task.reset(prepared.state, prepared.offset, prepared.group_offset)
    consumer.seek(task.tp, task.next_offset)


def roll_back(task: StreamTask) -> int:
    """The task's state transactions dropped (its stores hold its last commit), what its
    processor derives from them rebuilt (as after a restore), at its committed offset; the
    keys dropped. Raises when it cannot."""
    undone = task.store_partition.abort()
    task.processor.restored()
    task.reset(task.state(), task.next_offset, task.group_offset)
    return undone


async def start_producer(settings: Settings, topology: Topology,
                         value_schema_ids: Mapping[str, bytes], partition: int
                         ) -> ProcessProducer:
    """The process's producer, with the transactional id of ``partition`` (one it owns):
    every earlier transaction of that id finished. ``value_schema_ids``: each output
    topic's ``__value_schema_id`` header (empty: none)."""
    producer = ProcessProducer(settings, topology.transactional_id(partition),
                               value_schema_ids)
    await producer.start()
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


# -- set-up step 3, restore -------------------------------------------------------------

#: The kept state of one consumer's revoked partitions.
KeptTasks = KeptState[TaskState]


def has_position(settings: Settings, topology: Topology) -> bool:
    """Whether the topology's tasks keep their position in their changelog: a replay's
    always (it has no group), a group's when it has a changelog and
    ``SYMFONIC_GROUP_OFFSET_INTERVAL_MS`` is not 0 (the setting's one meaning since every
    transaction tells the group: docs/engine.md, "The position in the changelog")."""
    if not topology.source.grouped:
        return True
    return topology.changelog_topic is not None and settings.group_offset_interval_ms > 0


def open_state(settings: Settings, topology: Topology, tp: TopicPartition
               ) -> tuple[TaskState, int | None]:
    """A fresh processor's state, on its persistent store where there is one (opened at
    its checkpoint when it may be trusted); and the changelog offset it holds everything
    before (None: restore it whole)."""
    processor = topology.processor_factory(tp.partition)
    position = position_store() if has_position(settings, topology) else None
    if settings.state_dir is None or not topology.source.grouped:
        return task_state(processor, position), None
    folder, name = settings.state_dir / topology.group_id, str(tp.partition)
    disk = DiskBackend.open(folder, name, settings.state_cache_keys)
    start = disk.checkpoint() if disk is not None else None
    if disk is not None and start is None:  # nothing there, or nothing to trust: afresh
        disk.destroy()
        disk = DiskBackend.open(folder, name, settings.state_cache_keys)
    if start is not None:
        log.info("state loaded from its persistent store" if settings.state_cache_keys == 0
                 else "state opened on its persistent store (values on disk)",
                 extra={"partition": tp.partition, "checkpoint": start})
    return task_state(processor, position, disk), start


def close_state(state: TaskState) -> None:
    """The state is no longer used (its persistent store closed)."""
    state.store_partition.backend.close()


def give_back(kept: KeptTasks | None, states: Mapping[TopicPartition, TaskState]) -> None:
    """A set-up superseded (or failed) after its restore: each restored state goes back to
    ``kept``, which it holds everything before its changelog offset of, as if its partition
    had been revoked, so the next set-up reads only the tail again instead of the whole
    changelog (issue 45: the state taken from ``kept`` was dropped, and the next set-up
    restored every partition whole); without ``kept``, it is closed."""
    for tp, state in states.items():
        offset = state.changelog_offset
        if kept is not None and offset is not None:
            kept.keep(tp.partition, state, state.store_partition, offset)
        else:
            close_state(state)


async def restore_tasks(
    settings: Settings,
    topology: Topology,
    tps: list[TopicPartition],
    metrics: ConsumerMetrics,
    *,
    kept: KeptTasks | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    on_progress: Callable[[], None] = lambda: None,
) -> dict[TopicPartition, TaskState]:
    """Set-up step 3, restore, for ``tps``: kept state caught up on its changelog's tail, the rest
    fresh and restored whole; then each processor told (``restored``), but for kept state the
    tail left as it was (its counts, buffers and deadlines are still right). Kept state
    taken here goes back to ``kept`` if the set-up fails or is superseded."""
    states: dict[TopicPartition, TaskState] = {}
    taken: dict[TopicPartition, Kept[TaskState]] = {}
    starts: dict[int, int] = {}
    for tp in tps:
        entry = kept.take(tp.partition) if kept is not None else None
        if entry is not None:
            taken[tp], states[tp] = entry, entry.holder
            starts[tp.partition] = entry.applied
        else:
            states[tp], start = open_state(settings, topology, tp)
            if start is not None:
                starts[tp.partition] = start
    try:
        untouched = await _read_changelog(settings, topology, states, taken, starts, metrics,
                                          cancelled, on_progress)
    except BaseException:
        for tp, state in states.items():
            if tp in taken and kept is not None:
                entry = taken[tp]
                kept.keep(tp.partition, entry.holder, entry.partition, entry.applied)
            else:
                close_state(state)
        raise
    for tp, state in states.items():
        if tp not in untouched:
            state.processor.restored()
    return states


async def _read_changelog(
    settings: Settings,
    topology: Topology,
    states: dict[TopicPartition, TaskState],
    taken: dict[TopicPartition, Kept[TaskState]],
    starts: dict[int, int],
    metrics: ConsumerMetrics,
    cancelled: Callable[[], bool],
    on_progress: Callable[[], None],
) -> set[TopicPartition]:
    """Restores ``states`` (from ``starts`` where they hold the changelog before it); the
    kept ones that nothing changed."""
    if topology.changelog_topic is None:
        return set()
    restored, behind = await _restore(settings, topology, states, starts, metrics, cancelled,
                                      on_progress)
    if behind:  # their changelog lost records they never read: start afresh
        log.warning("kept or stored state is behind the changelog's start; restoring it whole",
                    extra={"partitions": sorted(tp.partition for tp in behind)})
        for tp in behind:
            states[tp].store_partition.backend.destroy()
        again = {tp: open_state(settings, topology, tp)[0] for tp in behind}
        await _restore(settings, topology, again, {}, metrics, cancelled, on_progress)
        states.update(again)
    return {tp for tp, entry in taken.items() if tp not in behind and entry.tailed == 0
            and restored.records.get(topology.changelog_place(tp.partition)[0], 0) == 0}


async def _restore(
    settings: Settings,
    topology: Topology,
    states: dict[TopicPartition, TaskState],
    starts: dict[int, int],
    metrics: ConsumerMetrics,
    cancelled: Callable[[], bool],
    on_progress: Callable[[], None],
) -> tuple[Restored, set[TopicPartition]]:
    """Reads the changelog into ``states``; what was read, and the tasks whose start was
    deleted."""
    assert topology.changelog_topic is not None
    targets: dict[int, list[tuple[bytes, StorePartition]]] = {}
    for tp, state in states.items():
        partition, prefix = topology.changelog_place(tp.partition)
        targets.setdefault(partition, []).append((prefix, state.store_partition))
    begun = time.monotonic()
    with tracing.span("restore", {"symfonic.consumer": topology.consumer,
                                  "symfonic.changelog": topology.changelog_topic,
                                  "symfonic.partitions": sorted(targets)}):
        restored = await restore_stores(settings, topology.changelog_topic, targets,
                                        starts=starts, cancelled=cancelled,
                                        on_progress=on_progress)
    for records in restored.records.values():
        metrics.state_restored(time.monotonic() - begun, records)
    behind = {tp for tp in states if topology.changelog_place(tp.partition)[0] in restored.behind}
    return restored, behind


def disagrees(position: StateStore[Progress] | None, group_offset: int | None) -> bool:
    """Whether a restored position says the group was last told another offset than the
    group holds (never for a task without a position, or without a group)."""
    saved = position.get(POSITION) if position is not None else None
    return saved is not None and saved.group_offset != group_offset


async def restore_again(
    settings: Settings,
    topology: Topology,
    tps: list[TopicPartition],
    states: dict[TopicPartition, TaskState],
    groups: dict[TopicPartition, int | None],
    metrics: ConsumerMetrics,
    *,
    cancelled: Callable[[], bool],
    on_progress: Callable[[], None],
) -> None:
    """State that disagrees with the group's offset (set-up step 4, position) is restored
    once more, whole.

    Both are final after set-up step 2 (wait for stable offsets), and every transaction
    that tells the group an offset writes it into the position record too: they disagree
    only when the restore missed the changelog's tail (issue 32: 16 % of a million runs lost
    their state that way) or when someone else moved the group's offset. A second restore
    tells the two apart: it repairs the first, or it agrees with it, and then the group was
    reset by an operator (``kafka-consumer-groups --reset-offsets``), which set-up step 4
    (position) follows with this state."""
    log.error("restored state disagrees with the group's committed offset; restoring again",
              extra={"partitions": [tp.partition for tp in tps],
                     "group_offsets": [groups[tp] for tp in tps],
                     "changelog_offsets": [_saved_offset(states[tp].position) for tp in tps]})
    for tp in tps:  # the second restore reads the changelog whole, not a copy of the first
        states[tp].store_partition.backend.destroy()
    again = await restore_tasks(settings, topology, tps, metrics, cancelled=cancelled,
                                on_progress=on_progress)
    for tp in tps:
        first = _saved_offset(states[tp].position)
        second = _saved_offset(again[tp].position)
        states[tp] = again[tp]
        if second != first:
            log.error("the second restore read further than the first: the first missed "
                      "the changelog's tail", extra={"partition": tp.partition,
                                                     "first": first, "second": second})
        if disagrees(states[tp].position, groups[tp]):
            log.warning("the group's committed offset was moved by someone else (a reset): "
                        "resuming at the group's offset with the restored state",
                        extra={"partition": tp.partition, "group_offset": groups[tp],
                               "changelog_offset": second})


def _saved_offset(position: StateStore[Progress] | None) -> int | None:
    saved = position.get(POSITION) if position is not None else None
    return None if saved is None else saved.next_offset
