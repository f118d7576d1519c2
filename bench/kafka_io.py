"""The benchmarks' side of Kafka: a run's topics, publishing, offsets, reading outputs.

Everything here uses the project's own client kwargs (:mod:`symfonic_stream.kafka.clients`),
so ``SYMFONIC_BOOTSTRAP_SERVERS`` and the security settings apply to the benchmarks too.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from bench.harness import say
from symfonic_stream.app.topics import required_topics
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.kafka.admin import Admin, ensure_topics, group_offsets
from symfonic_stream.kafka.clients import admin_kwargs, client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames

#: How often a wait polls what it waits for (a group's committed offsets, a readiness).
POLL_S = 0.05


async def until(check: Callable[[], Awaitable[bool]], within: float,
                every: float = POLL_S) -> bool:
    """Poll ``check`` until it holds (True) or ``within`` seconds passed (False)."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every)
    return True


class Session:
    """One benchmark run on the broker of ``SYMFONIC_BOOTSTRAP_SERVERS``: the topic prefixes
    it makes (``<run id>-<suffix>``), deleted at its end unless kept, and the folder of its
    consumers' logs, removed unless the caller named it."""

    def __init__(self, tag: str, *, keep_topics: bool = False,
                 log_dir: Path | None = None) -> None:
        self.base = load_settings()
        self.run_id = f"{tag}-{uuid.uuid4().hex[:8]}"
        self.prefixes: list[str] = []
        self._keep = keep_topics
        self._own_logs = log_dir is None
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"symfonic-{tag}-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.prefixes and not self._keep:
            say(f"deleted {await cleanup(self.base, self.prefixes)} benchmark topics")
        if self._own_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    async def topics(self, suffix: str, partitions: int, **settings: Any) -> Settings:
        """A fresh prefix with every topic of a deployment (and the copier's output), each
        of ``partitions`` partitions and led (``ensure_topics`` waits for the leaders); its
        settings, with ``settings`` on top."""
        prefix = f"{self.run_id}-{suffix}"
        self.prefixes.append(prefix)
        chosen = self.base.model_copy(
            update={"topic_prefix": prefix, "partitions": partitions, **settings})
        report = await ensure_topics(chosen, required_topics(chosen, include_copier=True))
        if not report.ok:
            raise RuntimeError("; ".join(report.mismatches))
        return chosen

    async def published(self, suffix: str, records: list[tuple[bytes, bytes]],
                        partitions: int) -> tuple[Settings, float]:
        """:meth:`topics`, its raw topic holding ``records``; and the seconds publishing took."""
        settings = await self.topics(suffix, partitions)
        took = await publish(settings, records)
        topic = TopicNames(settings.topic_prefix).agent_events
        total = sum((await end_offsets(settings, topic, partitions)).values())
        if total != len(records):
            raise RuntimeError(f"published {len(records)} events, the topic holds {total}")
        say(f"  {partitions}p  published {total:,} events in {took:.1f}s ({settings.topic_prefix})")
        return settings, took


async def cleanup(settings: Settings, prefixes: Iterable[str]) -> int:
    """Delete every topic of ``prefixes``; how many. A failure is said, not raised: the
    clean-up must not hide the result."""
    wanted = tuple(f"{p}." for p in prefixes) + tuple(f"{p}-" for p in prefixes)
    try:
        async with Admin(settings) as admin:
            names = [t for t in await admin.call("listing topics", lambda c: c.list_topics())
                     if t.startswith(wanted)]

            async def delete(client: AIOKafkaAdminClient) -> None:
                for start in range(0, len(names), 50):
                    with contextlib.suppress(KafkaError):
                        await client.delete_topics(names[start : start + 50])

            await admin.call("deleting the benchmark's topics", delete)
            return len(names)
    except Exception as exc:
        say(f"could not delete the benchmark topics: {exc!r}")
        return 0


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

    async def append(self, key: bytes, value: bytes, at: float) -> None:
        partition = self._partition_of.get(key)
        if partition is None:
            partition = self._partition_of[key] = partition_for_key(key, self._partitions)
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


