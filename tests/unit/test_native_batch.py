"""The native record batches (``native/src/batch.rs``): the bytes aiokafka's own builder
writes for the same records, the partitions Kafka's default partitioner picks, and a clear
error for what is not a record.

No broker: each batch is built as aiokafka's sender builds it, then read back.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from symfonic_stream import _native
from symfonic_stream.engine.processor import OutputRecord
from symfonic_stream.kafka.partitioner import partition_for_key

TIMESTAMP_MS = 1_700_000_000_123


def _outputs() -> list[OutputRecord]:
    """Keyed and keyless, with and without headers, a null value, neither key nor value."""
    records = []
    for n in range(300):
        key = f"run-{n % 7}".encode() if n % 5 else None
        value = (b"v%d" % n) * (n % 3) if n % 11 else None
        headers = (("symfonic-tenant", b"acme"), ("empty", b"")) if n % 2 else ()
        records.append(OutputRecord("out", key, value, "t", None, headers))
    return records


def _aiokafkas(records: list[OutputRecord], producer_state: tuple[int, int, int]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, is_transactional=1, producer_id=-1,
                                        producer_epoch=-1, base_sequence=0, batch_size=1 << 30)
    for offset, record in enumerate(records):
        value = b"" if record.key is None and record.value is None else record.value
        builder.append(offset, TIMESTAMP_MS, record.key, value, list(record.headers))
    builder.set_producer_state(*producer_state)
    return bytes(builder.build())


def test_each_batch_is_byte_for_byte_what_aiokafkas_builder_writes() -> None:
    records = _outputs()
    batches = _native.RecordBatches(1 << 20, TIMESTAMP_MS)
    batches.add_outputs(records, {"out": 4}, 1)
    assert len(batches) == len(records)
    taken = batches.take()
    assert sorted(partition for _, partition, _ in taken) == [0, 1, 2, 3]
    for topic, partition, batch in taken:
        assert topic == "out"
        batch._set_producer_state(42, 3, 17)
        data = batch._build()
        mine = [r for r in records
                if (partition_for_key(r.key, 4) if r.key is not None else 1) == partition]
        assert data == _aiokafkas(mine, (42, 3, 17))
        assert batch.record_count() == len(mine)
        assert batch._build() is data  # a retry resends the same bytes
        read = DefaultRecordBatch(data)
        assert read.validate_crc() and read.is_transactional and read.producer_id == 42


def test_the_partitioner_is_kafkas() -> None:
    rng = random.Random(18)
    keys = [b"", b"a", b"ab", b"abc", "運行-1234".encode()]
    keys += [bytes(rng.randrange(256) for _ in range(rng.randrange(60))) for _ in range(2000)]
    for key in keys:
        for count in (1, 3, 4, 12, 100):
            assert _native.partition_for_key(key, count) == partition_for_key(key, count)
    with pytest.raises(RuntimeError, match="at least 1 partition"):
        _native.partition_for_key(b"k", 0)


def test_a_full_batch_rolls_over_and_offsets_restart() -> None:
    batches = _native.RecordBatches(1000, TIMESTAMP_MS)
    for n in range(100):
        batches.add("t", 0, b"k", b"x" * 50 + str(n).encode(), [])
    batches.add("t", 1, b"big", b"y" * 5000, [])  # alone over the limit: a batch still takes it
    taken = batches.take()
    assert len(batches) == 0 and batches.take() == []
    values = []
    for _, partition, batch in taken:
        read = list(DefaultRecordBatch(batch._build()))
        assert [r.offset for r in read] == list(range(batch.record_count()))
        if partition == 0:
            assert batch.size() <= 1000
            values.extend(r.value for r in read)
    assert values == [b"x" * 50 + str(n).encode() for n in range(100)]
    assert [p for _, p, _ in taken].count(0) > 1
    assert (taken[-1][1], taken[-1][2].record_count()) == (1, 1)


def test_a_batch_takes_nothing_from_aiokafka_once_handed_over() -> None:
    batches = _native.RecordBatches(1000, TIMESTAMP_MS)
    batches.add("t", 0, None, b"v", ())
    [(_, _, batch)] = batches.take()
    assert batch.closed()
    assert batch.append(timestamp=None, key=None, value=b"x", headers=[]) is None
    assert batch.record_count() == 1


@pytest.mark.parametrize(("call", "error"), [
    (lambda b: b.add("t", 0, "str key", b"v", []), TypeError),
    (lambda b: b.add("t", 0, b"k", 3, []), TypeError),
    (lambda b: b.add("t", 0, b"k", b"v", [("h", 3)]), TypeError),
    (lambda b: b.add("t", 0, b"k", b"v", [(b"h", b"v")]), TypeError),
    (lambda b: b.add("t", 0, b"k", b"v", 7), TypeError),
    (lambda b: b.add_outputs([("t", b"k")], {"t": 1}, 0), IndexError),
    (lambda b: b.add_outputs([OutputRecord("t", b"k", b"v", "x")], {}, 0), RuntimeError),
    (lambda b: b.add_outputs([OutputRecord("t", b"k", b"v", "x")], {"t": 0}, 0), RuntimeError),
    (lambda b: b.add_state("t", 0, b"", {"str": b"v"}), TypeError),
])
def test_what_is_not_a_record_is_refused_with_an_error(call: Any, error: type) -> None:
    batches = _native.RecordBatches(1000, TIMESTAMP_MS)
    with pytest.raises(error):
        call(batches)


def test_lengths_at_every_varint_boundary_read_back() -> None:
    """A record's length and its value's length cross 1-, 2- and 3-byte varints."""
    sizes = [0, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 300_000]
    batches = _native.RecordBatches(1 << 24, TIMESTAMP_MS)
    for size in sizes:
        batches.add("t", 0, None, b"x" * size, [])
    [(_, _, batch)] = batches.take()
    read = DefaultRecordBatch(batch._build())
    assert read.validate_crc()
    assert [len(record.value or b"") for record in read] == sizes
