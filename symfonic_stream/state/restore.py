"""Restoring tasks' state stores from their changelog (set-up step 3, restore).

A separate, group-less, read_committed consumer is assigned the changelog partitions of
the tasks being set up, seeks to where their state ends (its beginning, or the offset its
backend already holds everything before) and hands every record to the task's
:class:`~symfonic_stream.state.store.StorePartition` (``apply``: the store whose prefix it
carries takes it), then tells each partition the offset it reached (``applied``). Tasks
without a group share one changelog partition, each under a key prefix of its own. Under
read_committed aiokafka's ``end_offsets`` is the last stable offset (ListOffsets carries the
isolation level; aio-libs/aiokafka#1087 was about older versions that returned the high
watermark), and since the partition's producer has already run InitProducerId, no
transaction of ours is still open on it: the end offset is where our committed state ends.

A partition is restored when its position has reached that end offset: proven by what was
read, never inferred from silence. The position steps over commit and abort markers and
aborted batches (aiokafka's fetcher moves it past them even when a poll returns no record;
aio-libs/aiokafka#911 was a version that stopped one short of a marker).

Silence proves nothing (issue 32): a fetch response carries at most ``fetch_max_bytes``,
filled from whichever partitions come first (aiokafka shuffles them per request), and the
others come back empty although they have records. A restore of 12 partitions of a million
runs saw partitions go seconds without data, took them as finished, and lost the state of
a sixth of the runs. So a partition whose position has not moved for :data:`SETTLE_S` is
*probed*: a second consumer, assigned that partition alone, fetches at its position. A
fetch of one partition returns its first batch whatever the size limits (KIP-74), so

* records, or a position that moved: the partition was only starved; the restore goes on;
* a response with nothing, the position where it was: no visible record lies between the
  position and the end. Apache Kafka never leaves such a hole (compaction keeps every
  batch's last offset), but a broker may drop the last markers or records of a compacted
  partition (quix-streams#1017 saw Redpanda do it), and no fetch would ever reach the end:
  the partition ends there, with a warning naming the offsets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.clients import restore_consumer_kwargs
from symfonic_stream.state.store import StorePartition

log = logging.getLogger(__name__)

#: Fail a restore whose position has not moved for this long (broker gone, or a bug).
RESTORE_STALL_S = 120.0
#: A partition whose position has not moved for this long is probed (module docstring);
#: and probed again no sooner than this after its last probe.
SETTLE_S = 3.0
#: How long one probe waits for its fetch response before it says nothing either way.
PROBE_WAIT_S = 10.0
_POLL_MS = 200
_MAX_RECORDS = 10_000


class RestoreCancelled(Exception):
    """The partitions were revoked (or the engine stopped) while restoring."""


class RestoreStalled(Exception):
    """A changelog partition stopped advancing before reaching its end offset."""


#: What to restore: changelog partition → (key prefix, the task's stores) of each task.
Targets = Mapping[int, Sequence[tuple[bytes, StorePartition]]]


def _restore_one(targets: Sequence[tuple[bytes, StorePartition]], key: bytes,
                 value: bytes | None) -> bool:
    for prefix, partition in targets:
        if key.startswith(prefix):
            return partition.apply(key[len(prefix):], value)
    return False


@dataclass(slots=True)
class Restored:
    """What one restore did, per changelog partition."""

    #: Records handed to a store.
    records: dict[int, int]
    #: The offset each partition was read to: its stores now hold everything before it.
    applied: dict[int, int]
    #: Partitions whose start offset lies before the log's start (records deleted since
    #: the stores last read it): they must be restored from the beginning into fresh ones.
    behind: set[int] = field(default_factory=set)


async def restore_stores(
    settings: Settings,
    changelog_topic: str,
    targets: Targets,
    *,
    starts: Mapping[int, int] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    on_progress: Callable[[], None] = lambda: None,
) -> Restored:
    """Restore every target's stores, from its partition's beginning or, for a partition
    in ``starts``, from that offset (stores that hold everything before it: the tail);
    each target is then told the offset it reached (``StorePartition.applied``)."""
    if not targets:
        return Restored({}, {})
    consumer = AIOKafkaConsumer(**restore_consumer_kwargs(settings, changelog_topic))
    prober = _Prober(settings, changelog_topic)
    await consumer.start()
    try:
        tps = [TopicPartition(changelog_topic, p) for p in targets]
        consumer.assign(tps)
        firsts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        begins, behind = _begins(firsts, starts or {})
        run = _Restore(consumer, targets, begins, ends)
        while run.remaining:
            if cancelled():
                raise RestoreCancelled(changelog_topic)
            batch = await consumer.getmany(
                *run.remaining, timeout_ms=_POLL_MS, max_records=_MAX_RECORDS
            )
            run.apply(batch)
            await run.advance()
            on_progress()
            suspect = run.suspect()
            if suspect is not None:
                run.probed(suspect, await prober.anything_at(suspect, run.position(suspect)))
            if run.remaining and time.monotonic() - run.last_move > RESTORE_STALL_S:
                raise RestoreStalled(f"{changelog_topic}: no progress for "
                                     f"{RESTORE_STALL_S:.0f} s at {run.where()}")
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    applied = {tp.partition: max(begins[tp], ends[tp]) for tp in tps}
    for partition, offset in applied.items():
        if partition not in behind:
            for _, target in targets[partition]:
                target.applied(offset)
    return Restored(run.counts, applied, behind)


def _begins(firsts: Mapping[TopicPartition, int], starts: Mapping[int, int]
            ) -> tuple[dict[TopicPartition, int], set[int]]:
    """Where each partition's restore begins; the partitions whose start is gone."""
    begins, behind = {}, set()
    for tp, first in firsts.items():
        start = starts.get(tp.partition, first)
        if start < first:
            behind.add(tp.partition)
        begins[tp] = max(start, first)
    return begins, behind


