"""The partitioner (aiokafka's murmur2) agrees with the Java client and aiokafka's partitioner.

tests/golden/murmur2_java_vectors.json was printed by ``org.apache.kafka.common.utils.Utils``
of kafka-clients 4.1.1 (``murmur2`` and ``toPositive(murmur2(key)) % n``, which is
``BuiltInPartitioner.partitionForKey``); its first entries include the vectors of Kafka's own
``UtilsTest.testMurmur2``. The placement by a real broker is checked in
tests/integration/test_tools_publish_reader.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from symfonic_stream.kafka.partitioner import partition_for_key, to_positive


def murmur2(data: bytes) -> int:
    """The hash the partitioner uses (aiokafka's), as the Java ``int`` the vectors hold."""
    h = aiokafka_murmur2(data) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h

VECTORS = json.loads(
    (Path(__file__).parent.parent / "golden" / "murmur2_java_vectors.json").read_text()
)

# Kafka's UtilsTest.testMurmur2, verbatim values.
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_UTILS_TEST.items())
def test_kafka_utils_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["key_hex"][:16] or "empty")
def test_java_client_vectors(vector: dict[str, object]) -> None:
    key = bytes.fromhex(str(vector["key_hex"]))
    assert murmur2(key) == vector["murmur2"]
    partitions = vector["partitions"]
    assert isinstance(partitions, dict)
    for count, expected in partitions.items():
        assert partition_for_key(key, int(count)) == expected


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


def test_str_keys_are_utf8() -> None:
    assert partition_for_key("運行-1234", 12) == partition_for_key("運行-1234".encode(), 12)


def test_rejects_no_partitions() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_for_key(b"k", 0)


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=200))
def test_same_partition_as_aiokafka_default_partitioner(key: bytes, n: int) -> None:
    partitions = list(range(n))
    assert partition_for_key(key, n) == DefaultPartitioner()(key, partitions, partitions)
