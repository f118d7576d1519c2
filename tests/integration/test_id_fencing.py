"""Fencing by transactional id without a producer (``symfonic_stream/kafka/id_fencing.py``),
on the real broker: what set-up step 1 does for each partition it is assigned.

A producer left a transaction open (a process SIGKILLed mid-transaction). ``fence_ids``
returns only once that transaction is aborted: its records are never read_committed, the
partition's last stable offset is past them at once (not after the transaction timeout),
and the id's epoch moved on (its old producer is fenced).
"""

from __future__ import annotations

import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from symfonic_stream.kafka.id_fencing import fence_ids

from .conftest import NewTopicFactory, read_to_end
from .kafka_view import transactions

#: Much longer than the test may take: only the fence can end the transaction in time.
TIMEOUT_MS = 600_000


async def test_fence_ids_aborts_what_each_id_left_open_and_fences_its_producer(
    bootstrap_servers: str, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=2)
    ids = [f"it-fence-{uuid.uuid4().hex[:10]}-{p}" for p in range(2)]
    left_open = []
    for partition, tid in enumerate(ids):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=tid,
                                    transaction_timeout_ms=TIMEOUT_MS)
        await producer.start()
        await producer.begin_transaction()
        await (await producer.send(topic, b"open", key=b"k", partition=partition))
        left_open.append(producer)
    before = await transactions(ids, bootstrap_servers)
    assert {t.state for t in before.values()} == {"Ongoing"}

    client = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers)
    await client.start()
    try:
        await fence_ids(client._client, ids, transaction_timeout_ms=TIMEOUT_MS, timeout_s=30)
        after = await transactions(ids, bootstrap_servers)
        ends = await client.end_offsets([TopicPartition(topic, p) for p in range(2)])
    finally:
        await client.stop()

    # Aborted, and the epoch moved on: the open records' offsets are below the stable end.
    for tid in ids:
        assert after[tid].state != "Ongoing", after[tid]
        assert after[tid].producer_epoch > before[tid].producer_epoch
    assert all(end >= 2 for end in ends.values()), ends  # the record and its abort marker
    assert await read_to_end(bootstrap_servers, topic) == []
    everything = await read_to_end(bootstrap_servers, topic, isolation_level="read_uncommitted")
    assert [r.value for r in everything] == [b"open", b"open"]
    for producer in left_open:
        await producer.stop()


async def test_fence_ids_of_an_unused_id_returns() -> None:
    """A partition nobody wrote through yet: its id is simply created."""
    from .harness import BOOTSTRAP

    client = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP)
    await client.start()
    try:
        tid = f"it-fence-new-{uuid.uuid4().hex[:10]}"
        await fence_ids(client._client, [tid], transaction_timeout_ms=TIMEOUT_MS, timeout_s=30)
        assert (await transactions([tid]))[tid].state == "Empty"
    finally:
        await client.stop()
