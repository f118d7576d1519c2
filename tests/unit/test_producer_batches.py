"""A transaction's record batches: appending straight to aiokafka's C record builder
writes what aiokafka's public ``BatchBuilder.append`` writes, batch for batch, and the
native batches (``symfonic_stream._native.RecordBatches``) write the same records, partition for
partition.

No broker: the batches are built as the sender would build them, then read back.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatch

from symfonic_stream.engine.processor import OutputRecord
from symfonic_stream.kafka import producer as batches_module
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.kafka.producer import TransactionBatches

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


def _records() -> list[tuple[str, int, bytes | None, bytes | None, Any]]:
    """Enough to fill more than one 512 KiB batch per partition, with headers as a list,
    a tuple and none, and a record with neither key nor value."""
    records: list[tuple[str, int, bytes | None, bytes | None, Any]] = []
    for n in range(4000):
        headers: Any = [("symfonic-tenant", b"acme")] if n % 3 == 0 else (
            (("h", b"v"), ("i", b"")) if n % 3 == 1 else ())
        records.append(("out", n % 2, f"run-{n % 7}".encode(), b"x" * 300 + str(n).encode(),
                        headers))
    records.append(("state", 0, None, None, ()))
    return records


def _written(batches: TransactionBatches) -> list[tuple[tuple[str, int], int, list[Record]]]:
    """Every batch in send order: where, its record count, its records read back."""
    written = []
    for where, batch in batches.in_send_order():
        read = DefaultRecordBatch(bytes(batch._build()))
        records = [(r.offset, r.key, r.value, tuple(r.headers)) for r in read]
        written.append((where, batch.record_count(), records))
    return written


async def _append_all(direct: bool, monkeypatch: pytest.MonkeyPatch,
                      native: bool = False) -> Any:
    monkeypatch.setattr(batches_module, "DIRECT_APPEND", direct)
    producer = AIOKafkaProducer(transactional_id="t", max_batch_size=512 * 1024)
    batches = TransactionBatches(producer, native=native)
    assert batches.native is native
    for record in _records():
        batches.append(*record)
    return _written(batches)


async def test_the_direct_append_writes_what_aiokafkas_append_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert batches_module.DIRECT_APPEND  # this aiokafka keeps what it reaches into
    direct = await _append_all(True, monkeypatch)
    public = await _append_all(False, monkeypatch)

    assert direct == public
    per_partition = [where for where, _, _ in direct]
    assert per_partition.count(("out", 0)) >= 2  # full batches rolled over
    assert sum(count for _, count, _ in direct) == len(_records())
    for _, count, records in direct:
        assert [offset for offset, *_ in records] == list(range(count))
    assert direct[-1][2] == [(0, None, b"", ())]  # neither key nor value: an empty value


def _per_partition(written: list[tuple[tuple[str, int], int, list[Record]]],
                   ) -> dict[tuple[str, int], list[Record]]:
    """Each partition's records in send order, without their offsets (which restart at 0
    in every batch)."""
    records: dict[tuple[str, int], list[Record]] = {}
    for where, _, batch in written:
        records.setdefault(where, []).extend((0, *rest) for _, *rest in batch)
    return records


async def test_the_native_batches_write_the_same_records_in_the_same_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert batches_module.NATIVE_BATCHES  # make venv builds the native extension
    native = await _append_all(True, monkeypatch, native=True)
    direct = await _append_all(True, monkeypatch)

    assert _per_partition(native) == _per_partition(direct)
    assert [where for where, _, _ in native].count(("out", 0)) >= 2  # full ones rolled over
    for _, count, records in native:
        assert [offset for offset, *_ in records] == list(range(count))
        assert count == len(records)
    full = [where for where, _, _ in native]
    # Per partition the full batches go first: a partition's last batch is its open one.
    assert full.index(("state", 0)) > full.index(("out", 1))


async def test_outputs_and_state_land_on_the_same_partitions_either_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``append_outputs``: a keyed output where Kafka's partitioner puts its key, a keyless
    one on the task's partition modulo the count; ``append_state``: the prefix before
    each key, a tombstone kept."""
    outputs = [OutputRecord("out", f"run-{n}".encode() if n % 4 else None, b"v%d" % n, "t",
                            None, (("symfonic-tenant", b"acme"),) if n % 2 else ())
               for n in range(200)]
    changes: dict[bytes, bytes | None] = {b"run\x00a": b"1", b"run\x00b": None}
    counts = {"out": 3}

    def partition_for(topic: str, key: bytes | None) -> int:
        return 7 % counts[topic] if key is None else partition_for_key(key, counts[topic])

    written = []
    for native in (True, False):
        batches = TransactionBatches(AIOKafkaProducer(transactional_id="t"), native=native)
        batches.append_outputs(outputs, partition_for, counts, 7)
        batches.append_state("log", 2, b"p:", changes)
        written.append(_per_partition(_written(batches)))
    assert written[0] == written[1]
    for (topic, partition), records in written[0].items():
        if topic == "out":
            assert all(partition == partition_for("out", key) for _, key, _, _ in records)
    assert written[0][("log", 2)] == [(0, b"p:run\x00a", b"1", ()), (0, b"p:run\x00b", None, ())]
