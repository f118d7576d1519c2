"""The publisher and run reader SDKs, and the partitioner, against the real broker."""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from symfonic_stream.config import Settings
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.envelope import EndRecord
from symfonic_stream.sdk.publisher import EventPublisher, InvalidEventError
from symfonic_stream.sdk.reader import (
    ReaderTimeout,
    RunReader,
    SequenceError,
    TopicMissingError,
)

from .conftest import NewTopicFactory, ReadTopic


def _event(run_id: str, index: int, kind: str = "text_delta", **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "index": index, "kind": kind, "timestamp": 100.0 + index,
            "text": f"t{index}", **fields}


def _envelope(run_id: str, seq: int, *, end: str | None = None) -> bytes:
    body: dict[str, Any] = {"run_id": run_id, "seq": seq, "source_index": seq, "ts": 1.0 + seq}
    if end is None:
        body["event"] = {"type": "text_delta", "text": f"s{seq}"}
    else:
        body["end"] = {"status": end, "error": None}
    return orjson.dumps(body)


async def _produce(
    bootstrap: str, topic: str, items: Sequence[tuple[bytes, bytes]], **send: Any
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for key, value in items:
            await producer.send_and_wait(topic, value=value, key=key, **send)
    finally:
        await producer.stop()


# --------------------------------------------------------------------------- publisher


async def test_publisher_rejects_invalid_events_and_sends_nothing(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic
) -> None:
    topic = await new_topic(partitions=3, prefix="pub-invalid")
    settings = Settings(bootstrap_servers=bootstrap_servers)
    async with EventPublisher(settings, topic=topic) as publisher:
        for bad in (
            {"run_id": "r", "index": "1", "kind": "text_delta", "timestamp": 1.0},
            {"run_id": "r", "index": 1, "kind": "text_delta"},
            b"{not json",
            b'"a string"',
        ):
            with pytest.raises(InvalidEventError):
                await publisher.send(bad)
        assert publisher.sent == 0
    assert await read_topic(topic) == []


async def test_publisher_keys_by_run_id(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic
) -> None:
    topic = await new_topic(partitions=5, prefix="pub-keys")
    settings = Settings(bootstrap_servers=bootstrap_servers)
    runs = [f"run-{n}" for n in range(6)]
    async with EventPublisher(settings, topic=topic) as publisher:
        for index in range(4):
            for run_id in runs:
                await publisher.send(_event(run_id, index))
        metadata = await publisher.send_and_wait(orjson.dumps(_event("run-x", 0)))
        assert metadata.partition == partition_for_key("run-x", 5)
    records = await read_topic(topic)
    assert len(records) == 4 * len(runs) + 1
    for record in records:
        value = orjson.loads(record.value or b"")
        assert record.key == value["run_id"].encode()
        assert record.partition == partition_for_key(value["run_id"], 5)
    by_run: dict[str, list[int]] = {}
    for record in records:
        value = orjson.loads(record.value or b"")
        by_run.setdefault(value["run_id"], []).append(value["index"])
    assert all(indexes == [0, 1, 2, 3] for run, indexes in by_run.items() if run != "run-x")


# --------------------------------------------------------------------------- partitioner


async def test_partitioner_agrees_with_broker_placement(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic
) -> None:
    partitions = 7
    topic = await new_topic(partitions=partitions, prefix="murmur")
    rng = random.Random(2024)
    alphabet = string.ascii_letters + string.digits + "-_/:é運🌵"
    keys = {
        "".join(rng.choices(alphabet, k=rng.randint(1, 40))).encode() for _ in range(1000)
    }
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=b"", key=key) for key in keys]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    records = await read_topic(topic)
    assert len(records) == len(keys) >= 990
    placed = {record.key: record.partition for record in records}
    wrong = [
        key for key, p in placed.items() if key is None or partition_for_key(key, partitions) != p
    ]
    assert wrong == []
    assert len(set(placed.values())) == partitions


# --------------------------------------------------------------------------- reader

#: A live reader's silence before its run ends: the one wait that stands for nothing but
#: itself (see test_reader_follows_a_live_run_and_stops_at_its_end).
QUIET_S = 2.0


