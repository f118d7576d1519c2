"""The engine with the copier: every record copied once, in order, with its metrics; and the
engine's own ``too_large`` dead-letter path."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.producer import sender as aiokafka_sender

from symfonic_stream.app.topologies import copier_topology
from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.transaction import transact, truncate_detail
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.models.dead_letter import (
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.copier import Copier

from .harness import (
    ConsumerProcess,
    InProcessEngine,
    committed_offsets,
    create_topics,
    expected_by_key,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    sequences_by_key,
    wait_caught_up,
)
from .observe import quiesce, read_to_committed_end, wait_committed_to


def _records(n: int, keys: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (f"run-{i % keys}".encode(), f"value-{i}".encode(), [("trace", f"t{i}".encode())])
        for i in range(n)
    ]


async def test_copier_copies_each_record_once_in_order_with_metrics(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix)
    names = TopicNames(prefix)
    sent = _records(600, keys=12)
    group, source, output = names.group("copier"), names.agent_events, names.copier_output
    await produce(source, sent[:300])
    async with InProcessEngine(copier_topology(settings), settings) as running:
        await produce(source, sent[300:])  # while it runs, too
        await wait_caught_up(group, source)
        assert running.sample("ready") == 1
        assert running.engine.owned_partitions == [0, 1, 2, 3]
    assert running.sample("ready") == 0  # shut down
    # Stopped, so every count is final and nothing more can be written: read to the end.
    assert running.sample("records_in_total", topic=source, type="raw") == len(sent)
    assert running.sample("records_out_total", topic=output, type="copy") == len(sent)
    assert running.sample("transactions_total", outcome="committed") >= 1
    assert running.sample("transactions_total", outcome="aborted") == 0
    copied = await read_to_committed_end(output, group=group, source=source, processes=[])

    assert sorted(r.value or b"" for r in copied) == sorted(v for _, v, _ in sent)  # once each
    # Per key (so per input partition) the order is the order sent.
    assert sequences_by_key(copied) == expected_by_key(sent)
    by_value = {r.value: r for r in copied}
    assert by_value[b"value-7"].key == b"run-7"
    assert by_value[b"value-7"].headers == (("trace", b"t7"),)


async def test_too_large_record_goes_to_dead_letter_whole_and_consumer_goes_on(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    names = TopicNames(prefix)
    big = b"x" * 500
    await produce(
        names.agent_events,
        [
            (b"run-a", b"small-1", [("h", b"1")]),
            (b"run-a", big, [("h", b"2"), ("other", b"kept")]),
            (b"run-a", b"small-2", [("h", b"3")]),
        ],
    )
    consumer = ConsumerProcess("copier", prefix, tmp_path, max_record_bytes=100)
    group, source = names.group("copier"), names.agent_events
    consumer.start()
    try:
        await consumer.wait_ready()
        await quiesce(group, source, [consumer])  # everything committed, then stopped
        letters = await read_to_committed_end(
            names.dead_letter, group=group, source=source, processes=[consumer]
        )
        copied = await read_to_committed_end(
            names.copier_output, group=group, source=source, processes=[consumer]
        )
    finally:
        consumer.stop()
    assert [r.value for r in copied] == [b"small-1", b"small-2"], consumer.log()
    assert len(letters) == 1
    letter = letters[0]
    assert (letter.key, letter.value) == (b"run-a", big)
    headers = dict(letter.headers)
    assert letter.headers[:2] == (("h", b"2"), ("other", b"kept"))  # originals first, whole
    assert headers[HEADER_REASON] == b"too_large"
    assert headers[HEADER_DETAIL] == b"value is 500 bytes, limit 100"
    # All three records share a key, so a partition: the big one is at offset 1 there.
    assert re.fullmatch(rf"{re.escape(names.agent_events)}/\d/1", headers[HEADER_SOURCE].decode())
    assert headers[HEADER_CONSUMER] == b"copier"


def test_dead_letter_detail_is_cut_to_one_kilobyte_on_a_character_boundary() -> None:
    detail = "é" * 600  # 1200 bytes of UTF-8
    cut = truncate_detail(detail)
    assert len(cut) <= 1024
    assert cut.decode("utf-8") == "é" * 512


class _FailsOnBoom(Copier):
    """A copier with a bug: it raises on one value, every time it sees it."""

    def __init__(self, output_topic: str) -> None:
        super().__init__(output_topic)
        self.raised = 0

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        if record.value == b"boom":
            self.raised += 1
            raise ValueError("cannot handle boom")
        super().process(record, now, out)


async def test_a_record_the_processor_raises_on_is_dead_lettered_and_the_partition_goes_on(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix)
    names = TopicNames(prefix)
    output = names.copier_output
    processors: list[_FailsOnBoom] = []

    def make(partition: int) -> _FailsOnBoom:
        processors.append(_FailsOnBoom(output))
        return processors[-1]

    topology = dataclasses.replace(copier_topology(settings), processor_factory=make)
    sent: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
        (b"run-1", f"v{i}".encode(), []) for i in range(3)
    ]
    sent.insert(2, (b"run-1", b"boom", [("trace", b"tb")]))
    group, source = names.group("copier"), names.agent_events
    async with InProcessEngine(topology, settings) as running:
        await produce(source, sent, partition=0)
        await wait_caught_up(group, source)
    # Stopped: every count is final and nothing more can be written. Read to the end.
    assert running.sample("dead_letters_total", reason="invalid_event") == 1
    [letter] = await read_to_committed_end(
        names.dead_letter, group=group, source=source, processes=[]
    )
    copied = await read_to_committed_end(output, group=group, source=source, processes=[])
    # Raised once; rolled back, the processor never saw the record again.
    assert sum(p.raised for p in processors) == 1
    assert [r.value for r in copied] == [b"v0", b"v1", b"v2"]  # once each, in order
    headers = dict(letter.headers)
    assert (letter.key, letter.value, headers["trace"]) == (b"run-1", b"boom", b"tb")
    assert headers[HEADER_REASON] == b"invalid_event"
    assert b"ValueError: cannot handle boom" in headers[HEADER_DETAIL]
    assert headers[HEADER_SOURCE] == f"{names.agent_events}/0/2".encode()


async def test_transactions_are_never_refused_by_the_brokers_partition_check(
    bootstrap_servers: str, prefix: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Commit step 6 sends the offsets once the records are written. Sent beside a produce
    request (as it was), the broker's KIP-890 check of the produce collided with the
    AddOffsetsToTxn in progress: NOT_ENOUGH_REPLICAS and the batch sent again 20 ms later,
    and TxnOffsetCommit was refused now and then (docs/engine.md, "aiokafka, read closely").
    Back-to-back one-record transactions, the shape of a trickle, hit it most."""
    settings = await create_topics(prefix)
    topology = copier_topology(settings)
    refused: list[str] = []
    for name in ("AddOffsetsToTxnHandler", "TxnOffsetCommitHandler"):
        handler = getattr(aiokafka_sender, name)
        monkeypatch.setattr(handler, "handle_response", _counting(
            handler.handle_response, name, refused))
    producer = ProcessProducer(settings, topology.transactional_id(0))
    await producer.start()
    source = TopicPartition(topology.source_topic, 0)
    caplog.set_level(logging.WARNING, logger="aiokafka.producer.sender")
    try:
        for n in range(160):
            if n == 10:  # the new topics' leaders are elected by now (no NOT_LEADER retry)
                caplog.clear()
                refused.clear()
            out = Collector()
            out.emit(OutputRecord(topology.output_topics[0], b"run-1", b"v%d" % n, "copy"))
            await transact(producer, topology, [(0, out)], {source: n + 1})
    finally:
        await producer.close()
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retried == [] and refused == []
    # The offsets show once the commit's markers reach __consumer_offsets, after EndTxn.
    await wait_committed_to(topology.group_id, topology.source_topic, {0: 160}, [0])
    assert (await committed_offsets(topology.group_id, topology.source_topic))[0] == 160


def _counting(handle: Any, name: str, refused: list[str]) -> Any:
    def handle_response(self: Any, response: Any) -> Any:
        backoff = handle(self, response)
        if backoff is not None:
            refused.append(name)
        return backoff
    return handle_response