@contextlib.asynccontextmanager
async def _sender(settings: Settings, name: str, topic: str | None,
                  linger_ms: int) -> Any:
    kwargs = plain_producer_kwargs(settings, name)
    kwargs.update(linger_ms=linger_ms, max_batch_size=512 * 1024)
    producer = AIOKafkaProducer(**kwargs)
    await producer.start()
    try:
        yield _BatchSender(producer, topic or TopicNames(settings.topic_prefix).agent_events,
                           settings.partitions)
    finally:
        await producer.stop()


async def publish(settings: Settings, records: Iterable[tuple[bytes, bytes]],
                  topic: str | None = None) -> float:
    """Publish ``(key, value)`` records to ``topic`` (default: the raw topic) as fast as
    possible, keyed by run id in Kafka's default partitioner's partition (every event of a
    run in one partition, in order); returns seconds."""
    async with _sender(settings, "bench-load", topic, 5) as sender:
        started = time.monotonic()
        for key, value in records:
            await sender.append(key, value, 0.0)
        await sender.flush(0.0)
        await sender.delivered()
        return time.monotonic() - started


async def publish_at_rate(
    settings: Settings,
    count: int,
    encode: Callable[[int, float], tuple[bytes, bytes]],
    rate: float,
    tick_s: float = 0.002,
) -> tuple[dict[tuple[int, int], float], float]:
    """Publish ``count`` records to the raw topic at ``rate`` per second, each encoded at
    its send time.

    Every ``tick_s`` the records that are due are encoded with kernel timestamp ``now``
    (``encode(i, now)`` returns record i's ``(key, value)``) and handed to the producer at
    once. Returns ``(partition, offset) -> send time`` and the achieved rate.
    """
    async with _sender(settings, "bench-paced", None, 0) as sender:
        started = time.monotonic()
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
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await consumer.stop()
    return {tp.partition: int(offset) for tp, offset in ends.items()}


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

    async def wait(self, group: str, count: int, within: float, every: float = POLL_S,
                   alive: Callable[[], object] = lambda: None) -> None:
        """Until ``group`` committed ``count`` records of the topic; ``alive`` raises when
        what should commit them has died."""
        async def reached() -> bool:
            alive()
            return await self.committed(group) >= count

        if not await until(reached, within, every):
            raise RuntimeError(f"{group} did not commit {count:,} records within {within:.0f}s")


#: The output reader's fetch wait: a read_committed fetch is answered as soon as a commit
#: makes records visible, this only bounds an idle fetch.
READER_FETCH_MAX_WAIT_MS = 50


class OutputReader:
    """Reads topics read_committed in the background, from their beginning (or, with
    ``from_end``, from their end when it starts), timing each record's arrival.

    ``on_batch(records, read_at)`` receives each fetched batch (aiokafka ConsumerRecords)
    with the wall-clock time it came back.
    """

    def __init__(self, settings: Settings, topics: Sequence[str], partitions: int,
                 on_batch: Callable[[list[Any], float], None], *,
                 wait_ms: int = READER_FETCH_MAX_WAIT_MS, from_end: bool = False) -> None:
        self._tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        self._on_batch = on_batch
        self._from_end = from_end
        self._consumer = AIOKafkaConsumer(
            **client_kwargs(settings, "bench-reader"),
            group_id=None,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=wait_ms,
        )
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.assign(self._tps)
        if self._from_end:
            await self._consumer.seek_to_end(*self._tps)
        else:
            await self._consumer.seek_to_beginning(*self._tps)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            batch = await self._consumer.getmany(timeout_ms=100)
            read_at = time.time()
            for records in batch.values():
                self._on_batch(records, read_at)

    async def wait_caught_up(self, within: float = 60.0) -> None:
        """Until every partition's position reached its current read_committed end."""
        ends = await self._consumer.end_offsets(self._tps)

        async def caught_up() -> bool:
            if self._task is not None and self._task.done():
                self._task.result()  # the reading task failed: raise its error
            positions = [await self._consumer.position(tp) for tp in self._tps]
            return all(pos >= ends[tp] for pos, tp in zip(positions, self._tps, strict=True))

        if not await until(caught_up, within):
            raise RuntimeError(f"output reader did not reach the end within {within}s")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._consumer.stop()
