"""The consume loop every consumer runs: fetch, hand records to their task, punctuate,
act on failed transactions, follow the group's rebalances.

A newcomer follows one record in a few files (docs/engine.md, "Following one record"):
here it is fetched (:meth:`Engine._loop`); :mod:`~symfonic_stream.engine.task` processes it
into what is pending, and its committer takes that into the process's one transaction at a
time, which :mod:`~symfonic_stream.engine.transaction` commits with the state and the
offset through :mod:`~symfonic_stream.kafka.producer`. Partitions are set up by
:mod:`~symfonic_stream.engine.setup` (fence, stable offsets, restore, position, settle).
The whole lifecycle, with why each step is where it is, is in docs/engine.md.

A consumer is a member of its group; aiokafka's eager protocol revokes every partition at
every rebalance, and a revocation commits what is pending before the partition goes
(aio-libs/aiokafka#844: no transaction straddles the hand-over); a task whose last commit
was clean leaves its state kept (:mod:`symfonic_stream.state.kept`). An assignment pauses
the new partitions; the loop sets them up (:func:`~symfonic_stream.engine.setup.
prepare_tasks`), installs their tasks and resumes them. A topology with a range source (a
replay) runs on :class:`~.bounded.BoundedEngine`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import ConsumerStoppedError, KafkaError

from symfonic_stream import faults
from symfonic_stream.config import Settings
from symfonic_stream.engine.assignor import WARM_LAG, Warmth, warm_up_assignor
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.readiness import Readiness
from symfonic_stream.engine.setup import (
    EngineError,
    KeptTasks,
    Prepared,
    RebalanceListener,
    Superseded,
    check_topics,
    give_back,
    open_state,
    prepare_tasks,
    rebuild_task,
    start_producer,
)
from symfonic_stream.engine.task import Committer, StreamTask
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transaction import CommitOutcome, Transactions
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.clients import group_consumer_kwargs, request_rejoin
from symfonic_stream.kafka.group import GroupMetadata, group_metadata, leave_group
from symfonic_stream.kafka.retry import KafkaUnavailable, retrying
from symfonic_stream.observability import tracing
from symfonic_stream.observability.health import HealthState
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.disk import StateDirError, check_state_dir

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineError", "punctuation_interval"]

#: How long one idle poll waits; bounds how late a stop or a punctuation is noticed.
IDLE_POLL_MS = 250
#: Records processed between two yields to the event loop (a few ms of projection).
ABSORB_SLICE = 100
#: Back-off after a failed partition set-up or a repeatedly failing transaction.
RETRY_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
#: Back-off after a failed partition set-up.
SETUP_RETRY_S = 1.0


def punctuation_interval(settings: Settings) -> float:
    """How often the engine punctuates its tasks: every second, or a quarter of the gap
    timeout when that is shorter (so a hole becomes a gap within 1.25 timeouts)."""
    return min(1.0, settings.gap_timeout_s / 4)


class Engine:
    """Runs one :class:`Topology` as a member of its group until :meth:`stop`."""

    def __init__(
        self,
        topology: Topology,
        settings: Settings,
        metrics: ConsumerMetrics,
        health: HealthState | None = None,
    ) -> None:
        self.topology = topology
        self.settings = settings
        self.metrics = metrics
        self.readiness = Readiness(health, metrics)
        #: The partitions owned until the last revocation (what this member says it owned).
        self._owned: frozenset[int] = frozenset()
        #: Partitions the leader asked this member to warm up (engine/assignor.py).
        self._warming: frozenset[int] = frozenset()
        self._consumer: AIOKafkaConsumer | None = None
        self.tasks: dict[TopicPartition, StreamTask] = {}
        # The gauges read at each scrape see the processors of the partitions owned then.
        metrics.watch(self._processors)
        self._to_set_up: set[TopicPartition] = set()
        # Held while fetched records, a punctuation or a revocation touches the tasks.
        self._lock = asyncio.Lock()
        # Bumped by every revocation and assignment: work started under an older epoch
        # (fetched records, a set-up) is stale and discarded.
        self._epoch = 0
        self._rejoin = False
        self._setup_retry_at = 0.0
        self._stopping = asyncio.Event()
        self._punctuate_every = punctuation_interval(settings)
        self._next_punctuation = 0.0
        #: Whether the processors' timers run (a bounded source's clock never moves).
        self.punctuates = True
        self._on_demand = (
            OnDemandTopics(settings, topology.on_demand_topic)
            if topology.on_demand_topic is not None else None
        )
        # Set by the committer when it takes pending records into a transaction.
        self._taken = asyncio.Event()
        #: The process's one transaction at a time, over every task (engine/task.py, Committer).
        #: Each output topic's ``__value_schema_id`` header (SYMFONIC_SCHEMA_ID_FRAMING=header),
        #: looked up in the registry at start, before any producer starts.
        self.value_schema_ids: dict[str, bytes] = {}
        self.committer = Committer(
            functools.partial(start_producer, settings, topology, self.value_schema_ids),
            Transactions(topology, metrics, self._on_demand),
            linger_s=settings.batch_max_latency_ms / 1000, max_records=settings.batch_max_records,
            member=self._member, on_taken=self._taken)
        #: Revoked partitions' state, kept and tailed (None: a stateless consumer, or off).
        self.kept: KeptTasks | None = (
            KeptTasks(settings, topology.changelog_topic, settings.state_keep_s)
            if topology.changelog_topic is not None and topology.source.grouped
            and settings.state_keep_s > 0 else None
        )

    def _processors(self) -> list[object]:
        return [task.processor for task in self.tasks.values()]

    def _member(self) -> GroupMetadata | None:
        """Whose generation fences the offsets of the next transaction (commit step 6)."""
        if self._consumer is None or not self.topology.source.grouped:
            return None
        return group_metadata(self._consumer)

    # -- lifecycle ---------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to commit what it processed and shut down (signal-handler safe)."""
        self._stopping.set()

    async def run(self) -> int:
        """Run until stopped; 0 after a clean shutdown, 1 when it had to be cut short."""
        main = asyncio.create_task(self._main(), name=f"engine-{self.topology.consumer}")
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({main, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not main.done():
                done, _ = await asyncio.wait({main}, timeout=self.settings.shutdown_timeout_s)
                if not done:
                    log.error("shutdown timed out; abandoning the transactions in flight "
                              "(the next owner's fencing aborts its transaction)")
                    main.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await asyncio.wait_for(main, 5.0)
                    return 1
            main.result()
            return 0
        finally:
            stopping.cancel()

    async def _look_up_schema_ids(self) -> None:
        """The registry's id of each output topic's value schema (docs/schema-registry.md);
        a topic with none registered stops the start."""
        from symfonic_stream.kafka.schema_registry import RegistryError, value_schema_headers

        try:
            self.value_schema_ids.update(
                await value_schema_headers(self.settings, self.topology.output_topics))
        except RegistryError as exc:
            raise EngineError(str(exc)) from None

    async def _main(self) -> None:
        # Start-up waits for Kafka (the usual order in Kubernetes: pods before brokers),
        # within SYMFONIC_STARTUP_TIMEOUT_S, saying why on /readyz and in one log line per
        # attempt; the topics must then exist (checked once more after a short wait).
        timeout = self.settings.startup_wait_s
        wait = self.readiness.waiting_for_kafka
        if self.settings.state_dir is not None and self.topology.changelog_topic is not None:
            try:
                check_state_dir(self.settings.state_dir)
            except StateDirError as exc:
                raise EngineError(str(exc)) from None
        if self.settings.schema_id_framing == "header":
            await self._look_up_schema_ids()
        try:
            await check_topics(self.settings, self.topology, timeout_s=timeout, on_wait=wait)
            consumer = await retrying("starting the consumer", self._start_consumer,
                                      timeout_s=timeout, on_wait=wait)
        except KafkaUnavailable as exc:
            raise EngineError(f"{exc}; {self.settings.startup_wait_words()} is how long a "
                              "start waits") from None
        log.info("consumer started", extra={"group": self.topology.group_id,
                                            "topic": self.topology.source_topic})
        tail = (asyncio.create_task(self.kept.run(self._stopping), name="kept-state-tail")
                if self.kept is not None else None)
        try:
            await self._loop(consumer)
        finally:
            await self._shutdown(consumer)
            if tail is not None:
                await asyncio.gather(tail, return_exceptions=True)

    async def _start_consumer(self) -> AIOKafkaConsumer:
        topology = self.topology
        kwargs = group_consumer_kwargs(self.settings, topology.group_id)
        if self.settings.group_instance_id is not None:  # static membership (KIP-345)
            kwargs["group_instance_id"] = self.settings.group_instance_id
        if self.kept is not None:  # stateful: partitions move once warm (engine/assignor.py)
            kwargs["partition_assignment_strategy"] = (
                warm_up_assignor(topology.source_topic, self._warmth, self._on_warm_up),
                RoundRobinPartitionAssignor)
        consumer = AIOKafkaConsumer(**kwargs)
        consumer.subscribe([topology.source_topic],
                           listener=RebalanceListener(self._on_revoked, self._on_assigned))
        self.readiness.reason = "waiting for the group to assign partitions"
        return await self._started(consumer)

    async def _started(self, consumer: AIOKafkaConsumer) -> AIOKafkaConsumer:
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        return consumer

    async def _shutdown(self, consumer: AIOKafkaConsumer) -> None:
        self.readiness.set(False, "shutting down")
        async with self._lock:
            tasks = list(self.tasks.values())
            self.tasks.clear()
            self._to_set_up.clear()
            await asyncio.gather(*(task.close() for task in tasks))
            await self.committer.close()
            for task in tasks:
                self.metrics.forget_partition(task.tp.topic, task.tp.partition)
                task.store_partition.backend.close()
        # Leaving the group now hands our partitions over at once, not after a session timeout
        # (a static member leaves only when told to: kafka/leave_group.py).
        instance = self.settings.group_instance_id
        leaving = instance is not None and self.settings.leave_group_on_stop
        member_id = group_metadata(consumer).member_id if leaving else ""
        await consumer.stop()
        log.info("consumer stopped", extra={"group": self.topology.group_id})
        if leaving:
            assert instance is not None
            await leave_group(self.settings, self.topology.group_id, instance, member_id)

    # -- the group's rebalances ----------------------------------------------------------

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
            with tracing.span("rebalance assign", self._rebalance_attributes(tps)):
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
                give_back(None if self._stopping.is_set() else self.kept,
                          {tp: ready.state for tp, ready in prepared.items()})
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
            group_offset=ready.group_offset,
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
        if not revoked:
            await self._revoke(revoked)
            return
        with tracing.span("rebalance revoke", self._rebalance_attributes(revoked)):
            await self._revoke(revoked)
        log.info("partitions revoked", extra={"partitions": sorted(p.partition for p in revoked)})

    def _rebalance_attributes(self, tps: Iterable[TopicPartition]) -> dict[str, Any]:
        """A rebalance span's attributes: the consumer, its group, the partitions."""
        return {"symfonic.consumer": self.topology.consumer,
                "symfonic.group": self.topology.group_id,
                "symfonic.partitions": sorted(tp.partition for tp in tps)}

    async def _revoke(self, revoked: set[TopicPartition]) -> None:
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

    # -- the loop ----------------------------------------------------------------------

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        settings = self.settings
        while not self._stopping.is_set():
            self._probe_when_warm()
            self._maybe_rejoin(consumer)
            if self._to_set_up and time.monotonic() >= self._setup_retry_at:
                await self._set_up_assigned(consumer)
            self._resume_due(consumer)
            # Before fetching, so that a rebuilt task's seek also discards what was fetched
            # past its committed offset.
            await self._settle_failures(consumer)
            if self._finished():
                return
            # SYMFONIC_BATCH_MAX_RECORDS per owned partition: each task can have its next
            # transaction's worth ready while its previous one commits.
            tasks = self.tasks.values()
            room = settings.batch_max_records * max(1, len(tasks)) - sum(
                t.pending_records for t in tasks)
            if room <= 0:
                # Back-pressure: the transactions' worth waits; fetch more once a committer
                # took some (and none lingers for records that cannot come).
                self.committer.hurry()
                self._taken.clear()
                waited = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._taken.wait(), IDLE_POLL_MS / 1000)
                self.metrics.add_loop_time("waiting_for_room", time.monotonic() - waited)
                self._maybe_punctuate(consumer)
                continue
            epoch = self._epoch
            fetching = time.monotonic()
            try:
                fetched = await consumer.getmany(timeout_ms=IDLE_POLL_MS, max_records=room)
            except ConsumerStoppedError:
                break
            except KafkaError as exc:
                # Coordination and fetch errors surface here; the consumer recovers from
                # most of them by itself. Never crash: log, back off, poll again.
                log.warning("poll failed", extra={"error": repr(exc)})
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self.readiness.progress()
            absorbing = time.monotonic()
            self.metrics.add_loop_time("fetching", absorbing - fetching)
            if fetched:
                if faults.ARMED:
                    faults.fault_point("fetched")
                async with self._lock:
                    # A rebalance while fetching may have moved these partitions elsewhere.
                    if epoch == self._epoch:
                        await self._absorb(consumer, fetched)
                        update_gauges(self.metrics, consumer, self.tasks.values())
                self.metrics.add_loop_time("absorbing", time.monotonic() - absorbing)
            await self._after_fetch(consumer)
            self._maybe_punctuate(consumer)
            self.readiness.refresh(setting_up=[tp.partition for tp in self._to_set_up],
                                   failing=[t.partition for t in self.tasks.values()
                                            if t.failures > 1], stopping=self._stopping.is_set())

    def _maybe_rejoin(self, consumer: AIOKafkaConsumer) -> None:
        """A partition was given up, or warmed up: the group must rebalance."""
        if self._rejoin:
            self._rejoin = False
            log.info("rejoining the group to reassign partitions")
            request_rejoin(consumer)

    async def _absorb(self, consumer: AIOKafkaConsumer, fetched: dict[TopicPartition, Any]) -> None:
        """Process fetched records in slices, yielding between them: the transactions in
        flight advance one round trip per yield instead of waiting out the whole fetch."""
        for tp, records in fetched.items():
            task = self.tasks.get(tp)
            if task is None:
                continue
            position = await self._position_after(consumer, tp)
            for start in range(0, len(records), ABSORB_SLICE):
                part = records[start:start + ABSORB_SLICE]
                last = start + ABSORB_SLICE >= len(records)
                task.absorb(part, position if last else None)
                await asyncio.sleep(0)

    async def _position_after(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
        """The consumer's position after a fetch: past the last record when commit markers
        follow it, and then the committed offset moves past them too."""
        position: int = await consumer.position(tp)
        return position

    async def _after_fetch(self, consumer: AIOKafkaConsumer) -> None:
        """Every loop, after a fetch (a bounded source ends its tasks' input here)."""

    def _finished(self) -> bool:
        """Whether the loop is done without being stopped (only a bounded source is)."""
        return False

    async def _settle_failures(self, consumer: AIOKafkaConsumer) -> None:
        """Act on tasks whose transaction or processor failed (under the lock)."""
        async with self._lock:
            epoch = self._epoch
            for task in list(self.tasks.values()):
                outcome = task.failure()
                if outcome is None or epoch != self._epoch:
                    # (a pending revocation drops the task anyway: every one is revoked)
                    continue
                if outcome is CommitOutcome.ABORTED:
                    try:
                        await self._rebuild(consumer, task)
                        continue
                    except Exception:
                        log.exception("rebuilding the task failed; giving it back to the group",
                                      extra={"partition": task.partition})
                await self._drop(consumer, task)

    def _maybe_punctuate(self, consumer: AIOKafkaConsumer) -> None:
        """Every interval: the timers."""
        if not self.punctuates or time.monotonic() < self._next_punctuation:
            return
        self._next_punctuation = time.monotonic() + self._punctuate_every
        now = self.topology.clock()
        for task in self.tasks.values():
            task.punctuate(now)
        update_gauges(self.metrics, consumer, self.tasks.values())

    async def _rebuild(self, consumer: AIOKafkaConsumer, task: StreamTask) -> None:
        """After a failure: set the task up again, and back off when it keeps failing."""
        await rebuild_task(self.settings, self.topology, consumer, task, metrics=self.metrics,
                           on_progress=self.readiness.progress)
        if task.failures > 1:
            # The same records keep failing: back off instead of spinning on the broker.
            delay = min(MAX_BACKOFF_S, RETRY_BACKOFF_S * 2 ** (task.failures - 2))
            task.paused_until = time.monotonic() + delay
            consumer.pause(task.tp)
            log.warning("partition paused after repeated failures",
                        extra={"partition": task.partition, "failures": task.failures,
                               "seconds": delay})

    async def _drop(self, consumer: AIOKafkaConsumer, task: StreamTask) -> None:
        """Fenced or fatal: stop using the partition and let the group reassign it."""
        self.tasks.pop(task.tp, None)
        with contextlib.suppress(Exception):
            consumer.pause(task.tp)
        await task.close()
        task.store_partition.backend.close()
        self.metrics.forget_partition(task.tp.topic, task.tp.partition)
        self.readiness.dropped = True
        self._rejoin = True

    def _resume_due(self, consumer: AIOKafkaConsumer) -> None:
        now = time.monotonic()
        for task in self.tasks.values():
            if task.paused_until and now >= task.paused_until:
                task.paused_until = 0.0
                consumer.resume(task.tp)

    # -- observability ---------------------------------------------------------------

    @property
    def owned_partitions(self) -> list[int]:
        return sorted(tp.partition for tp in self.tasks)


def update_gauges(
    metrics: ConsumerMetrics, consumer: AIOKafkaConsumer, tasks: Iterable[StreamTask]
) -> None:
    tasks = list(tasks)
    metrics.set_buffered(sum(t.processor.buffered_events for t in tasks))
    metrics.set_active_runs(sum(t.processor.active_runs for t in tasks))
    for task in tasks:
        end = end_offset(consumer, task.tp)
        if end is not None:
            metrics.set_lag(task.tp.topic, task.tp.partition, end - task.next_offset)


def end_offset(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The LSO (read_committed) from the last fetch, else the high watermark."""
    try:
        lso = consumer.last_stable_offset(tp)
        if lso is not None and lso >= 0:
            return int(lso)
        highwater = consumer.highwater(tp)
        return None if highwater is None else int(highwater)
    except (AssertionError, KafkaError):  # no longer assigned
        return None
