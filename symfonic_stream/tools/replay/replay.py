"""Re-project a time or offset range of the raw topic into another topic, exactly once.

The output equals the offline projection of the same records (``symfonic-stream project``),
run by run: each raw partition is a task of the engine with its own
:class:`ProjectorProcessor` and an empty ordering guard at the start of the range. So a range
that starts in the middle of a run opens it with a ``gap`` record, and the end of the range
stands in for the gap timeout of every hole still open, as offline. The guard's clock never
moves during a replay: the output is a function of the input range alone.

The range: per raw partition, from the first record whose Kafka timestamp is at or after
``from`` to the first one at or after ``to`` (or, without ``to``, the last stable offset when
the replay is first planned); either bound may be offsets (:mod:`.ranges`).

It runs on the engine, as a topology without a group (a ``RangeSource``): the same
record conversion, the same commit protocol, one transactional producer per raw partition
(``transactional_id = <target>-replay-<id>-<source>-<p>``) and one state store per task
whose changelog is the replay's progress topic (:mod:`.plan`). The replay id is a hash of
what defines the replay (source, projection, bounds, target), so rerunning the same command
resumes it: each task's producer fences any earlier process of it, its store restores the
guard and the position it committed, and it goes on from there. Nothing is written twice
and nothing skipped; a completed replay's rerun writes nothing.

It returns once everything it committed is readable read_committed: ``commit_transaction``
returns before the broker writes the commit markers, so a reader starting right then would
stop short of the last batch. A fresh InitProducerId for each task's transactional id
returns only once the previous transaction's markers are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from symfonic_stream.config import Settings
from symfonic_stream.consumers import engines
from symfonic_stream.consumers.projectors import guard_limits
from symfonic_stream.engine.bounded import BoundedEngine
from symfonic_stream.engine.topology import RangeSource, Topology
from symfonic_stream.kafka.admin import ensure_topics, partition_counts
from symfonic_stream.kafka.clients import restore_consumer_kwargs
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.kafka.specs import TopicSpec
from symfonic_stream.models.names import TopicNames
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.processors.projector import ProjectorProcessor, projection_of
from symfonic_stream.tools.replay.plan import progress_topic, read_plan, task_prefix, write_plan
from symfonic_stream.tools.replay.ranges import Offsets, RangeError, ReplayRange, plan_ranges
from symfonic_stream.tools.replay.summary import ReplayProgress, ReplaySummary

__all__ = ["ReplayError", "ReplayProgress", "ReplaySummary", "progress_topic", "replay"]

#: How often the summary is reported while the replay runs.
_REPORT_EVERY_S = 0.5


class ReplayError(Exception):
    """The replay cannot run (refused target, missing source topic, broken progress)."""


def refused_targets(names: TopicNames) -> tuple[set[str], set[str]]:
    """(never writable, writable only with --force) for a replay's target."""
    never = {names.agent_events, names.dead_letter}
    never.update(names.changelog(engine.name) for engine in engines() if engine.stores)
    return never, {names.stream_events, names.stream_chunks}


def replay_id(source: str, projection: str, replay_range: ReplayRange, target: str) -> str:
    identity = orjson.dumps([source, projection, *replay_range.identity(), target])
    return hashlib.sha256(identity).hexdigest()[:16]


async def replay(
    settings: Settings,
    *,
    projection: str,
    from_ts: float | None = None,
    to_ts: float | None = None,
    from_offsets: Offsets | None = None,
    to_offsets: Offsets | None = None,
    to_topic: str,
    force: bool = False,
    dead_letter_topic: str | None = None,
    on_progress: Callable[[ReplaySummary], None] = lambda summary: None,
) -> ReplaySummary:
    """Run (or resume) one replay to completion; see the module docstring."""
    names = TopicNames(settings.topic_prefix)
    never, live = refused_targets(names)
    if to_topic in never:
        raise ReplayError(f"refusing to replay into {to_topic}: it is not an output topic")
    if to_topic in live and not force:
        raise ReplayError(
            f"refusing to replay into the live output topic {to_topic} (pass --force to do it)"
        )
    source = names.agent_events
    try:
        replay_range = ReplayRange(
            from_ms=None if from_ts is None else int(from_ts * 1000),
            from_offsets=from_offsets,
            to_ms=None if to_ts is None else int(to_ts * 1000),
            to_offsets=to_offsets,
        )
    except RangeError as exc:
        raise ReplayError(str(exc)) from None
    counts = await partition_counts(settings, [source])
    if source not in counts:
        raise ReplayError(f"the raw topic {source} does not exist")
    try:
        replay_range.check_partitions(counts[source])
    except RangeError as exc:
        raise ReplayError(f"{source}: {exc}") from None
    await _ensure_target_topics(settings, to_topic)
    rid = replay_id(source, projection, replay_range, to_topic)
    plan, resumed = await _plan(settings, rid, source, counts[source], replay_range, to_topic)
    ranges = {int(p): (int(a), int(b)) for p, (a, b) in plan["ranges"].items()}
    topology = replay_topology(settings, projection, rid, ranges, to_topic, dead_letter_topic)
    return await _run(settings, topology, rid, ranges, resumed, on_progress)


