"""What the group's assignments do to an engine's tasks (the engine's rebalance listener).

aiokafka's eager protocol revokes every partition at every rebalance, then assigns. On a
revocation each task commits what is pending (aio-libs/aiokafka#844: no transaction
straddles the hand-over), and a task whose last commit was clean leaves its state kept
(:mod:`symfonic_stream.state.kept`). On an assignment the new partitions are paused and set
up by the loop (:func:`~symfonic_stream.engine.assign.prepare_tasks`: fence, restore or
catch up what was kept, position, settle), then installed as tasks and resumed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine.assign import Prepared, Superseded, prepare_tasks
from symfonic_stream.engine.assignor import WARM_LAG, Warmth
from symfonic_stream.engine.committer import Committer
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.readiness import Readiness
from symfonic_stream.engine.restoring import KeptTasks, open_state
from symfonic_stream.engine.task import StreamTask
from symfonic_stream.engine.topology import Topology
from symfonic_stream.faults import fault_point
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

#: Back-off after a failed partition set-up.
SETUP_RETRY_S = 1.0


class Assignments:
    """The engine's side of the group protocol; its fields are the engine's."""

    settings: Settings
    topology: Topology
    metrics: ConsumerMetrics
    readiness: Readiness
    tasks: dict[TopicPartition, StreamTask]
    kept: KeptTasks | None
    _consumer: AIOKafkaConsumer | None
    _to_set_up: set[TopicPartition]
    _lock: asyncio.Lock
    _epoch: int
    _setup_retry_at: float
    _stopping: asyncio.Event
    _taken: asyncio.Event
    _on_demand: OnDemandTopics | None
    committer: Committer
    _rejoin: bool
    #: The partitions owned until the last revocation (what this member says it owned).
    _owned: frozenset[int] = frozenset()
    #: Partitions the leader asked this member to warm up (engine/assignor.py).
    _warming: frozenset[int] = frozenset()

    def _warmth(self) -> Warmth:
        """What this member says when it joins: what it owned, how far behind its kept
        state of each partition is (0 for a partition it owns)."""
        lags = self.kept.lags() if self.kept is not None else {}
        lags.update((tp.partition, 0) for tp in self.tasks)
        return Warmth(self._owned | {tp.partition for tp in self.tasks}, lags)

    def _on_warm_up(self, partitions: list[int]) -> None:
        """The leader asks this member to warm these up: fresh state, tailed from the
        beginning of the changelog, until caught up (:meth:`_probe_when_warm`)."""
        if self.kept is None:
            return
        for partition in partitions:
            if partition in self.kept.partitions:
                continue  # kept already, and tailed
            tp = TopicPartition(self.topology.source_topic, partition)
            state, start = open_state(self.settings, self.topology, tp)
            self.kept.warm_up(partition, state, state.store_partition, start or 0)
        self._warming = frozenset(partitions)
        if partitions:
            log.info("warming partitions up before the group moves them here",
                     extra={"partitions": sorted(partitions)})

    def _probe_when_warm(self) -> None:
        """Every turn: once every partition being warmed up has caught up, ask the group
        to rebalance (a probing rebalance, KIP-441), which now moves them here."""
        if not self._warming or self.kept is None:
            return
        lags = self.kept.lags()
        if all(lags.get(p, WARM_LAG + 1) <= WARM_LAG for p in self._warming):
            log.info("partitions warm: asking the group to move them here",
                     extra={"partitions": sorted(self._warming)})
            self._warming = frozenset()
            self._rejoin = True

    async def _set_up_assigned(self, consumer: AIOKafkaConsumer) -> None:
        """Set up every newly assigned partition (unlocked), then install its task."""
        epoch = self._epoch
        tps = sorted(self._to_set_up, key=lambda tp: tp.partition)
        try:
            prepared = await prepare_tasks(
                self.settings, self.topology, consumer, tps, metrics=self.metrics,
                kept=self.kept,
                cancelled=lambda: epoch != self._epoch or self._stopping.is_set(),
                on_progress=self.readiness.progress,
            )
        except Superseded:
            return
        except Exception:
            log.exception("setting partitions up failed; retrying",
                          extra={"partitions": [tp.partition for tp in tps]})
            self._setup_retry_at = time.monotonic() + SETUP_RETRY_S
            return
        async with self._lock:
            if epoch != self._epoch or self._stopping.is_set():
                return
            for tp, ready in prepared.items():
                consumer.seek(tp, ready.offset)
                self.tasks[tp] = self._task(tp, ready)
                self._to_set_up.discard(tp)
                self.metrics.partition_assigned(tp.topic, tp.partition)
            consumer.resume(*tps)
        log.info("partitions ready", extra={"partitions": [tp.partition for tp in tps],
                                            "offsets": [prepared[tp].offset for tp in tps]})

    def _task(self, tp: TopicPartition, ready: Prepared) -> StreamTask:
        settings = self.settings
        return StreamTask(
            self.topology, tp.partition, self.committer, ready.state, ready.offset,
            metrics=self.metrics, max_record_bytes=settings.max_record_bytes,
            on_demand=self._on_demand, group_offset=ready.group_offset,
        )

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:  # (aiokafka also calls this, with nothing, before its first join)
            fault_point("revoking")
        self._epoch += 1
        self.readiness.assigned = False
        self.readiness.dropped = False
        self.readiness.reason = "rebalancing: waiting for the group's new assignment"
        self.readiness.set(False, self.readiness.reason)
        self.metrics.rebalance()
        # The lock keeps new records out; closing commits what is pending
        # (aio-libs/aiokafka#844: never let a transaction straddle the hand-over).
        async with self._lock:
            self._owned = frozenset(tp.partition for tp in [*self.tasks, *self._to_set_up])
            self._to_set_up.clear()
            tasks = [self.tasks.pop(tp) for tp in list(self.tasks) if tp in revoked]
            clean = await asyncio.gather(*(task.close() for task in tasks))
            if not self.tasks:  # its id may be the next owner's to fence
                await self.committer.close()
            for task, closed in zip(tasks, clean, strict=True):
                self.metrics.forget_partition(task.tp.topic, task.tp.partition)
                self._keep(task, closed)
        if revoked:
            log.info("partitions revoked",
                     extra={"partitions": sorted(p.partition for p in revoked)})

    def _keep(self, task: StreamTask, closed: bool) -> None:
        """A revoked task's state is kept when everything it processed is committed and
        its stores' changelog offset is known (:mod:`symfonic_stream.state.kept`)."""
        if self.kept is None or not closed or task.changelog_offset is None:
            task.store_partition.backend.close()
            return
        state = task.state()
        self.kept.keep(task.partition, state, state.store_partition, task.changelog_offset)

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._epoch += 1
        mine = {tp for tp in assigned if tp.topic == self.topology.source_topic}
        if mine and self._consumer is not None:
            self._consumer.pause(*mine)  # nothing is fetched until the task is set up
        self._to_set_up = mine
        self._setup_retry_at = 0.0
        self.readiness.assigned = True
        log.info("partitions assigned", extra={"partitions": sorted(p.partition for p in mine)})

