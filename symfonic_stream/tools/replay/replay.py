"""Re-project a time or offset range of the raw topic into another topic, exactly once.

The output equals the offline projection of the same records (``symfonic-stream project``),
run by run: each raw partition gets its own :class:`ProjectorProcessor`, exactly as live,
with an empty ordering guard at the start of the range. So a range that starts in the middle
of a run opens that run with a ``gap`` record for the indexes before the range (they are not
in the input), and the end of the range stands in for the gap timeout of every hole still
open, as offline. The guard's clock never moves during a replay (as offline), so a gap is
only ever written at the end of the range or when a run's buffer overflows: the output is a
function of the input range alone.

The range: per raw partition, from the first record whose Kafka timestamp is at or after
``from`` to the first one at or after ``to`` (or, without ``to``, the last stable offset when
the replay is first planned). Kafka timestamps are when the record was produced, not the
kernel's ``timestamp`` field. Either bound may be offsets instead (``--from-offset``,
``--to-offset``; :mod:`symfonic_stream.tools.replay.ranges`), kept inside what each partition
holds.

Exactly once, also across crashes and reruns
============================================

Everything goes through ONE transactional producer, ``transactional_id =
<target>-replay-<replay id>``. The replay id is a hash of what defines the replay (source
topic, projection, the range's bounds, target), so rerunning the same command resumes the
same replay. Its progress lives in a compacted topic ``<target>.replay-progress`` (one
partition), under keys prefixed with the replay id:

* ``<id>/plan``: the offset range of every raw partition replayed, written once in its own
  transaction before any output, so a rerun replays exactly the same records even when
  no end was given and the raw topic has grown since.
* ``<id>/offset/<p>``: the next raw offset of partition p, and running totals.
* ``<id>/state/<p>/<run_id>``: the ordering guard's state of each run of partition p (what
  the live engine writes to its changelog), tombstoned when the partition is done.

Each batch is one transaction: the output records, the dead letters (when a dead-letter
topic is given) and the progress records of every partition the batch touched commit
together or not at all. A rerun first starts the producer, which fences any earlier process
of the same replay and aborts its open transaction, then reads the progress topic
(read_committed), restores the guards and continues after the last committed batch. Nothing
is written twice and nothing is skipped. A completed replay's rerun writes nothing; to
replay again, use a new target topic (or different times).

Readable when it returns
========================

``commit_transaction`` returns as soon as the transaction coordinator has logged the
commit; the commit markers that make the records readable are written to each partition
after that, asynchronously (milliseconds, far more on a loaded broker). Until a partition
has its marker, its last stable offset stays at the transaction's first record, so a
read_committed reader starting right then (the next step of a pipeline, a test comparing
the target with the offline projection) reads up to there and stops: a completed replay
would look like one with the last batch missing. So :func:`replay` returns only once the
last stable offset of every partition it wrote (target, dead letters, progress) is past
the last record it committed there. (A rerun needs no such wait: starting the producer
waits for any transaction of the same id to complete, markers included.)
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from symfonic_stream.app.topologies import guard_limits
from symfonic_stream.config import Settings
from symfonic_stream.engine.dead_letters import dead_letter_headers
from symfonic_stream.engine.faults import fault_point
from symfonic_stream.engine.records import Collector, InputRecord
from symfonic_stream.kafka.admin import ensure_topics, partition_counts
from symfonic_stream.kafka.clients import restore_consumer_kwargs, transactional_producer_kwargs
from symfonic_stream.kafka.specs import TopicSpec
from symfonic_stream.models.names import CONSUMERS, TopicNames
from symfonic_stream.processors.projector import PROJECTIONS, ProjectionName, ProjectorProcessor
from symfonic_stream.tools.replay.progress import (
    ProgressKeys,
    ReplayProgress,
    ReplaySummary,
    progress_topic,
    read_progress,
)
from symfonic_stream.tools.replay.ranges import Offsets, RangeError, ReplayRange, plan_ranges

__all__ = ["ReplayError", "ReplayProgress", "ReplaySummary", "progress_topic", "replay"]

#: The guard's clock during a replay (see the module docstring): holes never time out.
_FROZEN_NOW = 0.0
_POLL_MS = 500
#: How often the end offsets are asked while waiting for the commit markers.
_VISIBLE_POLL_S = 0.01


class ReplayError(Exception):
    """The replay cannot run (refused target, missing source topic, broken progress)."""


def refused_targets(names: TopicNames) -> tuple[set[str], set[str]]:
    """(never writable, writable only with --force) for a replay's target."""
    never = {names.agent_events, names.dead_letter}
    never.update(names.changelog(consumer) for consumer in CONSUMERS)
    return never, {names.stream_events, names.stream_chunks}


def replay_id(source: str, projection: str, replay_range: ReplayRange, target: str) -> str:
    identity = orjson.dumps([source, projection, *replay_range.identity(), target])
    return hashlib.sha256(identity).hexdigest()[:16]


