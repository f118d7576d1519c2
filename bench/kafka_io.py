"""The benchmark's side of Kafka: topics per prefix, publishing, offsets, reading outputs.

Everything here uses the project's own client kwargs (:mod:`symfonic_stream.kafka.clients`),
so ``SYMFONIC_BOOTSTRAP_SERVERS`` and the security settings apply to the benchmark too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from bench.progress import say
from symfonic_stream.app.topics import required_topics
from symfonic_stream.config import Settings
from symfonic_stream.kafka.admin import ensure_topics, group_offsets
from symfonic_stream.kafka.clients import admin_kwargs, client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames


def prefix_settings(base: Settings, prefix: str, partitions: int) -> Settings:
    """``base`` on the topic prefix ``prefix``, its topics with ``partitions`` partitions."""
    return base.model_copy(update={"topic_prefix": prefix, "partitions": partitions})


async def create_topics(settings: Settings) -> list[str]:
    """Every topic of ``settings``' prefix (copier output included); returns their names."""
    specs = required_topics(settings, include_copier=True)
    report = await ensure_topics(settings, specs)
    if not report.ok:
        raise RuntimeError("; ".join(report.mismatches))
    await _wait_for_leaders(settings, [s.name for s in specs])
    return [s.name for s in specs]


async def _wait_for_leaders(settings: Settings, topics: list[str], within: float = 30.0) -> None:
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    await admin.start()
    try:
        deadline = time.monotonic() + within
        while True:
            described = await admin.describe_topics(topics)
            if all(
                entry.get("error_code", 0) == 0
                and entry["partitions"]
                and all(p["leader"] >= 0 for p in entry["partitions"])
                for entry in described
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"topics without leaders after {within}s: {topics}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def delete_prefix_topics(settings: Settings, prefixes: Iterable[str]) -> int:
    """Delete every topic whose name starts with one of ``prefixes`` (best effort)."""
    wanted = tuple(f"{p}." for p in prefixes) + tuple(f"{p}-" for p in prefixes)
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(wanted)]
        for start in range(0, len(names), 50):
            with contextlib.suppress(KafkaError):
                await admin.delete_topics(names[start : start + 50])
        return len(names)
    finally:
        await admin.close()


async def cleanup(base: Settings, prefixes: list[str]) -> int:
    """:func:`delete_prefix_topics`, reporting a failure instead of raising it."""
    try:
        return await delete_prefix_topics(base, prefixes)
    except Exception as exc:  # clean-up must not hide the result
        say(f"could not delete the benchmark topics: {exc!r}")
        return 0


def _producer(settings: Settings, name: str, **overrides: Any) -> AIOKafkaProducer:
    kwargs = plain_producer_kwargs(settings, name)
    kwargs.update(overrides)
    return AIOKafkaProducer(**kwargs)


class _BatchSender:
    """Appends records straight into per-partition batches (``create_batch``/``send_batch``).

    The benchmark's load must cost the shared CPUs as little as possible: a batch append
    is a fraction of ``send()``'s per-record cost (partitioner, accumulator, one future per
    record). Partitions are Kafka's default partitioner's (murmur2 of the key, as the
    kernel's publisher and the projectors assume), computed once per run id.
    """

    def __init__(self, producer: AIOKafkaProducer, topic: str, partitions: int) -> None:
        self._producer = producer
        self._topic = topic
        self._partitions = partitions
        self._partition_of: dict[bytes, int] = {}
        self._open: dict[int, Any] = {}
        #: (delivery future, partition, records, send time) per batch sent.
        self.sent: list[tuple[asyncio.Future[Any], int, int, float]] = []

    def partition(self, key: bytes) -> int:
        found = self._partition_of.get(key)
        if found is None:
            found = self._partition_of[key] = partition_for_key(key, self._partitions)
        return found

    async def append(self, key: bytes, value: bytes, at: float) -> None:
        partition = self.partition(key)
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            await self._send(partition, at)
            batch = self._open[partition] = self._producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                raise RuntimeError(f"a record of {len(value)} bytes does not fit a batch")

    async def flush(self, at: float) -> None:
        for partition in list(self._open):
            await self._send(partition, at)

    async def _send(self, partition: int, at: float) -> None:
        batch = self._open.pop(partition)
        count = batch.record_count()
        if count:
            batch.close()
            future = await self._producer.send_batch(batch, self._topic, partition=partition)
            self.sent.append((future, partition, count, at))

    async def delivered(self) -> None:
        await asyncio.gather(*(future for future, _, _, _ in self.sent))


