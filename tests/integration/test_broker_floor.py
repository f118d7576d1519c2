"""The floor the whole project stands on: what the broker must do for the engine to work.

Keyed records stay in one partition in order; a consume → produce transaction commits the
output and the input offsets together; an aborted transaction is invisible to read_committed
readers; a second producer with the same transactional id fences the first.
"""

from __future__ import annotations

import asyncio
import gc
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from .conftest import NewTopicFactory, ReadTopic, unique_name


def _producer(bootstrap: str, **kwargs: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **kwargs
    )


def _txn_producer(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        transactional_id=transactional_id,
        transaction_timeout_ms=30_000,
    )


@pytest.fixture
def collect_garbage() -> Iterator[None]:
    """Collect a fenced producer's leftovers while the test's event loop still exists.

    aiokafka leaves futures holding ``ProducerFenced`` unretrieved inside a fenced producer;
    collected here, asyncio's "exception was never retrieved" note lands in the test's captured
    log instead of on stderr when the interpreter exits.
    """
    yield
    gc.collect()


async def test_keyed_records_round_trip_in_one_partition_in_order(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic
) -> None:
    topic = await new_topic(partitions=4, prefix="roundtrip")
    runs = [f"run-{i}" for i in range(8)]
    per_run = 25
    producer = _producer(bootstrap_servers)
    await producer.start()
    sent_partition: dict[str, set[int]] = defaultdict(set)
    try:
        futures = []
        for n in range(per_run):  # interleave the runs, as a kernel would
            for run in runs:
                futures.append(
                    (run, await producer.send(topic, key=run.encode(), value=f"{run}:{n}".encode()))
                )
        for run, fut in futures:
            meta = await fut
            sent_partition[run].add(meta.partition)
    finally:
        await producer.stop()

    records = await read_topic(topic, isolation_level="read_committed")
    assert len(records) == len(runs) * per_run
    by_run: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for r in records:
        assert r.key is not None and r.value is not None
        by_run[r.key.decode()].append((r.partition, r.offset, r.value.decode()))
    assert set(by_run) == set(runs)
    used_partitions = set()
    for run in runs:
        rows = by_run[run]
        partitions = {p for p, _, _ in rows}
        assert partitions == sent_partition[run], f"{run} is spread over {partitions}"
        assert len(partitions) == 1
        used_partitions |= partitions
        rows.sort(key=lambda row: row[1])
        assert [v for _, _, v in rows] == [f"{run}:{n}" for n in range(per_run)]
    assert len(used_partitions) > 1, "8 keys over 4 partitions should use more than one"


async def test_transactional_consume_produce_commits_output_and_offsets(
    bootstrap_servers: str,
    new_topic: NewTopicFactory,
    read_topic: ReadTopic,
    admin_client: AIOKafkaAdminClient,
    group_id: str,
) -> None:
    source = await new_topic(partitions=2, prefix="txn-in")
    sink = await new_topic(partitions=2, prefix="txn-out")
    total = 40
    producer = _producer(bootstrap_servers)
    await producer.start()
    try:
        for i in range(total):
            await producer.send(source, key=f"k{i % 5}".encode(), value=f"v{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    txn = _txn_producer(bootstrap_servers, unique_name("txn"))
    await consumer.start()
    await txn.start()
    processed = 0
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while processed < total:
            assert loop.time() < deadline, f"processed only {processed} of {total}"
            batch = await consumer.getmany(timeout_ms=1000, max_records=7)
            if not batch:
                continue
            async with txn.transaction():
                offsets = {}
                for tp, recs in batch.items():
                    for r in recs:
                        await txn.send(sink, key=r.key, value=r.value.upper())
                    offsets[tp] = recs[-1].offset + 1
                    processed += len(recs)
                await txn.send_offsets_to_transaction(offsets, group_id)
    finally:
        await txn.stop()
        await consumer.stop()

    out = await read_topic(sink, isolation_level="read_committed")
    assert sorted(r.value for r in out if r.value) == sorted(f"V{i}".encode() for i in range(total))
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for r in out:
        assert r.key is not None and r.value is not None
        per_key[r.key].append(int(r.value[1:]))
    for key, values in per_key.items():
        # read_to_end orders by (partition, offset) and a key lives in one partition
        assert values == sorted(values), f"key {key!r} out of order: {values}"

    committed = await admin_client.list_consumer_group_offsets(group_id)
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, isolation_level="read_committed")
    await probe.start()
    try:
        tps = [TopicPartition(source, p) for p in (0, 1)]
        ends = await probe.end_offsets(tps)
    finally:
        await probe.stop()
    assert sum(ends.values()) == total
    for tp in tps:
        assert committed[tp].offset == ends[tp], f"{tp}: committed {committed[tp]}, end {ends[tp]}"