async def _ensure_target_topics(settings: Settings, to_topic: str) -> None:
    common = {"min.insync.replicas": str(settings.min_insync_replicas)}
    target = TopicSpec(
        to_topic, settings.partitions, settings.replication_factor,
        {**common, "cleanup.policy": "delete"}, "replay output",
    )
    # Any partition count will do for the target (records are placed by run id), so its
    # mismatches are not errors; the progress topic must be compacted.
    await ensure_topics(settings, [target])
    progress = TopicSpec(
        progress_topic(to_topic), 1, settings.replication_factor,
        {**common, "cleanup.policy": "compact"}, "replay progress",
    )
    report = await ensure_topics(settings, [progress])
    if not report.ok:
        raise ReplayError("; ".join(report.mismatches))


def replay_topology(
    settings: Settings,
    projection: str,
    rid: str,
    ranges: dict[int, tuple[int, int]],
    to_topic: str,
    dead_letter_topic: str | None,
) -> Topology:
    """The replay as a topology of the engine: no group, the planned ranges, a frozen clock."""
    names = TopicNames(settings.topic_prefix)
    limits = guard_limits(settings)
    project = projection_of(projection, ticket_tokens=settings.stream_ticket_tokens)

    def make(partition: int) -> ProjectorProcessor:
        return ProjectorProcessor(project, to_topic, limits, decode=settings.decode_limits())

    return Topology(
        consumer=f"replay-{projection}",
        group_id=f"{to_topic}-replay-{rid}",
        source_topic=names.agent_events,
        output_topics=(to_topic,),
        dead_letter_topic=dead_letter_topic,
        changelog_topic=progress_topic(to_topic),
        processor_factory=make,
        source=RangeSource(ranges, 0, lambda partition: task_prefix(rid, partition)),
        clock=lambda: 0.0,
    )


async def _plan(
    settings: Settings, rid: str, source: str, partitions: int, replay_range: ReplayRange,
    to_topic: str,
) -> tuple[dict[str, Any], bool]:
    """The plan an earlier run committed (resumed), or a new one, committed first."""
    topic = progress_topic(to_topic)
    saved = await read_plan(settings, topic, rid)
    if saved is not None:
        return saved, True
    consumer = AIOKafkaConsumer(**restore_consumer_kwargs(settings, f"replay-{rid}"))
    await consumer.start()
    try:
        tps = [TopicPartition(source, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
        firsts = await consumer.beginning_offsets(tps)
        ranges = plan_ranges(
            replay_range, partitions,
            firsts={tp.partition: offset for tp, offset in firsts.items()},
            ends={tp.partition: offset for tp, offset in ends.items()},
            from_times=await _offsets_at(consumer, tps, replay_range.from_ms),
            to_times=await _offsets_at(consumer, tps, replay_range.to_ms),
        )
    finally:
        await consumer.stop()
    plan = {"source": source, **replay_range.as_json(),
            "ranges": {str(p): [start, end] for p, (start, end) in ranges.items()}}
    await write_plan(settings, topic, rid, plan, f"{to_topic}-replay-{rid}-plan")
    return plan, False


async def _offsets_at(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], ms: int | None
) -> dict[int, int | None]:
    """The first offset at or after ``ms`` per partition (None: no record that late)."""
    if ms is None:
        return {}
    found = await consumer.offsets_for_times(dict.fromkeys(tps, ms))
    return {tp.partition: (None if found.get(tp) is None else found[tp].offset) for tp in tps}


async def _run(
    settings: Settings, topology: Topology, rid: str, ranges: dict[int, tuple[int, int]],
    resumed: bool, on_progress: Callable[[ReplaySummary], None],
) -> ReplaySummary:
    metrics = ConsumerMetrics(topology.consumer, registry=CollectorRegistry())
    engine = BoundedEngine(topology, settings, metrics)
    names = TopicNames(settings.topic_prefix)
    summary = ReplaySummary(rid, names.agent_events, topology.output_topics[0], {}, resumed)

    def report() -> None:
        progress = engine.progress()
        for p, (start, end) in ranges.items():
            summary.partitions[p] = ReplayProgress.of(start, end, progress.get(p))
        on_progress(summary)

    async def keep_reporting() -> None:
        while True:
            report()
            await asyncio.sleep(_REPORT_EVERY_S)

    reporter = asyncio.create_task(keep_reporting())
    committed_before = metrics.transactions_committed
    try:
        await engine.run()
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
    report()
    summary.already_complete = resumed and metrics.transactions_committed == committed_before
    await _until_readable(settings, topology, ranges)
    return summary


async def _until_readable(
    settings: Settings, topology: Topology, ranges: dict[int, tuple[int, int]]
) -> None:
    """A fresh InitProducerId per task returns once its last transaction's markers are
    written: then everything it committed is readable read_committed."""
    async def settle(partition: int) -> None:
        producer = ProcessProducer(settings, topology.transactional_id(partition))
        await producer.start()
        await producer.close()

    await asyncio.gather(*(settle(p) for p in ranges))
