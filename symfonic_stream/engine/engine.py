"""The consume → process → transactional-produce loop every consumer runs.

Checkpoint sequence
===================

On assignment of input partition p (the rebalance callback only pauses p and queues it;
the work below runs in the consume loop, so heartbeats keep flowing during a long restore.
aio-libs/aiokafka#738: aiokafka lets the fetcher run *before* ``on_partitions_assigned``
completes, so records of p can come back before p is set up; they are dropped, and the
seek of step 3 makes the fetcher start over from the committed offset):

1. **Fence.** Create p's producer (``transactional_id = <group>-<source>-<p>``) and start
   it: InitProducerId bumps the epoch, which fences any zombie still holding p and
   commits or aborts whatever transaction it left open. From here on nobody else can
   write p's outputs, dead letters, changelog or offsets.
2. **Restore.** A group-less read_committed consumer replays changelog partition p from
   its beginning to its end offset (the LSO) into a fresh processor.
3. **Seek.** Fetch p's committed offset from the group coordinator (now final, because
   step 1 resolved any transaction that could still move it) and seek there, or to the
   beginning of p when the group never committed it.
4. **Consume.** Resume p.

Records of p: processed as soon as they are fetched, into what is pending for p (no
transaction open yet). p's committer then runs one transaction at a time through p's
producer: begin → outputs, dead letters, changelog writes →
``send_offsets_to_transaction({p: last offset + 1})`` → wait for every send → commit;
records fetched during a commit are processed meanwhile and go into the next one (see
:mod:`symfonic_stream.engine.partition`). A punctuation of p (a wall-clock timer, so gap
timeouts fire on an idle partition) writes into what is pending too; a transaction with
nothing but timer outputs carries no offsets.

On failure: an aborted transaction runs steps 1-3 again for p — a new producer (whose
InitProducerId waits for our last commit's markers), p's processor rebuilt from the
changelog, a seek back to its committed offset (the records are processed again, with a
back-off when it keeps failing; a record the processor raised on is dead-lettered on the
retry, see :mod:`symfonic_stream.engine.partition`). A fenced or fatal producer is never used
again: p is paused, its producer and processor dropped, and the consumer rejoins the group
so the group decides who owns p now (the new owner starts again at step 1).

On revocation (aiokafka's eager protocol revokes everything at every rebalance): commit
what the revoked partitions have pending (the engine lock keeps new records out), then stop
and drop their producers and processors. Nothing else is needed: the next owner's step 1
fences and cleans up whatever we could not. aio-libs/aiokafka#844 (a rebalance during a
transaction lets the old owner commit offsets it no longer owns) is closed twice over: the
revocation waits for the transactions, and a member that lost p without knowing it
(session timeout) is fenced by the new owner's step 1. A batch fetched across a rebalance
is discarded (the epoch check), never committed by the old owner.

On SIGTERM/SIGINT: stop fetching, commit what was processed, stop the producers and leave
the group, all within ``SYMFONIC_SHUTDOWN_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError

from symfonic_stream.config import Settings
from symfonic_stream.engine.checkpoint import (
    EngineError,
    Superseded,
    check_topics,
    committed_offsets,
    prepare_partitions,
    restore_processor,
    start_producer,
)
from symfonic_stream.engine.faults import fault_point
from symfonic_stream.engine.gauges import update_gauges
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.partition import Outcome, PartitionTask
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.clients import group_consumer_kwargs
from symfonic_stream.kafka.retry import Attempt, KafkaUnavailable, error_text, retrying
from symfonic_stream.observability.health import HealthState
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineError"]

#: How long one idle poll waits; bounds how late a stop or a punctuation is noticed.
IDLE_POLL_MS = 250
#: Records processed between two yields to the event loop (a few ms of projection).
ABSORB_SLICE = 100
#: Back-off after a failed partition set-up or a repeatedly failing transaction.
RETRY_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


class Engine:
    """Runs one :class:`Topology` until :meth:`stop` is called."""

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
        self.health = health
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: dict[TopicPartition, PartitionTask] = {}
        self._to_set_up: set[TopicPartition] = set()
        # Held while a batch, a punctuation or a revocation touches the tasks.
        self._lock = asyncio.Lock()
        # Bumped by every revocation and assignment: work started under an older epoch
        # (a fetched batch, a set-up) is stale and discarded.
        self._epoch = 0
        self._assigned = False
        # A partition was dropped (fenced producer); not ready until the group reassigns it.
        self._dropped = False
        self._rejoin = False
        self._setup_retry_at = 0.0
        self._stopping = asyncio.Event()
        self._punctuate_every = min(1.0, settings.gap_timeout_s / 4)
        self._on_demand = (
            OnDemandTopics(settings, topology.on_demand_topic)
            if topology.on_demand_topic is not None
            else None
        )
        self._next_punctuation = 0.0
        # Set by a partition's committer when it takes pending records into a transaction.
        self._taken = asyncio.Event()
        # Why it is not ready, for /readyz (the probe's answer while ``ready`` is False).
        self._reason = "starting"

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

    async def _main(self) -> None:
        # Start-up waits for Kafka (the usual order in Kubernetes: pods before brokers),
        # within SYMFONIC_STARTUP_TIMEOUT_S, saying why on /readyz and in one log line per
        # attempt; the topics must then exist (checked once more after a short wait).
        timeout = self.settings.startup_timeout_s
        try:
            await check_topics(self.settings, self.topology, timeout_s=timeout,
                               on_wait=self._waiting_for_kafka)
            consumer = await retrying("starting the group consumer", self._start_consumer,
                                      timeout_s=timeout, on_wait=self._waiting_for_kafka)
        except KafkaUnavailable as exc:
            raise EngineError(f"{exc} (SYMFONIC_STARTUP_TIMEOUT_S={timeout:g})") from None
        self._reason = "waiting for the group to assign partitions"
        log.info("consumer started", extra={"group": self.topology.group_id,
                                            "topic": self.topology.source_topic})
        try:
            await self._loop(consumer)
        finally:
            await self._shutdown(consumer)

    async def _start_consumer(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(**group_consumer_kwargs(self.settings, self.topology.group_id))
        consumer.subscribe([self.topology.source_topic], listener=_Listener(self))
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        return consumer

    def _waiting_for_kafka(self, attempt: Attempt) -> None:
        self._mark_progress()  # waiting is what it should be doing: alive, not ready
        self._reason = f"waiting for Kafka: {attempt.describe()}"
        self._set_ready(False)
        log.warning("waiting for Kafka", extra={
            "step": attempt.what, "attempt": attempt.number,
            "error": error_text(attempt.error),
            "retry_in_s": round(attempt.retry_in_s, 1), "waited_s": round(attempt.waited_s, 1),
        })

    async def _shutdown(self, consumer: AIOKafkaConsumer) -> None:
        self._set_ready(False)
        async with self._lock:
            tasks = list(self._tasks.values())
            self._tasks.clear()
            self._to_set_up.clear()
            await asyncio.gather(*(task.close() for task in tasks))
            for task in tasks:
                self.metrics.forget_partition(task.tp.topic, task.tp.partition)
        # Leaving the group now hands our partitions over at once, not after a session timeout.
        await consumer.stop()
        log.info("consumer stopped", extra={"group": self.topology.group_id})

    # -- the loop ----------------------------------------------------------------------

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        settings = self.settings
        while not self._stopping.is_set():
            if self._rejoin:
                self._rejoin = False
                self._force_rejoin(consumer)
            if self._to_set_up and time.monotonic() >= self._setup_retry_at:
                await self._set_up_assigned(consumer)
            self._resume_due(consumer)
            # Before fetching, so that a rebuilt partition's seek also discards what was
            # fetched past its committed offset.
            await self._settle_failures(consumer)
            room = settings.batch_max_records - sum(
                task.pending_records for task in self._tasks.values()
            )
            if room <= 0:
                # Back-pressure: a transaction's worth is waiting; fetch more once a
                # committer took it (and none lingers for records that cannot come).
                for task in self._tasks.values():
                    task.hurry()
                self._taken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._taken.wait(), IDLE_POLL_MS / 1000)
                self._maybe_punctuate(consumer)
                continue
            epoch = self._epoch
            try:
                batch = await consumer.getmany(timeout_ms=IDLE_POLL_MS, max_records=room)
            except ConsumerStoppedError:
                break
            except KafkaError as exc:
                # Coordination and fetch errors surface here; the consumer recovers from
                # most of them by itself. Never crash: log, back off, poll again.
                log.warning("poll failed", extra={"error": repr(exc)})
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self._mark_progress()
            if batch:
                fault_point("fetched")
                async with self._lock:
                    # A rebalance while fetching may have moved these partitions elsewhere.
                    if epoch == self._epoch:
                        await self._absorb(batch)
                        self._update_gauges(consumer)
            self._maybe_punctuate(consumer)
            self._set_ready(self.ready)

    async def _absorb(self, batch: dict[TopicPartition, list[Any]]) -> None:
        """Process fetched records in slices, yielding between them: the transactions in
        flight advance one round trip per yield, instead of waiting out the whole batch."""
        for tp, records in batch.items():
            task = self._tasks.get(tp)
            if task is None:
                continue
            for start in range(0, len(records), ABSORB_SLICE):
                task.absorb(records[start:start + ABSORB_SLICE])
                await asyncio.sleep(0)

    async def _settle_failures(self, consumer: AIOKafkaConsumer) -> None:
        """Act on partitions whose transaction or processor failed."""
        async with self._lock:
            epoch = self._epoch
            for task in list(self._tasks.values()):
                outcome = task.finished()
                if outcome is not None:
                    await self._settle(consumer, task, outcome, epoch)

    def _maybe_punctuate(self, consumer: AIOKafkaConsumer) -> None:
        if time.monotonic() < self._next_punctuation:
            return
        self._next_punctuation = time.monotonic() + self._punctuate_every
        now = time.time()
        for task in self._tasks.values():
            task.punctuate(now)
        self._update_gauges(consumer)

    async def _settle(
        self, consumer: AIOKafkaConsumer, task: PartitionTask, outcome: Outcome, epoch: int
    ) -> None:
        """Act on a partition's failure (the engine lock is held)."""
        if epoch != self._epoch:
            # A pending revocation drops the partition anyway (eager protocol: every
            # partition is revoked), so a failure seen under an older epoch needs nothing.
            return
        if outcome is Outcome.ABORTED:
            try:
                await self._rebuild(consumer, task)
                return
            except Exception:
                log.exception("rebuilding the partition failed; giving it back to the group",
                              extra={"partition": task.partition})
        await self._drop(consumer, task)

    async def _rebuild(self, consumer: AIOKafkaConsumer, task: PartitionTask) -> None:
        """After a failure: checkpoint steps 1-3 again for the partition.

        A new producer first: its InitProducerId waits until the markers of our last
        committed transaction are written (the broker answers EndTxn before writing them,
        KAFKA-5477), so the changelog's stable end and the committed offset read next both
        include that transaction, or both do not.
        """
        await task.producer.close()
        task.producer = await start_producer(self.settings, self.topology, task.tp)
        processor = await restore_processor(
            self.settings, self.topology, task.partition, self._mark_progress
        )
        offsets = await committed_offsets(consumer, [task.tp])
        task.reset(processor, offsets[task.tp])
        consumer.seek(task.tp, task.next_offset)
        if task.failures > 1:
            # The same batch keeps failing: back off instead of spinning on the broker.
            delay = min(MAX_BACKOFF_S, RETRY_BACKOFF_S * 2 ** (task.failures - 2))
            task.paused_until = time.monotonic() + delay
            consumer.pause(task.tp)
            log.warning("partition paused after repeated failures",
                        extra={"partition": task.partition, "failures": task.failures,
                               "seconds": delay})

    async def _drop(self, consumer: AIOKafkaConsumer, task: PartitionTask) -> None:
        """Fenced or fatal: stop using the partition and let the group reassign it."""
        self._tasks.pop(task.tp, None)
        with contextlib.suppress(Exception):
            consumer.pause(task.tp)
        await task.close()
        self.metrics.forget_partition(task.tp.topic, task.tp.partition)
        self._dropped = True
        self._set_ready(False)
        self._rejoin = True

    def _force_rejoin(self, consumer: AIOKafkaConsumer) -> None:
        """Make the group run a rebalance, so the partitions we dropped get an owner.

        aiokafka has no public call for this; ``request_rejoin`` is what it uses itself
        when metadata changes. A rebalance revokes everything here and the assignment
        sets every partition up again from step 1, with fresh producers.
        """
        coordinator = getattr(consumer, "_coordinator", None)
        request = getattr(coordinator, "request_rejoin", None)
        if request is None:
            raise EngineError("this aiokafka version cannot force a group rejoin")
        log.info("rejoining the group to reassign dropped partitions")
        request()

    def _resume_due(self, consumer: AIOKafkaConsumer) -> None:
        now = time.monotonic()
        for task in self._tasks.values():
            if task.paused_until and now >= task.paused_until:
                task.paused_until = 0.0
                consumer.resume(task.tp)

    # -- assignment --------------------------------------------------------------------

    async def _set_up_assigned(self, consumer: AIOKafkaConsumer) -> None:
        """Checkpoint steps 1-4 for every newly assigned partition (steps 1-3 unlocked)."""
        epoch = self._epoch
        tps = sorted(self._to_set_up)
        try:
            prepared = await prepare_partitions(
                self.settings, self.topology, consumer, tps, metrics=self.metrics,
                cancelled=lambda: epoch != self._epoch or self._stopping.is_set(),
                on_progress=self._mark_progress,
            )
        except Superseded:
            return
        except Exception:
            log.exception("setting partitions up failed; retrying",
                          extra={"partitions": [tp.partition for tp in tps]})
            self._setup_retry_at = time.monotonic() + RETRY_BACKOFF_S
            return
        async with self._lock:
            if epoch != self._epoch or self._stopping.is_set():
                await asyncio.gather(*(p.producer.close() for p in prepared.values()))
                return
            for tp, ready in prepared.items():
                consumer.seek(tp, ready.offset)
                self._tasks[tp] = PartitionTask(
                    self.topology, tp.partition, ready.producer, ready.processor, ready.offset,
                    metrics=self.metrics, max_record_bytes=self.settings.max_record_bytes,
                    max_records=self.settings.batch_max_records,
                    linger_s=self.settings.batch_max_latency_ms / 1000,
                    on_taken=self._taken, on_demand=self._on_demand,
                )
                self._to_set_up.discard(tp)
                self.metrics.partition_assigned(tp.topic, tp.partition)
            # Step 4: consume.
            consumer.resume(*tps)
        log.info("partitions ready", extra={"partitions": [tp.partition for tp in tps],
                                            "offsets": [prepared[tp].offset for tp in tps]})

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        fault_point("revoking")
        self._epoch += 1
        self._assigned = False
        self._dropped = False
        self._reason = "rebalancing: waiting for the group's new assignment"
        self._set_ready(False)
        self.metrics.rebalance()
        # The lock keeps new records out; closing commits what is pending (aio-libs/aiokafka#844:
        # never let a transaction straddle the hand-over).
        async with self._lock:
            self._to_set_up.clear()
            tasks = [self._tasks.pop(tp) for tp in list(self._tasks) if tp in revoked]
            await asyncio.gather(*(task.close() for task in tasks))
            for task in tasks:
                self.metrics.forget_partition(task.tp.topic, task.tp.partition)
        if revoked:
            log.info("partitions revoked",
                     extra={"partitions": sorted(p.partition for p in revoked)})

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._epoch += 1
        mine = {tp for tp in assigned if tp.topic == self.topology.source_topic}
        if mine and self._consumer is not None:
            # Nothing is fetched until the partition is set up (steps 1-3).
            self._consumer.pause(*mine)
        self._to_set_up = mine
        self._setup_retry_at = 0.0
        self._assigned = True
        log.info("partitions assigned", extra={"partitions": sorted(p.partition for p in mine)})

    # -- observability ---------------------------------------------------------------

    def _update_gauges(self, consumer: AIOKafkaConsumer) -> None:
        update_gauges(self.metrics, consumer, self._tasks.values())

    def _mark_progress(self) -> None:
        if self.health is not None:
            self.health.mark_progress()

    def _set_ready(self, ready: bool) -> None:
        if self.health is not None:
            reason = "" if ready else self._not_ready_reason()
            if ready != self.health.ready or reason != self.health.reason:
                self.health.set_ready(ready, reason)
        else:
            self.metrics.set_ready(ready)

    def _not_ready_reason(self) -> str:
        if self._stopping.is_set():
            return "shutting down"
        if self._dropped:
            return "a partition was given back to the group (fenced or broken producer); rejoining"
        if self._assigned and self._to_set_up:
            parts = sorted(tp.partition for tp in self._to_set_up)
            return f"setting up partitions {parts} (fencing, restoring state, seeking)"
        return self._reason

    @property
    def ready(self) -> bool:
        """Assigned, every assigned partition set up and consuming (an instance the group
        gave no partition is ready too: it is a healthy standby)."""
        return (
            self._assigned
            and not self._to_set_up
            and not self._dropped
            and not self._stopping.is_set()
        )

    @property
    def owned_partitions(self) -> list[int]:
        return sorted(tp.partition for tp in self._tasks)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks to the engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._engine._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._engine._on_assigned(set(assigned))