async def _until_seen(seen: list[int], seq: int, reading: asyncio.Task[Any],
                      within: float = 30.0) -> None:
    """Until the reader task has yielded ``seq`` (the last one it yielded); fails if it
    ends or yields anything else first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not seen or seen[-1] != seq:
        assert not reading.done(), f"the reader ended waiting for seq {seq}: {seen}"
        assert seq not in seen and loop.time() < deadline, f"seq {seq} not read: {seen}"
        await asyncio.sleep(0.05)
    assert seen == list(range(seq + 1)), seen


async def test_reader_follows_a_live_run_and_stops_at_its_end(
    bootstrap_servers: str, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=3, prefix="reader-live")
    settings = Settings(bootstrap_servers=bootstrap_servers)
    run = "live-run"
    # Another run in the same partition, interleaved: the reader must skip it.
    other = next(f"other-{n}" for n in range(1000) if
                 partition_for_key(f"other-{n}", 3) == partition_for_key(run, 3))
    seen: list[int] = []

    async def read() -> list[Any]:
        async with RunReader(run, settings, topic=topic, idle_timeout_s=30) as reader:
            out = []
            async for record in reader:
                seen.append(record.seq)
                out.append(record)
            return out

    reading = asyncio.create_task(read())
    await _produce(bootstrap_servers, topic, [(other.encode(), _envelope(other, 0))])
    for seq in range(5):
        await _produce(bootstrap_servers, topic, [(run.encode(), _envelope(run, seq))])
        # Live: each record is delivered while the run goes on, before the next is written.
        await _until_seen(seen, seq, reading)
    # Caught up on a run with no end record yet, the reader must keep waiting. That
    # nothing happens is the property under test, so this one wait is a span of silence,
    # not a stand-in for an event: well under the idle timeout (30 s), and four of the
    # reader's 500 ms polls. Nothing may be yielded during it and the reader must not end.
    await asyncio.sleep(QUIET_S)
    assert not reading.done(), "the reader stopped before the run's end record"
    assert seen == [0, 1, 2, 3, 4]
    await _produce(
        bootstrap_servers, topic,
        [(other.encode(), _envelope(other, 1)), (run.encode(), _envelope(run, 5, end="completed")),
         (run.encode(), _envelope(run, 6))],  # nothing after the end is read
    )
    records = await asyncio.wait_for(reading, 30)
    assert [r.seq for r in records] == [0, 1, 2, 3, 4, 5]
    assert isinstance(records[-1], EndRecord) and records[-1].end.status == "completed"
    assert all(r.run_id == run for r in records)


async def test_reader_pause_stops_unless_follow(
    bootstrap_servers: str, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=2, prefix="reader-pause")
    settings = Settings(bootstrap_servers=bootstrap_servers)
    run = "paused-run"
    key = run.encode()
    await _produce(bootstrap_servers, topic, [
        (key, _envelope(run, 0)), (key, _envelope(run, 1, end="paused")),
        (key, _envelope(run, 2)), (key, _envelope(run, 3, end="completed")),
    ])

    async def seqs(**options: Any) -> list[int]:
        async with RunReader(run, settings, topic=topic, idle_timeout_s=15, **options) as reader:
            return [record.seq async for record in reader]

    assert await seqs() == [0, 1]
    assert await seqs(follow=True) == [0, 1, 2, 3]
    assert await seqs(from_seq=2) == [2, 3]  # a pause before from_seq does not end it


async def test_reader_detects_a_hole(bootstrap_servers: str, new_topic: NewTopicFactory) -> None:
    topic = await new_topic(partitions=1, prefix="reader-hole")
    run = "holey"
    key = run.encode()
    await _produce(bootstrap_servers, topic, [
        (key, _envelope(run, 0)), (key, _envelope(run, 1)), (key, _envelope(run, 4)),
        (key, _envelope(run, 5, end="completed")),
    ])
    settings = Settings(bootstrap_servers=bootstrap_servers)
    got: list[int] = []
    with pytest.raises(SequenceError, match=r"run 'holey': hole: seq 2\.\.3 missing before seq 4"):
        async with RunReader(run, settings, topic=topic, idle_timeout_s=15) as reader:
            async for record in reader:
                got.append(record.seq)
    assert got == [0, 1]


async def test_reader_detects_a_repeat(bootstrap_servers: str, new_topic: NewTopicFactory) -> None:
    topic = await new_topic(partitions=1, prefix="reader-repeat")
    run = "twice"
    key = run.encode()
    await _produce(bootstrap_servers, topic, [
        (key, _envelope(run, 0)), (key, _envelope(run, 1)), (key, _envelope(run, 1)),
        (key, _envelope(run, 2, end="completed")),
    ])
    settings = Settings(bootstrap_servers=bootstrap_servers)
    with pytest.raises(SequenceError, match="run 'twice': repeat: seq 1 again where seq 2 was due"):
        async with RunReader(run, settings, topic=topic, idle_timeout_s=15) as reader:
            async for _ in reader:
                pass


async def test_reader_seeks_by_time(bootstrap_servers: str, new_topic: NewTopicFactory) -> None:
    topic = await new_topic(partitions=1, prefix="reader-since")
    run = "timed"
    key = run.encode()
    base_ms = 1_700_000_000_000
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    await producer.start()
    try:
        for seq in range(6):
            end = "completed" if seq == 5 else None
            value = _envelope(run, seq, end=end)
            await producer.send_and_wait(
                topic, value=value, key=key, timestamp_ms=base_ms + seq * 1000
            )
    finally:
        await producer.stop()
    settings = Settings(bootstrap_servers=bootstrap_servers)
    async with RunReader(
        run, settings, topic=topic, since=(base_ms + 3000) / 1000, idle_timeout_s=15
    ) as reader:
        assert [record.seq async for record in reader] == [3, 4, 5]


async def test_reader_errors_on_missing_topic_and_idle_timeout(
    bootstrap_servers: str, new_topic: NewTopicFactory
) -> None:
    settings = Settings(bootstrap_servers=bootstrap_servers)
    with pytest.raises(TopicMissingError):
        async with RunReader("r", settings, topic="it.no-such-topic.x8q2") as reader:
            pass
    topic = await new_topic(partitions=1, prefix="reader-idle")
    with pytest.raises(ReaderTimeout, match="no record in 1 s"):
        async with RunReader("nobody", settings, topic=topic, idle_timeout_s=1) as reader:
            async for _ in reader:
                pass
