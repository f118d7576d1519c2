"""The state of partitions this process does not own at the moment, kept and tailed.

aiokafka's eager protocol revokes every partition at every rebalance, and the group may
give a partition back a moment later (an instance joined: each keeps half of what it had)
or much later (an instance that took some of ours leaves). Dropping a revoked partition's
stores meant restoring its whole changelog again: 4.7-4.9 s with a million open runs on 12
partitions, and state lost when many restored at once (issue 32, issue 36).

So a partition revoked after a clean last commit is **kept**: its processor and its
:class:`~symfonic_stream.state.store.StorePartition`, whose backend holds everything before
a changelog offset (``applied``). While it is kept, a group-less read_committed consumer
**tails** its changelog: whatever its new owner writes is applied to the kept partition
(``apply``, then ``applied``: the same calls as a restore's), as a Kafka Streams standby
replica does, so when the partition comes back the set-up reads only what was written
since the last tail (:func:`~symfonic_stream.state.restore.restore_stores` with
``starts``). A partition kept longer than ``SYMFONIC_STATE_KEEP_S`` is dropped; so is one
whose tail fails.

Why the applied offset is the offset of our own last changelog write (or of a read), never
the changelog's end when we let go: a process that only thinks it owns a partition (a
zombie) may find another owner's records already there. Reading from our own last write
re-applies a few of our records at worst, which leaves the stores as they were: each
changelog record sets its key to the value it carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from symfonic_stream.config import Settings
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.clients import groupless_consumer_kwargs
from symfonic_stream.state.store import StorePartition

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long one tail poll waits when nothing new is there.
TAIL_POLL_MS = 200
TAIL_MAX_RECORDS = 10_000


@dataclass(slots=True)
class Kept(Generic[T]):
    """One partition's state, kept: what holds it, and where its changelog was read to."""

    holder: T
    partition: StorePartition
    #: Every changelog record before this offset is in ``partition``.
    applied: int
    #: When it was revoked (monotonic).
    since: float
    #: Changelog records applied while kept.
    tailed: int = 0
    #: The changelog's end as last seen (its last stable offset); None: not seen yet.
    end: int | None = None

    @property
    def lag(self) -> int | None:
        """Changelog records it is behind, as far as the tail has seen (None: unknown)."""
        return None if self.end is None else max(0, self.end - self.applied)


class KeptState(Generic[T]):
    """The kept partitions of one consumer's changelog, tailed in the background."""

    def __init__(self, settings: Settings, changelog_topic: str, keep_s: float) -> None:
        self._settings = settings
        self._topic = changelog_topic
        self._keep_s = keep_s
        self._kept: dict[int, Kept[T]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: frozenset[int] = frozenset()

    @property
    def partitions(self) -> list[int]:
        return sorted(self._kept)

    def keep(self, partition: int, holder: T, stores: StorePartition, applied: int) -> None:
        """A revoked partition's state, which holds everything before ``applied``."""
        if self._keep_s > 0:
            self._kept[partition] = Kept(holder, stores, applied, time.monotonic(), end=applied)
        else:
            stores.backend.close()

    def warm_up(self, partition: int, holder: T, stores: StorePartition,
                applied: int = 0) -> None:
        """State of a partition the group will give this process once it is warm
        (:mod:`symfonic_stream.engine.assignor`): the tail reads its changelog from
        ``applied`` (0, or a persistent store's checkpoint)."""
        if self._keep_s > 0 and partition not in self._kept:
            self._kept[partition] = Kept(holder, stores, applied, time.monotonic())
        else:
            stores.backend.close()

    def lags(self) -> dict[int, int]:
        """Each kept partition's lag (changelog records it is behind), where known."""
        return {partition: lag for partition, kept in self._kept.items()
                if (lag := kept.lag) is not None}

    def applied(self, partition: int) -> int | None:
        """Where a kept partition's changelog was read to (None: not kept)."""
        kept = self._kept.get(partition)
        return None if kept is None else kept.applied

    def take(self, partition: int) -> Kept[T] | None:
        """A kept partition, no longer kept (no record is applied to it after this)."""
        return self._kept.pop(partition, None)

    def drop_all(self) -> None:
        for kept in self._kept.values():
            kept.partition.backend.close()
        self._kept.clear()

    def evict(self) -> None:
        """Drop what was kept longer than ``SYMFONIC_STATE_KEEP_S``."""
        now = time.monotonic()
        for partition, kept in list(self._kept.items()):
            if now - kept.since > self._keep_s:
                log.info("kept state dropped: kept for longer than SYMFONIC_STATE_KEEP_S",
                         extra={"partition": partition, "kept_s": round(now - kept.since)})
                self._kept.pop(partition).partition.backend.close()

    async def tail(self) -> int:
        """One poll of every kept partition's changelog, applied; records applied."""
        self.evict()
        consumer = await self._follow()
        if consumer is None:
            await asyncio.sleep(TAIL_POLL_MS / 1000)
            return 0
        try:
            batch = await consumer.getmany(timeout_ms=TAIL_POLL_MS, max_records=TAIL_MAX_RECORDS)
        except KafkaError as exc:
            log.warning("tailing kept state failed; dropping it",
                        extra={"partitions": self.partitions, "error": repr(exc)})
            self.drop_all()
            return 0
        applied = 0
        for tp, records in batch.items():
            kept = self._kept.get(tp.partition)
            if kept is None:  # taken while the poll was out
                continue
            for record in records:
                if record.key is not None and kept.partition.apply(record.key, record.value):
                    kept.tailed += 1
                    applied += 1
            if records:
                fault_point("restoring")  # (a warm-up restores here, not at set-up)
            kept.applied = max(kept.applied, await consumer.position(tp))
            if records:
                kept.partition.applied(kept.applied)
        for partition in self._assigned & self._kept.keys():
            stable = consumer.last_stable_offset(TopicPartition(self._topic, partition))
            if stable is not None and stable >= 0:
                self._kept[partition].end = stable
        return applied

    async def _follow(self) -> AIOKafkaConsumer | None:
        """The tail consumer, assigned what is kept now (seeked to each applied offset)."""
        wanted = frozenset(self._kept)
        if not wanted:
            if self._consumer is not None and self._assigned:
                self._consumer.unsubscribe()
                self._assigned = frozenset()
            return None
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(
                **groupless_consumer_kwargs(self._settings, f"{self._topic}-tail"))
            await self._consumer.start()
        if wanted != self._assigned:
            tps = [TopicPartition(self._topic, p) for p in sorted(wanted)]
            self._consumer.assign(tps)
            for tp in tps:
                self._consumer.seek(tp, self._kept[tp.partition].applied)
            self._assigned = wanted
        return self._consumer

    async def run(self, stopping: asyncio.Event) -> None:
        """Tail until ``stopping`` is set (the engine's background task)."""
        try:
            while not stopping.is_set():
                await self.tail()
        finally:
            await self.close()

    async def close(self) -> None:
        self.drop_all()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(KafkaError):
                await consumer.stop()
