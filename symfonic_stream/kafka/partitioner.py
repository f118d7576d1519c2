"""Kafka's default partitioner for keyed records, as the Java client computes it.

The Java producer places a keyed record with ``toPositive(murmur2(keyBytes)) % numPartitions``
(``BuiltInPartitioner.partitionForKey``); aiokafka's ``DefaultPartitioner`` does the same
with aiokafka's own ``murmur2``, which is used here. A reader that wants one run's records
computes the partition with this instead of scanning every partition; the engine uses it to
batch a transaction's records per output partition.
"""

from __future__ import annotations

from aiokafka.partitioner import murmur2


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
