"""Checkpoint steps 1-3 for newly assigned partitions (see :mod:`symfonic_stream.engine.engine`).

0. (once, at start-up) the source and changelog topics exist and are co-partitioned;
1. fence: start one transactional producer per partition (InitProducerId);
2. restore: replay the changelog partitions into fresh processors;
3. committed offsets: where each partition resumes.

Step 4 (seek, install, resume) belongs to the engine, under its lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine.faults import fault_point
from symfonic_stream.engine.records import Processor
from symfonic_stream.engine.restore import restore_partitions
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transactions import PartitionProducer
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.retry import OnWait
from symfonic_stream.observability.metrics import ConsumerMetrics

#: How long start-up waits for missing topics to appear before giving up.
TOPIC_WAIT_S = 10.0


class EngineError(Exception):
    """The consumer cannot start (missing topics, broken co-partitioning)."""


class Superseded(Exception):
    """A rebalance (or stop) happened while setting partitions up; the work is discarded."""


@dataclass(slots=True)
class Prepared:
    """One partition after steps 1-3: fenced, restored, and where to resume."""

    producer: PartitionProducer
    processor: Processor
    offset: int


async def check_topics(
    settings: Settings,
    topology: Topology,
    *,
    timeout_s: float | None = None,
    on_wait: OnWait | None = None,
) -> None:
    """Every topic the consumer reads or writes must exist; a changelog must have as many
    partitions as the source topic. (A missing output topic would otherwise fail every
    transaction, after a metadata timeout each.) An unreachable Kafka is waited for within
    ``timeout_s`` (:class:`~symfonic_stream.kafka.retry.KafkaUnavailable` after it)."""
    wanted = [topology.source_topic, *topology.output_topics, topology.dead_letter_topic]
    if topology.changelog_topic is not None:
        wanted.append(topology.changelog_topic)
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
    if topology.changelog_topic is not None:
        source, changelog = counts[topology.source_topic], counts[topology.changelog_topic]
        if source != changelog:
            raise EngineError(
                f"{topology.changelog_topic} has {changelog} partitions but "
                f"{topology.source_topic} has {source}: a changelog must be co-partitioned "
                f"with its source topic"
            )


async def prepare_partitions(
    settings: Settings,
    topology: Topology,
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    *,
    metrics: ConsumerMetrics,
    cancelled: Callable[[], bool],
    on_progress: Callable[[], None],
) -> dict[TopicPartition, Prepared]:
    """Steps 1-3 for ``tps``. On any failure every producer started here is closed."""
    producers: dict[TopicPartition, PartitionProducer] = {}
    try:
        # Step 1: fence. Every partition's InitProducerId runs concurrently.
        started = await asyncio.gather(
            *(start_producer(settings, topology, tp) for tp in tps), return_exceptions=True
        )
        for tp, result in zip(tps, started, strict=True):
            if isinstance(result, PartitionProducer):
                producers[tp] = result
        for result in started:
            if isinstance(result, BaseException):
                raise result
        _check(cancelled)
        # Step 2: restore.
        processors = {tp.partition: topology.processor_factory(tp.partition) for tp in tps}
        if topology.changelog_topic is not None:
            begun = time.monotonic()
            counts = await restore_partitions(
                settings, topology.changelog_topic, processors,
                cancelled=cancelled, on_progress=on_progress,
            )
            seconds = time.monotonic() - begun
            for records in counts.values():
                metrics.state_restored(seconds, records)
        _check(cancelled)
        # Step 3: committed offsets, final now that step 1 resolved every open transaction
        # that could still move them (only p's transactional id ever commits p's offset).
        offsets = await committed_offsets(consumer, tps)
        _check(cancelled)
    except BaseException:
        await asyncio.gather(*(producer.close() for producer in producers.values()))
        raise
    return {
        tp: Prepared(producers[tp], processors[tp.partition], offsets[tp]) for tp in tps
    }


async def restore_processor(
    settings: Settings, topology: Topology, partition: int, on_progress: Callable[[], None]
) -> Processor:
    """A fresh processor for ``partition`` with its state replayed (after an abort)."""
    processor = topology.processor_factory(partition)
    if topology.changelog_topic is not None:
        await restore_partitions(
            settings, topology.changelog_topic, {partition: processor}, on_progress=on_progress
        )
    return processor


async def committed_offsets(
    consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The group's committed offset of each partition, or its beginning when never committed."""
    tps = list(tps)
    committed = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
    offsets = {tp: off for tp, off in zip(tps, committed, strict=True) if off is not None}
    fresh = [tp for tp in tps if tp not in offsets]
    if fresh:
        # Never committed: start at the beginning (auto_offset_reset=earliest).
        offsets.update(await consumer.beginning_offsets(fresh))
    return offsets


async def start_producer(
    settings: Settings, topology: Topology, tp: TopicPartition
) -> PartitionProducer:
    """Step 1 for ``tp``: a started producer, every earlier transaction of its id finished."""
    producer = PartitionProducer(settings, topology, tp.partition)
    await producer.start()
    fault_point("init_producer")
    return producer


def _check(cancelled: Callable[[], bool]) -> None:
    if cancelled():
        raise Superseded
