"""Fencing by group generation (KIP-447) through aiokafka, on the real broker.

What one producer for all of a process's partitions would rest on
(``symfonic_stream/kafka/group_fencing.py``): the group coordinator refuses a transaction's
offsets from a generation a rebalance ended, and tells a partition's new owner to wait while
a transaction still holds offsets for it. Runs on every broker of the test matrix.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from symfonic_stream.kafka.group import (
    GenerationFenced,
    GroupMetadata,
    OffsetsUnstable,
    fetch_stable_offsets,
    group_metadata,
)
from symfonic_stream.kafka.producer import send_offsets_fenced

from .conftest import NewTopicFactory, read_to_end

_WAIT_S = 60.0


async def _member(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        isolation_level="read_committed", session_timeout_ms=10_000,
        heartbeat_interval_ms=500)
    await consumer.start()
    return consumer


async def _joined(consumer: AIOKafkaConsumer, *, after: int = 0) -> GroupMetadata:
    """The consumer's metadata once it holds an assignment in a generation after ``after``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _WAIT_S
    while loop.time() < deadline:
        await consumer.getmany(timeout_ms=100)
        member = group_metadata(consumer)
        if consumer.assignment() and member.generation_id > after:
            return member
    raise AssertionError(f"no assignment in a generation after {after} within {_WAIT_S} s")


async def _stable(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[
        TopicPartition, int | None]:
    """The committed offsets once no transaction holds any: a commit's markers are written
    after EndTxn is answered (KAFKA-5477), so right after a commit they may still pend."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _WAIT_S
    while True:
        try:
            return await fetch_stable_offsets(consumer, tps)
        except OffsetsUnstable:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.fixture
async def producer(bootstrap_servers: str) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, enable_idempotence=True,
                         transactional_id=f"it-kip447-{uuid.uuid4().hex[:10]}")
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def _transact(producer: AIOKafkaProducer, out: str, value: bytes,
                    offsets: dict[TopicPartition, int], member: GroupMetadata) -> None:
    await producer.begin_transaction()
    await producer.send_and_wait(out, value, partition=0)
    await send_offsets_fenced(producer, offsets, member)
    await producer.commit_transaction()


@dataclass
class _Rebalanced:
    """A group whose first member's generation a second member's arrival ended."""

    first: AIOKafkaConsumer
    second: AIOKafkaConsumer
    zombie: GroupMetadata
    current: GroupMetadata


@contextlib.asynccontextmanager
async def _rebalanced(bootstrap: str, source: str, group: str) -> AsyncIterator[_Rebalanced]:
    first = await _member(bootstrap, source, group)
    second: AIOKafkaConsumer | None = None
    try:
        zombie = await _joined(first)
        second = await _member(bootstrap, source, group)
        current = await _joined(second, after=zombie.generation_id)
        yield _Rebalanced(first, second, zombie, current)
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


@dataclass
class _Topics:
    source: str
    out: str
    tp: TopicPartition


@pytest.fixture
async def topics(new_topic: NewTopicFactory) -> _Topics:
    """An input of two partitions (a second member gets one) and a one-partition output."""
    source = await new_topic(partitions=2, prefix="kip447-in")
    out = await new_topic(partitions=1, prefix="kip447-out")
    return _Topics(source, out, TopicPartition(source, 0))


async def _refused(producer: AIOKafkaProducer, topics: _Topics, value: bytes,
                   zombie: GroupMetadata) -> None:
    """A transaction with one record whose offsets the zombie's generation cannot commit."""
    await producer.begin_transaction()
    await producer.send_and_wait(topics.out, value, partition=0)
    with pytest.raises(GenerationFenced, match=f"generation {zombie.generation_id} "):
        await send_offsets_fenced(producer, {topics.tp: 9}, zombie)


async def _restarted(producer: AIOKafkaProducer) -> AIOKafkaProducer:
    """A successor of the same transactional id: its InitProducerId ends what was open."""
    await producer.stop()
    successor = AIOKafkaProducer(bootstrap_servers=producer.client._bootstrap_servers,
                                 enable_idempotence=True,
                                 transactional_id=producer._txn_manager.transactional_id)
    await successor.start()
    return successor


async def test_a_zombie_generation_is_refused_and_only_its_transaction_is_lost(
    bootstrap_servers: str, topics: _Topics, group_id: str, producer: AIOKafkaProducer,
) -> None:
    source, out, tp = topics.source, topics.out, topics.tp
    first = await _member(bootstrap_servers, source, group_id)
    try:
        await _transact(producer, out, b"before", {tp: 5}, await _joined(first))
        assert await _stable(first, [tp]) == {tp: 5}
    finally:
        await first.stop()
    async with _rebalanced(bootstrap_servers, source, group_id) as group:
        await _refused(producer, topics, b"zombie", group.zombie)
        assert await _stable(group.second, [tp]) == {tp: 5}

        successor = await _restarted(producer)
        try:
            await _transact(successor, out, b"after", {tp: 9}, group.current)
        finally:
            await successor.stop()
        assert await _stable(group.second, [tp]) == {tp: 9}
    records = await read_to_end(bootstrap_servers, out, isolation_level="read_committed")
    assert [r.value for r in records] == [b"before", b"after"]


async def test_aiokafka_sends_no_abort_after_an_abortable_error(
    bootstrap_servers: str, topics: _Topics, group_id: str, producer: AIOKafkaProducer,
) -> None:
    """After an error aiokafka calls abortable it forgets the transaction's partitions, its
    abort sends no EndTxn, and the broker's transaction stays open: the same producer's next
    commit commits the "aborted" records too. One reason the engine replaces a task's
    producer after every abort (``engine/assign.py`` ``rebuild_task``): the new producer's
    InitProducerId ends what was open, as in the test above."""
    source, out, tp = topics.source, topics.out, topics.tp
    async with _rebalanced(bootstrap_servers, source, group_id) as group:
        await _refused(producer, topics, b"aborted", group.zombie)
        await producer.abort_transaction()
        await _transact(producer, out, b"next", {tp: 9}, group.current)
    records = await read_to_end(bootstrap_servers, out, isolation_level="read_committed")
    assert [r.value for r in records] == [b"aborted", b"next"]


async def test_a_new_owner_waits_while_a_transaction_holds_offsets(
    bootstrap_servers: str, topics: _Topics, group_id: str, producer: AIOKafkaProducer,
) -> None:
    source, out, tp = topics.source, topics.out, topics.tp
    consumer = await _member(bootstrap_servers, source, group_id)
    try:
        member = await _joined(consumer)
        await producer.begin_transaction()
        await producer.send_and_wait(out, b"pending", partition=0)
        await send_offsets_fenced(producer, {tp: 7}, member)

        with pytest.raises(OffsetsUnstable) as unstable:
            await fetch_stable_offsets(consumer, [tp])
        assert unstable.value.partitions == [tp]
        # What aiokafka itself reads meanwhile: no offset, as if the transaction's
        # records were still to be processed (a new owner would process them twice).
        assert await consumer.committed(tp) is None

        await producer.commit_transaction()
        assert await _stable(consumer, [tp]) == {tp: 7}
    finally:
        await consumer.stop()
