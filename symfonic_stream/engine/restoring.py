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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine.records import Processor
from symfonic_stream.engine.topology import Topology
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.disk import DiskState
from symfonic_stream.state.kept import Kept, KeptState
from symfonic_stream.state.position import KEY as POSITION
from symfonic_stream.state.position import Progress, position_store
from symfonic_stream.state.restore import Restored, restore_stores
from symfonic_stream.state.store import StateStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TaskState:
    """What one task remembers: its processor's stores, and its position store."""

    processor: Processor
    position: StateStore[Progress] | None
    #: The stores hold every changelog record before this offset (None: not restored).
    changelog_offset: int | None = None
    #: Its persistent store (``SYMFONIC_STATE_DIR``), written with every record applied.
    disk: DiskState | None = None

    @property
    def stores(self) -> list[StateStore[Any]]:
        own = list(self.processor.stores)
        return own if self.position is None else [*own, self.position]


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


def fresh_state(settings: Settings, topology: Topology, tp: TopicPartition) -> TaskState:
    keeps = keeps_position(settings, topology)
    return TaskState(topology.processor_factory(tp.partition),
                     position_store() if keeps else None)


def open_state(settings: Settings, topology: Topology, tp: TopicPartition
               ) -> tuple[TaskState, int | None]:
    """Fresh state, loaded from its persistent store where there is one to trust; and the
    changelog offset it holds everything before (None: restore it whole)."""
    state = fresh_state(settings, topology, tp)
    if settings.state_dir is None or not topology.source.grouped:
        return state, None
    folder = settings.state_dir / topology.group_id
    disk = DiskState.open(folder, str(tp.partition))
    if disk is None:
        return state, None
    start = disk.checkpoint()
    if start is None:  # nothing there, or nothing to trust: begin it afresh
        disk.destroy()
        disk = DiskState.open(folder, str(tp.partition))
        if disk is None:
            return state, None
    if settings.state_cache_keys > 0:  # values on disk (state/cached.py): nothing loaded
        disk.attach(state.stores, settings.state_cache_keys)
        log.info("state opened on its persistent store (values on disk)",
                 extra={"partition": tp.partition, "checkpoint": start})
    elif start is not None:
        loaded = disk.load(state.stores)
        log.info("state loaded from its persistent store",
                 extra={"partition": tp.partition, "records": loaded, "checkpoint": start})
    state.disk = disk
    return state, start


def give_back(kept: KeptTasks | None, states: Mapping[TopicPartition, TaskState]) -> None:
    """A set-up superseded (or failed) after its restore: each restored state goes back to
    ``kept``, which it holds everything before its changelog offset of, as if its partition
    had been revoked, so the next set-up reads only the tail again instead of the whole
    changelog (issue 45: the state taken from ``kept`` was dropped, and the next set-up
    restored every partition whole); without ``kept``, its persistent store is closed."""
    for tp, state in states.items():
        if kept is not None and state.changelog_offset is not None:
            kept.keep(tp.partition, state, state.stores, state.changelog_offset, state.disk)
        elif state.disk is not None:
            state.disk.close()


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
                kept.keep(tp.partition, entry.holder, entry.stores, entry.applied, state.disk)
            elif state.disk is not None:
                state.disk.close()
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
            disk = states[tp].disk
            if disk is not None:
                disk.destroy()
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
    targets: dict[int, list[tuple[bytes, list[StateStore[Any]]]]] = {}
    for tp, state in states.items():
        partition, prefix = topology.changelog_place(tp.partition)
        targets.setdefault(partition, []).append((prefix, state.stores))
    mirrors = {topology.changelog_place(tp.partition)[0]: state.disk.record
               for tp, state in states.items() if state.disk is not None}
    begun = time.monotonic()
    restored = await restore_stores(settings, topology.changelog_topic, targets,
                                    starts=starts, mirrors=mirrors, cancelled=cancelled,
                                    on_progress=on_progress)
    for records in restored.records.values():
        metrics.state_restored(time.monotonic() - begun, records)
    for tp, state in states.items():
        state.changelog_offset = restored.applied[topology.changelog_place(tp.partition)[0]]
        if state.disk is not None:
            state.disk.mark(state.changelog_offset)
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
        disk = states[tp].disk
        if disk is not None:
            disk.destroy()
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
