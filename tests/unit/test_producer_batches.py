"""A transaction's record batches: appending straight to aiokafka's C record builder
writes what aiokafka's public ``BatchBuilder.append`` writes, batch for batch.

No broker: the batches are built as the sender would build them, then read back.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatch

from symfonic_stream.engine import producer as producer_module
from symfonic_stream.engine.producer import Batches

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


def _written(batches: Batches) -> list[tuple[tuple[str, int], int, list[Record]]]:
    """Every batch in send order: where, its record count, its records read back."""
    written = []
    for where, batch in batches.in_send_order():
        read = DefaultRecordBatch(bytes(batch._build()))
        records = [(r.offset, r.key, r.value, tuple(r.headers)) for r in read]
        written.append((where, batch.record_count(), records))
    return written


async def _append_all(direct: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(producer_module, "DIRECT_APPEND", direct)
    producer = AIOKafkaProducer(transactional_id="t", max_batch_size=512 * 1024)
    batches = Batches(producer)
    for record in _records():
        batches.append(*record)
    return _written(batches)


async def test_the_direct_append_writes_what_aiokafkas_append_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert producer_module.DIRECT_APPEND  # this aiokafka keeps what it reaches into
    direct = await _append_all(True, monkeypatch)
    public = await _append_all(False, monkeypatch)

    assert direct == public
    per_partition = [where for where, _, _ in direct]
    assert per_partition.count(("out", 0)) >= 2  # full batches rolled over
    assert sum(count for _, count, _ in direct) == len(_records())
    for _, count, records in direct:
        assert [offset for offset, *_ in records] == list(range(count))
    assert direct[-1][2] == [(0, None, b"", ())]  # neither key nor value: an empty value
