"""Restoring tasks' state stores from their changelog (task set-up, step 2).

A separate, group-less, read_committed consumer is assigned the changelog partitions of
the tasks being set up, seeks to their beginning and hands every record to the store whose
prefix it carries (:func:`~symfonic_stream.engine.store.restore_record`), until its position
reaches the end offset captured first. Tasks without a group share one changelog
partition, each under a key prefix of its own. Under
read_committed aiokafka's ``end_offsets`` is the last stable offset (ListOffsets carries the
isolation level; aio-libs/aiokafka#1087 was about older versions that returned the high
watermark), and since the partition's producer has already run InitProducerId, no
transaction of ours is still open on it: the end offset is where our committed state ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.engine.faults import fault_point
from symfonic_stream.engine.store import StateStore, restore_record
from symfonic_stream.kafka.clients import restore_consumer_kwargs

log = logging.getLogger(__name__)

#: Fail a restore whose position has not moved for this long (broker gone, or a bug).
RESTORE_STALL_S = 120.0
#: A position that has not moved for this long, although fetches from it keep coming back
#: empty, has nothing visible left to read (see :func:`_nothing_left`).
SETTLE_S = 3.0
_POLL_MS = 200
_MAX_RECORDS = 10_000


class RestoreCancelled(Exception):
    """The partitions were revoked (or the engine stopped) while restoring."""


class RestoreStalled(Exception):
    """A changelog partition stopped advancing before reaching its end offset."""


#: What to restore: changelog partition → (key prefix, the stores under it) of each task.
Targets = Mapping[int, Sequence[tuple[bytes, Sequence[StateStore[Any]]]]]


def _restore_one(targets: Sequence[tuple[bytes, Sequence[StateStore[Any]]]], key: bytes,
                 value: bytes | None) -> bool:
    for prefix, stores in targets:
        if key.startswith(prefix):
            return restore_record(stores, key[len(prefix):], value)
    return False


async def restore_stores(
    settings: Settings,
    changelog_topic: str,
    targets: Targets,
    *,
    cancelled: Callable[[], bool] = lambda: False,
    on_progress: Callable[[], None] = lambda: None,
) -> dict[int, int]:
    """Restore every target's stores; returns records restored per changelog partition."""
    if not targets:
        return {}
    consumer = AIOKafkaConsumer(**restore_consumer_kwargs(settings, changelog_topic))
    await consumer.start()
    try:
        tps = [TopicPartition(changelog_topic, p) for p in targets]
        consumer.assign(tps)
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        run = _Restore(consumer, targets, begins, ends)
        while run.remaining:
            if cancelled():
                raise RestoreCancelled(changelog_topic)
            poll_started = time.time()
            batch = await consumer.getmany(
                *run.remaining, timeout_ms=_POLL_MS, max_records=_MAX_RECORDS
            )
            # Everything fetched before the poll started has been handed over to us.
            drained = sum(len(records) for records in batch.values()) < _MAX_RECORDS
            run.apply(batch)
            await run.advance(drained, poll_started)
            on_progress()
            if run.remaining and time.monotonic() - run.last_move > RESTORE_STALL_S:
                raise RestoreStalled(f"{changelog_topic}: no progress for "
                                     f"{RESTORE_STALL_S:.0f} s at {run.where()}")
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    return run.counts


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
        self._moved_at = dict.fromkeys(self.remaining, time.time())
        self.last_move = time.monotonic()

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

    async def advance(self, drained: bool, poll_started: float) -> None:
        for tp in list(self.remaining):
            position = await self._consumer.position(tp)
            if position != self._positions[tp]:
                self._positions[tp] = position
                self._moved_at[tp] = time.time()
                self.last_move = time.monotonic()
            if position >= self._ends[tp] or (
                drained and _nothing_left(self._consumer, tp, self._moved_at[tp], poll_started)
            ):
                self.remaining.discard(tp)

    def where(self) -> str:
        return ", ".join(f"{tp.partition}@{self._positions[tp]}/{self._ends[tp]}"
                         for tp in self.remaining)


def _nothing_left(
    consumer: AIOKafkaConsumer, tp: TopicPartition, moved_at: float, poll_started: float
) -> bool:
    """Whether the broker has said, after the position stopped, that nothing follows it.

    Normally the position reaches the end offset, stepping over the trailing commit marker
    (aio-libs/aiokafka#911 was a version where it stopped one short of it). A broker may
    also drop the last markers or records of a compacted partition (quix-streams#1017 saw
    Redpanda do it), leaving offsets that no fetch will ever return. A fetch response that
    arrived well after the position last moved, but before the last poll started (so the
    poll would have handed over anything it carried), and gave nothing, proves that: the
    restore then ends there instead of waiting forever.
    """
    if time.time() - moved_at < SETTLE_S:
        return False
    polled_ms = consumer.last_poll_timestamp(tp)
    if polled_ms is None or not moved_at + 1.0 < polled_ms / 1000 < poll_started:
        return False
    log.warning(
        "changelog partition ends before its end offset; treating it as restored",
        extra={"topic": tp.topic, "partition": tp.partition},
    )
    return True
