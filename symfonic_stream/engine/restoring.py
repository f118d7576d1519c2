"""Task set-up, step 2: each task's state, restored (and, at step 3, restored again when it
disagrees with its group).

A task's state is its processor (whose stores hold what it remembers) and, for a task that
keeps its position in its changelog, its position store. A partition this process kept
since it was revoked (:mod:`symfonic_stream.state.kept`) comes back with its stores as
they were, and only the changelog written since they last read it is restored; any other
gets a fresh processor, restored from the changelog's beginning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Processor
from symfonic_stream.engine.topology import Topology
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.disk import DiskBackend
from symfonic_stream.state.kept import Kept, KeptState
from symfonic_stream.state.position import KEY as POSITION
from symfonic_stream.state.position import Progress, position_store
from symfonic_stream.state.restore import Restored, restore_stores
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


#: The kept state of one consumer's revoked partitions.
KeptTasks = KeptState[TaskState]


def keeps_position(settings: Settings, topology: Topology) -> bool:
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
    position = position_store() if keeps_position(settings, topology) else None
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
    """Step 2 for ``tps``: kept state caught up on its changelog's tail, the rest fresh
    and restored whole; then each processor told (``restored``), but for kept state the
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
    restored = await restore_stores(settings, topology.changelog_topic, targets,
                                    starts=starts, cancelled=cancelled, on_progress=on_progress)
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
    """State that disagrees with the group's offset (step 3) is restored once more, whole.

    Both are final after step 1, and every transaction that tells the group an offset
    writes it into the position record too: they disagree only when the restore missed
    the changelog's tail (issue 32: 16 % of a million runs lost their state that way) or
    when someone else moved the group's offset. A second restore tells the two apart: it
    repairs the first, or it agrees with it, and then the group was reset by an operator
    (``kafka-consumer-groups --reset-offsets``), which step 3 follows with this state."""
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