async def publish(settings: Settings, records: Iterable[tuple[bytes, bytes]],
                  topic: str | None = None) -> float:
    """Publish ``(key, value)`` records to ``topic`` (default: the raw topic) as fast as
    possible; returns seconds.

    Keyed by run id, in Kafka's default partitioner's partition: every event of a run in
    one partition, in order.
    """
    topic = topic or TopicNames(settings.topic_prefix).agent_events
    producer = _producer(settings, "bench-load", linger_ms=5, max_batch_size=512 * 1024)
    await producer.start()
    started = time.monotonic()
    try:
        sender = _BatchSender(producer, topic, settings.partitions)
        for key, value in records:
            await sender.append(key, value, 0.0)
        await sender.flush(0.0)
        await sender.delivered()
    finally:
        await producer.stop()
    return time.monotonic() - started


async def publish_at_rate(
    settings: Settings,
    count: int,
    encode: Callable[[int, float], tuple[bytes, bytes]],
    rate: float,
    tick_s: float = 0.002,
) -> tuple[dict[tuple[int, int], float], float]:
    """Publish ``count`` records at ``rate`` per second, each encoded at its send time.

    Every ``tick_s`` the records that are due are encoded with kernel timestamp ``now``
    (``encode(i, now)`` returns record i's ``(key, value)``) and handed to the producer at
    once. Returns ``(partition, offset) -> send time`` and the achieved rate.
    """
    topic = TopicNames(settings.topic_prefix).agent_events
    producer = _producer(settings, "bench-paced", linger_ms=0, max_batch_size=512 * 1024)
    await producer.start()
    sender = _BatchSender(producer, topic, settings.partitions)
    started = time.monotonic()
    try:
        done = 0
        while done < count:
            due = min(count, int((time.monotonic() - started) * rate) + 1)
            if due <= done:
                await asyncio.sleep(max(tick_s / 2, done / rate - (time.monotonic() - started)))
                continue
            now = time.time()
            for i in range(done, due):
                key, value = encode(i, now)
                await sender.append(key, value, now)
            await sender.flush(now)
            done = due
            await asyncio.sleep(tick_s)
        elapsed = time.monotonic() - started
        await sender.delivered()
    finally:
        await producer.stop()
    sent_at: dict[tuple[int, int], float] = {}
    for future, partition, records, at in sender.sent:
        base = future.result().offset
        for n in range(records):
            sent_at[(partition, base + n)] = at
    return sent_at, count / elapsed if elapsed > 0 else 0.0


async def end_offsets(settings: Settings, topic: str, partitions: int) -> dict[int, int]:
    """The read_committed end of each partition of ``topic``."""
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings, "bench-ends"), isolation_level="read_committed"
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: int(offset) for tp, offset in ends.items()}


#: How often the measurements poll a group's committed offsets.
POLL_S = 0.05


class OffsetWatcher:
    """Polls the committed offsets of consumer groups on one topic (the group coordinator)."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self._topic = topic
        self._admin = AIOKafkaAdminClient(**admin_kwargs(settings))

    async def __aenter__(self) -> OffsetWatcher:
        await self._admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._admin.close()

    async def committed(self, group: str) -> int:
        """The sum of ``group``'s committed offsets on the topic (0 before any commit)."""
        offsets = await group_offsets(self._admin, group)
        return sum(
            offset for tp, offset in offsets.items() if tp.topic == self._topic and offset > 0
        )


#: The output reader's fetch wait: a read_committed fetch is answered as soon as a commit
#: makes records visible, this only bounds an idle fetch.
READER_FETCH_MAX_WAIT_MS = 50


class OutputReader:
    """Reads output topics read_committed in the background, timing each record's arrival.

    ``on_batch(records, read_at)`` receives each fetched batch (aiokafka ConsumerRecords)
    with the wall-clock time it came back.
    """

    def __init__(
        self,
        settings: Settings,
        topics: Sequence[str],
        partitions: int,
        on_batch: Callable[[list[Any], float], None],
    ) -> None:
        self._tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        self._on_batch = on_batch
        self._consumer = AIOKafkaConsumer(
            **client_kwargs(settings, "bench-reader"),
            group_id=None,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=READER_FETCH_MAX_WAIT_MS,
        )
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.count = 0

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.assign(self._tps)
        await self._consumer.seek_to_beginning(*self._tps)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            batch = await self._consumer.getmany(timeout_ms=100)
            read_at = time.time()
            for records in batch.values():
                self.count += len(records)
                self._on_batch(records, read_at)

    async def wait_caught_up(self, within: float = 60.0) -> None:
        """Until every partition's position reached its current read_committed end."""
        ends = await self._consumer.end_offsets(self._tps)
        deadline = time.monotonic() + within
        while True:
            positions = [await self._consumer.position(tp) for tp in self._tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, self._tps, strict=True)):
                return
            if self._task is not None and self._task.done():
                self._task.result()  # the reading task failed: raise its error
            if time.monotonic() > deadline:
                raise RuntimeError(f"output reader did not reach the end within {within}s")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._consumer.stop()