async def replay(
    settings: Settings,
    *,
    projection: ProjectionName,
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
    run = _Replay(settings, projection, rid, source, to_topic, dead_letter_topic)
    return await run.execute(counts[source], replay_range, on_progress)


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


class _Replay:
    def __init__(
        self,
        settings: Settings,
        projection: ProjectionName,
        rid: str,
        source: str,
        to_topic: str,
        dead_letter_topic: str | None,
    ) -> None:
        self.settings = settings
        self.projection: ProjectionName = projection
        self.rid = rid
        self.source = source
        self.to_topic = to_topic
        self.dead_letter_topic = dead_letter_topic
        self.progress_topic = progress_topic(to_topic)
        self.keys = ProgressKeys(rid)
        self.producer = AIOKafkaProducer(
            **transactional_producer_kwargs(settings, f"{to_topic}-replay-{rid}")
        )
        self.processors: dict[int, ProjectorProcessor] = {}
        # Run ids whose guard state is in the progress topic, per partition (to tombstone).
        self.state_keys: dict[int, set[bytes]] = {}
        # The last offset this process committed in each partition it wrote to.
        self.committed: dict[TopicPartition, int] = {}

    async def execute(
        self,
        partitions: int,
        replay_range: ReplayRange,
        on_progress: Callable[[ReplaySummary], None],
    ) -> ReplaySummary:
        # Fence first: any earlier process of this replay is cut off and its open
        # transaction aborted before we read what it committed.
        await self.producer.start()
        consumer = AIOKafkaConsumer(**restore_consumer_kwargs(self.settings, f"replay-{self.rid}"))
        await consumer.start()
        try:
            saved = await read_progress(consumer, self.progress_topic, self.keys)
            summary = ReplaySummary(self.rid, self.source, self.to_topic, {})
            plan = saved.plan
            if plan is None:
                plan = await self._plan(consumer, partitions, replay_range)
                await self._commit([], {self.keys.plan: orjson.dumps(plan)})
            else:
                summary.resumed = True
            for p_text, (start, end) in plan["ranges"].items():
                p = int(p_text)
                value = saved.offsets.get(p)
                summary.partitions[p] = (
                    ReplayProgress.decode(value, start, end)
                    if value
                    else ReplayProgress(start, end, start)
                )
            if all(p.done for p in summary.partitions.values()):
                summary.already_complete = summary.resumed
            else:
                self._restore(summary, saved.states)
                await self._run(consumer, summary, on_progress)
            await self._until_readable(consumer)
            return summary
        finally:
            await consumer.stop()
            await self.producer.stop()

    async def _plan(
        self, consumer: AIOKafkaConsumer, partitions: int, replay_range: ReplayRange
    ) -> dict[str, Any]:
        tps = [TopicPartition(self.source, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
        firsts = await consumer.beginning_offsets(tps)
        ranges = plan_ranges(
            replay_range,
            partitions,
            firsts={tp.partition: offset for tp, offset in firsts.items()},
            ends={tp.partition: offset for tp, offset in ends.items()},
            from_times=await self._offsets_at(consumer, tps, replay_range.from_ms),
            to_times=await self._offsets_at(consumer, tps, replay_range.to_ms),
        )
        return {
            "source": self.source,
            **replay_range.as_json(),
            "ranges": {str(p): [start, end] for p, (start, end) in ranges.items()},
        }

    @staticmethod
    async def _offsets_at(
        consumer: AIOKafkaConsumer, tps: list[TopicPartition], ms: int | None
    ) -> dict[int, int | None]:
        """The first offset at or after ``ms`` per partition (None: no record that late)."""
        if ms is None:
            return {}
        found = await consumer.offsets_for_times(dict.fromkeys(tps, ms))
        return {
            tp.partition: (None if found.get(tp) is None else found[tp].offset) for tp in tps
        }

    def _new_processor(self) -> ProjectorProcessor:
        return ProjectorProcessor(
            PROJECTIONS[self.projection],
            self.to_topic,
            guard_limits(self.settings),
            max_record_bytes=self.settings.max_record_bytes,
        )

    def _restore(self, summary: ReplaySummary, states: dict[tuple[int, bytes], bytes]) -> None:
        for p, progress in summary.partitions.items():
            if not progress.done:
                self.processors[p] = self._new_processor()
                self.state_keys[p] = set()
        for (p, run_id), value in states.items():
            if p in self.processors:
                self.processors[p].restore(run_id, value)
                self.state_keys[p].add(run_id)

    async def _run(
        self,
        consumer: AIOKafkaConsumer,
        summary: ReplaySummary,
        on_progress: Callable[[ReplaySummary], None],
    ) -> None:
        active = {
            TopicPartition(self.source, p): progress
            for p, progress in summary.partitions.items()
            if not progress.done
        }
        consumer.assign(list(active))
        for tp, progress in active.items():
            consumer.seek(tp, progress.next_offset)
        on_progress(summary)
        while active:
            batch = await consumer.getmany(
                *active, timeout_ms=_POLL_MS, max_records=self.settings.batch_max_records
            )
            # One collector per partition, so counts and state are attributed correctly.
            outs: dict[TopicPartition, Collector] = {}
            for tp, records in batch.items():
                progress, processor = active[tp], self.processors[tp.partition]
                out = outs.setdefault(tp, Collector())
                for record in records:
                    if record.offset >= progress.end:
                        break
                    processor.process(_input(record), _FROZEN_NOW, out)
                    progress.records_in += 1
                    progress.next_offset = record.offset + 1
            for tp, progress in active.items():
                if await consumer.position(tp) >= progress.end:
                    # The end of the range is the gap timeout of every hole still open.
                    self.processors[tp.partition].flush(outs.setdefault(tp, Collector()))
                    progress.next_offset = progress.end
            if not outs:
                continue
            progress_records: dict[bytes, bytes | None] = {}
            for tp, out in outs.items():
                _count(active[tp], out)
                progress_records.update(self._progress_records(tp.partition, active[tp]))
            await self._commit(list(outs.values()), progress_records)
            for tp in list(outs):
                if active[tp].done:
                    del active[tp]
                    consumer.pause(tp)
            on_progress(summary)

    def _progress_records(self, p: int, progress: ReplayProgress) -> dict[bytes, bytes | None]:
        """The partition's guard state changes and offset, for the batch's transaction."""
        records: dict[bytes, bytes | None] = {}
        keys = self.state_keys[p]
        changed = Collector()
        self.processors[p].checkpoint(changed)
        if progress.done:
            # The guard is finished with this partition: its state would only be clutter.
            keys.update(changed.state)
            records.update({self.keys.state(p, run_id): None for run_id in keys})
            keys.clear()
        else:
            for run_id, value in changed.state.items():
                records[self.keys.state(p, run_id)] = value
                if value is None:
                    keys.discard(run_id)
                else:
                    keys.add(run_id)
        records[self.keys.offset(p)] = progress.encode()
        return records

    async def _commit(
        self, outs: list[Collector], progress_records: dict[bytes, bytes | None]
    ) -> None:
        """One transaction: outputs, dead letters and progress, all or nothing.

        A failure aborts and propagates: the process stops and a rerun resumes from the
        last committed batch (there is no in-process retry to get wrong).
        """
        producer = self.producer
        await producer.begin_transaction()
        try:
            futures = []
            for out in outs:
                for record in out.outputs:
                    futures.append(
                        await producer.send(record.topic, value=record.value, key=record.key)
                    )
                if self.dead_letter_topic is None:
                    continue
                for letter in out.dead_letters:
                    key, value = letter.record.key, letter.record.value
                    futures.append(
                        await producer.send(
                            self.dead_letter_topic,
                            # aiokafka refuses a record with neither key nor value.
                            value=b"" if key is None and value is None else value,
                            key=key,
                            headers=dead_letter_headers(letter, f"replay-{self.projection}"),
                        )
                    )
            for key, value in progress_records.items():
                futures.append(await producer.send(self.progress_topic, value=value, key=key))
            # aiokafka would commit a transaction with a failed send in it: check them all.
            sent = await asyncio.gather(*futures)
            fault_point("in_transaction")
        except BaseException:
            if not producer._txn_manager.is_fatal_error():
                await producer.abort_transaction()
            raise
        await producer.commit_transaction()
        fault_point("commit_logged")
        for metadata in sent:
            tp = TopicPartition(metadata.topic, metadata.partition)
            self.committed[tp] = max(self.committed.get(tp, -1), metadata.offset)

    async def _until_readable(self, consumer: AIOKafkaConsumer) -> None:
        """Wait for the commit markers of everything committed (see the module docstring).

        The consumer is read_committed, so its end offsets are the last stable offsets.
        Bounded by the transaction timeout: a transaction of another producer open before
        ours on a ``--force`` target holds the last stable offset back until then.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.transaction_timeout_ms / 1000
        pending = dict(self.committed)
        while pending:
            stable = await consumer.end_offsets(list(pending))
            pending = {tp: last for tp, last in pending.items() if stable[tp] <= last}
            if not pending:
                return
            if loop.time() >= deadline:
                raise KafkaTimeoutError(
                    "the replay committed, but its last records are still not readable "
                    f"(read_committed) in {sorted(map(str, pending))}"
                )
            await asyncio.sleep(_VISIBLE_POLL_S)


def _input(record: Any) -> InputRecord:
    return InputRecord(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        tuple((k, bytes(v)) for k, v in record.headers),
        record.timestamp,
    )


def _count(progress: ReplayProgress, out: Collector) -> None:
    for record in out.outputs:
        progress.by_type[record.record_type] = progress.by_type.get(record.record_type, 0) + 1
    progress.records_out += len(out.outputs)
    progress.dead_letters += len(out.dead_letters)
    for name, n in out.counts.items():
        progress.counts[name] = progress.counts.get(name, 0) + n
