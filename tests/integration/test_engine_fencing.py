"""Fencing by transactional id: a zombie's transaction never becomes visible, and an engine
whose producer gets fenced gives the partition back to the group and recovers.

Three levels: two producers sharing one transactional id (the mechanism); an in-process
engine whose id an outside producer takes (the engine's recovery path); and a real zombie,
an engine process frozen mid-transaction while a successor takes over, then woken.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from symfonic_stream.app.topologies import copier_topology
from symfonic_stream.engine.processor import Collector, OutputRecord
from symfonic_stream.engine.transaction import transact
from symfonic_stream.kafka.producer import ProcessProducer, ProducerUnusable
from symfonic_stream.models.names import TopicNames

from .conftest import read_to_end
from .faults import Fault, thaw, wait_frozen
from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    InProcessEngine,
    Record,
    committed_offsets,
    create_topics,
    expected_by_key,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    sequences_by_key,
    wait_caught_up,
)
from .observe import (
    metric_value,
    open_transaction_records,
    owned_only_by,
    quiesce,
    read_to_committed_end,
    split_between,
    wait_committed_to,
    wait_for_assignment,
    wait_until,
)

Sent = tuple[bytes, bytes, list[tuple[str, bytes]]]
FENCED = "symfonic_stream_producers_fenced_total"
TRANSACTIONS = "symfonic_stream_transactions_total"


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
    output = names.copier_output
    source_tp = TopicPartition(names.agent_events, 0)

    zombie = ProcessProducer(settings, topology.transactional_id(0))
    await zombie.start()
    # The zombie is mid-transaction: records sent and acknowledged, not committed.
    producer = zombie._producer
    await producer.begin_transaction()
    sent = await producer.send(output, key=b"k", value=b"zombie-1")
    await sent
    successor = ProcessProducer(settings, topology.transactional_id(0))
    assert successor.transactional_id == zombie.transactional_id
    try:
        await successor.start()  # InitProducerId: fences the zombie, aborts its transaction
        await transact(successor, topology, [(0, _out(output, b"owner-1"))], {source_tp: 7})
        with pytest.raises(ProducerUnusable) as fenced:
            await transact(zombie, topology, [(0, _out(output, b"zombie-2"))], {source_tp: 9})
        assert fenced.value.fenced
        assert not zombie.usable
        await transact(successor, topology, [(0, _out(output, b"owner-2"))], {source_tp: 8})
    finally:
        await zombie.close()
        await successor.close()

    # Both producers are closed: nothing can be written any more. Read to the end.
    committed = await read_to_committed_end(
        output, group=topology.group_id, source=names.agent_events, processes=[]
    )
    assert [r.value for r in committed] == [b"owner-1", b"owner-2"]
    everything = await read_to_end(BOOTSTRAP, output, isolation_level="read_uncommitted")
    assert b"zombie-1" in [r.value for r in everything]  # it was written, then aborted
    # Only the owner's offsets were committed for the group (shown once the markers are).
    await wait_committed_to(topology.group_id, names.agent_events, {0: 8}, [0])
    assert (await committed_offsets(topology.group_id, names.agent_events)).get(0) == 8


async def test_engine_recovers_when_a_newer_producer_fences_it(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix)
    names = TopicNames(prefix)
    topology = copier_topology(settings)
    first: list[Sent] = [(b"run-0", f"a{i}".encode(), []) for i in range(200)]
    second: list[Sent] = [(b"run-0", f"b{i}".encode(), []) for i in range(200)]
    async with InProcessEngine(topology, settings) as running:
        await produce(names.agent_events, first, partition=0)
        await wait_caught_up(topology.group_id, names.agent_events)
        # Another instance claims partition 0's transactional id: ours is now a zombie.
        usurper = ProcessProducer(settings, topology.transactional_id(0))
        await usurper.start()
        try:
            await produce(names.agent_events, second, partition=0)
            await wait_caught_up(topology.group_id, names.agent_events, within=90)
        finally:
            await usurper.close()
        assert running.sample("producers_fenced_total") >= 1
        assert running.sample("rebalances_total") >= 2  # the initial join and the rejoin
        assert 0 in running.engine.owned_partitions
    # The engine has stopped (its work committed): nothing more can be written.
    copied = await read_to_committed_end(
        names.copier_output, group=topology.group_id, source=names.agent_events,
        processes=[],
    )
    assert len(copied) == len(first + second)  # no duplicate from the fenced producer
    assert sequences_by_key(copied) == expected_by_key(first + second)


def _stream(start: int, n: int) -> list[Sent]:
    return [(f"run-{i % 40}".encode(), f"{i}".encode(), []) for i in range(start, start + n)]


@pytest.mark.slow
async def test_a_zombie_frozen_mid_transaction_is_fenced_when_woken_and_never_seen(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    """An engine process frozen with a transaction open (records written, not committed)
    while a successor takes every partition over and commits; then woken. Its commit is
    fenced, its open transaction's records never become visible read_committed, and once
    it has rejoined the group the two together copy every record exactly once."""
    await create_topics(prefix)
    names = TopicNames(prefix)
    group, source, output = names.group("copier"), names.agent_events, names.copier_output
    fault = Fault("in_transaction", 3, "freeze")
    # Many transactions: the 3rd comes early.
    small_batches: dict[str, Any] = {"batch_max_records": 50}
    processes = {
        "zombie": ConsumerProcess("copier", prefix, tmp_path, name="-zombie",
                                  fault_freeze=fault.setting, **small_batches),
        "successor": ConsumerProcess("copier", prefix, tmp_path, name="-successor",
                                     **small_batches),
    }
    zombie, successor = processes["zombie"], processes["successor"]
    before, during, after = _stream(0, 1000), _stream(1000, 500), _stream(1500, 500)
    try:
        await zombie.start().wait_ready()
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "zombie"), "the first alone"
        )
        await produce(source, before)
        await wait_frozen(zombie, fault)
        # What the frozen transaction (and any other the freeze caught open) wrote.
        open_records = await open_transaction_records(output)
        assert open_records, "the freeze must leave a transaction with records open"

        await successor.start().wait_ready(within=90)
        # The broker's word: the successor is the group's only member and owns (has set
        # up, so fenced every transactional id of) every partition. The frozen zombie is
        # not asked (it cannot answer); while it is still a member this does not hold.
        await wait_for_assignment(
            group, source, {"successor": successor},
            lambda o: owned_only_by(o, "successor"), "the successor alone",
        )
        taken_over = await asyncio.to_thread(successor.metric, TRANSACTIONS, outcome="committed")
        await produce(source, during)

        async def successor_committed() -> bool:
            now = await asyncio.to_thread(successor.metric, TRANSACTIONS, outcome="committed")
            return now > taken_over

        await wait_until(successor_committed, "the successor commits after taking over")
        await wait_caught_up(group, source, within=90)
        # The successor's InitProducerId aborted them: not visible, the zombie still frozen.
        while_frozen = await read_to_end(BOOTSTRAP, output, isolation_level="read_committed")
        assert not _leaked(open_records, {(r.partition, r.offset) for r in while_frozen})

        thaw(zombie)

        async def zombie_fenced() -> bool:
            return await metric_value(zombie, FENCED) >= 1

        await wait_until(zombie_fenced, "the woken zombie's producer is fenced")
        await wait_for_assignment(
            group, source, processes, lambda o: split_between(o, "zombie", "successor"),
            "the woken zombie rejoined beside the successor",
        )
        await produce(source, after)
        await quiesce(group, source, [zombie, successor])
        copied = await read_to_committed_end(
            output, group=group, source=source, processes=[zombie, successor]
        )
        everything = await read_to_end(BOOTSTRAP, output, isolation_level="read_uncommitted")
    finally:
        zombie.stop()
        successor.stop()
    logs = f"{zombie.log()}\n--- successor\n{successor.log()}"
    sent = before + during + after
    _assert_never_visible(open_records, copied, logs)
    assert len(everything) > len(copied), "the aborted records are on the broker, unread"
    values = [r.value for r in copied]
    assert len(values) == len(set(values)) == len(sent), f"duplicates or losses\n{logs}"
    assert set(values) == {v for _, v, _ in sent}
    assert sequences_by_key(copied) == expected_by_key(sent), "per-key order broken"


def _assert_never_visible(open_records: list[Record], copied: list[Record], logs: str) -> None:
    """None of the open transaction's records is read_committed; what they copied was
    copied again by the successor, and is there once."""
    leaked = _leaked(open_records, {(r.partition, r.offset) for r in copied})
    assert not leaked, f"{len(leaked)} records of the zombie's transaction visible\n{logs}"
    values = [r.value for r in copied]
    redone = [r.value for r in open_records if values.count(r.value) != 1]
    assert not redone, f"{len(redone)} zombie records not copied exactly once\n{logs}"


def _leaked(open_records: list[Record], visible: set[tuple[int, int]]) -> list[Record]:
    """The open transaction's records whose (partition, offset) a read_committed read
    returned."""
    return [r for r in open_records if (r.partition, r.offset) in visible]
