"""Fencing by transactional id: a zombie's transaction never becomes visible, and an engine
whose producer gets fenced gives the partition back to the group and recovers."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from symfonic_stream.engine.records import Collector, OutputRecord
from symfonic_stream.engine.transactions import PartitionProducer, ProducerUnusable
from symfonic_stream.kafka.topics import copier_output_topic
from symfonic_stream.processors.passthrough import copier_topology
from symfonic_stream.topics import TopicNames

from .harness import (
    InProcessEngine,
    TopicReader,
    committed_offsets,
    create_topics,
    expected_by_key,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    sequences_by_key,
    wait_caught_up,
)


def _out(topic: str, *values: bytes) -> Collector:
    out = Collector()
    for value in values:
        out.emit(OutputRecord(topic=topic, key=b"k", value=value, record_type="copy"))
    return out


async def test_zombie_transaction_is_aborted_and_never_visible(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix)
    names = TopicNames(prefix)
    topology = copier_topology(settings)
    output = copier_output_topic(names)
    source_tp = TopicPartition(names.agent_events, 0)

    zombie = PartitionProducer(settings, topology, 0)
    await zombie.start()
    # The zombie is mid-transaction: records sent and acknowledged, not committed.
    producer = zombie._producer
    await producer.begin_transaction()
    sent = await producer.send(output, key=b"k", value=b"zombie-1")
    await sent
    successor = PartitionProducer(settings, topology, 0)
    assert successor.transactional_id == zombie.transactional_id
    try:
        await successor.start()  # InitProducerId: fences the zombie, aborts its transaction
        await successor.commit(_out(output, b"owner-1"), {source_tp: 7})
        with pytest.raises(ProducerUnusable) as fenced:
            await zombie.commit(_out(output, b"zombie-2"), {source_tp: 9})
        assert fenced.value.fenced
        assert not zombie.usable
        await successor.commit(_out(output, b"owner-2"), {source_tp: 8})
    finally:
        await zombie.close()
        await successor.close()

    async with TopicReader(output) as reader:
        committed = await reader.settle(quiet=1.0)
    assert [r.value for r in committed] == [b"owner-1", b"owner-2"]
    async with TopicReader(output, "read_uncommitted") as raw:
        everything = await raw.settle(quiet=1.0)
    assert b"zombie-1" in [r.value for r in everything]  # it was written, then aborted
    # Only the owner's offsets were committed for the group.
    assert (await committed_offsets(topology.group_id, names.agent_events)).get(0) == 8


async def test_engine_recovers_when_a_newer_producer_fences_it(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix)
    names = TopicNames(prefix)
    topology = copier_topology(settings)
    first = [(b"run-0", f"a{i}".encode(), []) for i in range(200)]
    second = [(b"run-0", f"b{i}".encode(), []) for i in range(200)]
    async with InProcessEngine(topology, settings) as running:
        await produce(names.agent_events, first, partition=0)
        await wait_caught_up(topology.group_id, names.agent_events)
        # Another instance claims partition 0's transactional id: ours is now a zombie.
        usurper = PartitionProducer(settings, topology, 0)
        await usurper.start()
        try:
            await produce(names.agent_events, second, partition=0)
            await wait_caught_up(topology.group_id, names.agent_events, within=90)
        finally:
            await usurper.close()
        assert running.sample("producers_fenced_total") >= 1
        assert running.sample("rebalances_total") >= 2  # the initial join and the rejoin
        assert 0 in running.engine.owned_partitions
    async with TopicReader(copier_output_topic(names)) as reader:
        copied = await reader.settle(quiet=1.0)
    assert sequences_by_key(copied) == expected_by_key(first + second)
