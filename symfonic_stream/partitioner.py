"""Kafka's default partitioner for keyed records, exactly as the Java client computes it.

The Java producer places a keyed record with ``toPositive(murmur2(keyBytes)) % numPartitions``
(``BuiltInPartitioner.partitionForKey``); aiokafka's ``DefaultPartitioner``, librdkafka's
``murmur2_random`` and franz-go's sticky-key partitioner do the same. A reader that wants one
run's records computes the partition with this instead of scanning every partition.

``murmur2`` returns the Java ``int`` (signed 32 bits) so it can be compared with vectors
printed by ``org.apache.kafka.common.utils.Utils.murmur2`` (tests/golden holds some).
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32 bits, Kafka's seed) of ``data`` as a signed Java ``int``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    # Full 4-byte blocks, little-endian, as the Java loop reads them.
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    # The tail: Java's switch falls through from 3 to 1.
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    # Back to Java's signed int.
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: MIN_VALUE maps to 0)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | str, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for ``key``.

    A ``str`` key is encoded as UTF-8, which is how the project keys records by run id.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    data = key.encode() if isinstance(key, str) else key
    return to_positive(murmur2(data)) % num_partitions