async def test_aborted_transaction_is_invisible_to_read_committed(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic
) -> None:
    topic = await new_topic(partitions=1, prefix="abort")
    txn = _txn_producer(bootstrap_servers, unique_name("abort"))
    await txn.start()
    try:
        await txn.begin_transaction()
        for i in range(5):
            await txn.send_and_wait(topic, key=b"run", value=f"aborted-{i}".encode())
        await txn.abort_transaction()
        async with txn.transaction():
            for i in range(3):
                await txn.send(topic, key=b"run", value=f"committed-{i}".encode())
    finally:
        await txn.stop()

    committed = await read_topic(topic, isolation_level="read_committed")
    assert [r.value for r in committed] == [f"committed-{i}".encode() for i in range(3)]
    uncommitted = await read_topic(topic, isolation_level="read_uncommitted")
    assert [r.value for r in uncommitted] == [
        *(f"aborted-{i}".encode() for i in range(5)),
        *(f"committed-{i}".encode() for i in range(3)),
    ]


@pytest.mark.usefixtures("collect_garbage")
async def test_second_producer_with_same_transactional_id_fences_the_first(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic
) -> None:
    topic = await new_topic(partitions=1, prefix="fence")
    transactional_id = unique_name("fence")
    zombie = _txn_producer(bootstrap_servers, transactional_id)
    successor = _txn_producer(bootstrap_servers, transactional_id)
    await zombie.start()
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(topic, key=b"run", value=b"zombie")

        await successor.start()  # InitProducerId bumps the epoch and aborts the zombie's txn
        try:
            with pytest.raises(ProducerFenced):
                await zombie.commit_transaction()
            async with successor.transaction():
                await successor.send(topic, key=b"run", value=b"successor")
        finally:
            await successor.stop()
    finally:
        await zombie.stop()

    committed = await read_topic(topic, isolation_level="read_committed")
    assert [r.value for r in committed] == [b"successor"]
    uncommitted = await read_topic(topic, isolation_level="read_uncommitted")
    assert [r.value for r in uncommitted] == [b"zombie", b"successor"]


@pytest.mark.usefixtures("collect_garbage")
@pytest.mark.parametrize("operation", ["send", "send_offsets"])
async def test_fenced_producer_fails_its_next_transactional_call(
    bootstrap_servers: str, new_topic: NewTopicFactory, group_id: str, operation: str
) -> None:
    """Fencing also hits a zombie that starts a new transaction rather than committing."""
    topic = await new_topic(partitions=1, prefix="fence2")
    transactional_id = unique_name("fence2")
    zombie = _txn_producer(bootstrap_servers, transactional_id)
    successor = _txn_producer(bootstrap_servers, transactional_id)
    await zombie.start()
    try:
        async with zombie.transaction():
            await zombie.send(topic, key=b"run", value=b"first")
        await successor.start()
        try:
            await zombie.begin_transaction()
            with pytest.raises(ProducerFenced):
                if operation == "send":
                    await zombie.send_and_wait(topic, key=b"run", value=b"zombie")
                else:
                    await zombie.send_offsets_to_transaction(
                        {TopicPartition(topic, 0): OffsetAndMetadata(1, "")}, group_id
                    )
        finally:
            await successor.stop()
    finally:
        await zombie.stop()