class _Restore:
    """Where one restore stands: what is left to read, and what was restored."""

    def __init__(self, consumer: AIOKafkaConsumer, targets: Targets,
                 begins: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> None:
        self._consumer = consumer
        self._targets = targets
        self._ends = ends
        self.counts = dict.fromkeys(targets, 0)
        self.remaining = {tp for tp in ends if ends[tp] > begins[tp]}
        for tp in self.remaining:
            consumer.seek(tp, begins[tp])
        self._positions = {tp: begins[tp] for tp in self.remaining}
        now = time.monotonic()
        #: When each partition's position last moved, or it was last probed.
        self._quiet_since = dict.fromkeys(self.remaining, now)
        self.last_move = now

    def apply(self, batch: dict[TopicPartition, Any]) -> None:
        for tp, records in batch.items():
            into, end = self._targets[tp.partition], self._ends[tp]
            for record in records:
                # Only what was committed when we started; a tombstone restores as None.
                if (record.offset < end and record.key is not None
                        and _restore_one(into, record.key, record.value)):
                    self.counts[tp.partition] += 1
            if records:
                fault_point("restoring")

    async def advance(self) -> None:
        """Take each partition's position; one that reached its end offset is restored."""
        for tp in list(self.remaining):
            position = await self._consumer.position(tp)
            if position != self._positions[tp]:
                self._positions[tp] = position
                self._quiet_since[tp] = self.last_move = time.monotonic()
            if position >= self._ends[tp]:
                self.remaining.discard(tp)

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def suspect(self) -> TopicPartition | None:
        """The partition quiet the longest, once that is :data:`SETTLE_S` or more."""
        if not self.remaining:
            return None
        tp = min(self.remaining, key=self._quiet_since.__getitem__)
        return tp if time.monotonic() - self._quiet_since[tp] >= SETTLE_S else None

    def probed(self, tp: TopicPartition, anything: bool | None) -> None:
        """A probe's answer: a hole (False) ends the partition where it stands."""
        self._quiet_since[tp] = time.monotonic()
        if anything is False:
            log.warning("changelog partition has no record between its position and its "
                        "end offset (a hole the broker left); restored up to the position",
                        extra={"topic": tp.topic, "partition": tp.partition,
                               "position": self._positions[tp], "end_offset": self._ends[tp]})
            self.remaining.discard(tp)

    def where(self) -> str:
        return ", ".join(f"{tp.partition}@{self._positions[tp]}/{self._ends[tp]}"
                         for tp in self.remaining)


class _Prober:
    """Fetches one partition alone, with a consumer of its own (module docstring)."""

    def __init__(self, settings: Settings, changelog_topic: str) -> None:
        self._kwargs = restore_consumer_kwargs(settings, f"{changelog_topic}-probe")

    async def anything_at(self, tp: TopicPartition, position: int) -> bool | None:
        """Whether a fetch of ``tp`` alone at ``position`` finds anything (a record, or a
        marker or aborted batch that moves the position); None when no response came.

        A consumer per probe: one that fetched before would still have a request in
        flight (a long poll of up to ``fetch_max_wait_ms``) or records buffered, and the
        fetch that answers must be one of ``tp`` alone, made at ``position``."""
        consumer = AIOKafkaConsumer(**self._kwargs)
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, position)
            deadline = time.monotonic() + PROBE_WAIT_S
            while time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=_POLL_MS, max_records=1)
                if batch.get(tp) or await consumer.position(tp) != position:
                    return True
                # Set by the first response for tp, records or none (aiokafka's fetcher).
                if consumer.last_poll_timestamp(tp) is not None:
                    return False
            return None
        finally:
            await consumer.stop()
