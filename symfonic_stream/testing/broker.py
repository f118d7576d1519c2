"""The test kit's Kafka: topics of partitions in memory, the groups' committed offsets, and
the two clients the engine and the SDKs talk to, without a network.

Only what a transaction *committed* is ever in a topic: :class:`MemoryProducer` writes a
transaction's records all at once at commit step 7, commit, so every reader here reads as
``isolation_level=read_committed`` does. Records are placed by the engine's own code: the
producer is a :class:`~symfonic_stream.kafka.producer.ProcessProducer` (its partitioner,
Kafka's default, for keyed records; a keyless one on its input partition) whose batches are
the engine's :class:`~symfonic_stream.kafka.producer.TransactionBatches` with their one
primitive, ``append``, writing here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition

from symfonic_stream.kafka.group import GroupMetadata
from symfonic_stream.kafka.producer import (
    PartitionWrites,
    ProcessProducer,
    Steps,
    TransactionBatches,
)

__all__ = ["MemoryBroker", "Record"]

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a topic, as a Kafka consumer reads it: where it is, its key, value and
    headers, and its timestamp (milliseconds, the driver's clock when it was written)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int = 0

    def json(self) -> Any:
        """The value parsed as JSON (``None`` for a tombstone)."""
        return None if self.value is None else orjson.loads(self.value)

    def header(self, name: str) -> bytes | None:
        """The value of header ``name`` (the last one of that name), or ``None``."""
        found = [value for key, value in self.headers if key == name]
        return found[-1] if found else None


class MemoryBroker:
    """Topics in memory: each a list of partitions, each a list of records; a topic comes
    into being with ``partitions`` partitions the first time it is named."""

    def __init__(self, partitions: int = 1) -> None:
        if partitions < 1:
            raise ValueError(f"partitions: at least 1, got {partitions}")
        self.partitions = partitions
        self._logs: dict[str, list[list[Record]]] = {}
        #: Each topic's records in the order they were written, whatever their partition.
        self._written: dict[str, list[Record]] = {}
        self._committed: dict[tuple[str, str, int], int] = {}
        #: The clock records are stamped with (milliseconds), set by the driver.
        self.now_ms = 0

    def partition_count(self, topic: str) -> int:
        return len(self._log(topic))

    def _log(self, topic: str) -> list[list[Record]]:
        log = self._logs.get(topic)
        if log is None:
            log = self._logs[topic] = [[] for _ in range(self.partitions)]
            self._written[topic] = []
        return log

    def topics(self) -> list[str]:
        """Every topic written to, in the order first named."""
        return [topic for topic, written in self._written.items() if written]

    def append(self, records: Iterable[tuple[str, int, bytes | None, bytes | None, Headers]]
               ) -> list[Record]:
        """``(topic, partition, key, value, headers)`` each at its partition's end, at once."""
        written = []
        for topic, partition, key, value, headers in records:
            log = self._log(topic)[partition]
            record = Record(topic, partition, len(log), key, value, tuple(headers), self.now_ms)
            log.append(record)
            self._written[topic].append(record)
            written.append(record)
        return written

    def read(self, topic: str, partition: int, offset: int = 0) -> list[Record]:
        """The records of ``topic``'s ``partition`` from ``offset`` on."""
        return self._log(topic)[partition][offset:]

    def records(self, topic: str) -> list[Record]:
        """Every record of ``topic``, in the order written (each partition's in its order)."""
        self._log(topic)
        return list(self._written[topic])

    def end(self, topic: str, partition: int) -> int:
        return len(self._log(topic)[partition])

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        """``group``'s committed offset of the partition (None: never committed)."""
        return self._committed.get((group, topic, partition))

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self._committed[(group, tp.topic, tp.partition)] = offset


class _Appended(TransactionBatches):
    """The engine's record batches of one transaction, each record appended here (its one
    primitive) instead of to aiokafka's builders: the order and placement are the engine's."""

    def __init__(self) -> None:
        super().__init__(cast(AIOKafkaProducer, None), native=False)
        self.records: list[tuple[str, int, bytes | None, bytes | None, Headers]] = []

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes]]) -> None:
        self.records.append((topic, partition, key, value, tuple(headers)))


class MemoryProducer(ProcessProducer):
    """A process's transactional producer over a :class:`MemoryBroker`: steps 3-7 of the
    commit protocol, the records and the group's offsets written together at the commit."""

    def __init__(self, broker: MemoryBroker, transactional_id: str) -> None:
        # (No Kafka client: what the engine asks of one is answered by the broker.)
        self.transactional_id = transactional_id
        self._broker = broker
        self._closed = False
        self._partitions: dict[tuple[str, bytes], int] = {}
        self._partition_counts: dict[str, int] = {}
        self.native_batches = False

    async def start(self) -> None:
        """Nothing to connect."""

    @property
    def usable(self) -> bool:
        return not self._closed

    async def learn_partitions(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self._partition_counts[topic] = self._broker.partition_count(topic)

    async def transact(
        self,
        writes: Sequence[PartitionWrites],
        offsets: Mapping[TopicPartition, int] | None,
        group_id: str,
        member: GroupMetadata | None = None,
        steps: Steps | None = None,
    ) -> dict[int, int]:
        batches = _Appended()  # 3. begin
        await self.learn_partitions({r.topic for each in writes for r in each.outputs})
        await self.learn_partitions({each.dead_letter_topic for each in writes
                                     if each.dead_letters and each.dead_letter_topic})
        for each in writes:  # 4. produce
            batches.append_writes(each, self.partition_for, self._partition_counts)
        written = self._broker.append(batches.records)  # 5. (acknowledged) and 7. commit
        if offsets:  # 6. send offsets
            self._broker.commit(group_id, offsets)
        places = {each.changelog_place[:2] for each in writes if each.changelog
                  and each.changelog_place is not None}
        return {record.partition: record.offset + 1 for record in written
                if (record.topic, record.partition) in places}

    async def close(self) -> None:
        self._closed = True


class MemoryConsumer:
    """What the SDKs ask of an ``AIOKafkaConsumer``, over a :class:`MemoryBroker`: assigned
    partitions or subscribed topics, positions, ``getmany``, a finite ``async for`` (it
    ends at the end of what is written) and a group's ``commit``."""

    def __init__(self, broker: MemoryBroker, *topics: str, group_id: str | None = None) -> None:
        self._broker = broker
        self._group = group_id
        self._positions: dict[TopicPartition, int] = {}
        for topic in topics:
            self.assign([TopicPartition(topic, p) for p in range(broker.partition_count(topic))])

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            committed = (self._broker.committed(self._group, tp.topic, tp.partition)
                         if self._group is not None else None)
            self._positions[tp] = committed or 0

    async def start(self) -> None:
        """Nothing to connect."""

    async def stop(self) -> None:
        """Nothing to close."""

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self.seek_to_end_now(*partitions)

    def seek_to_end_now(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._positions[tp] = self._broker.end(tp.topic, tp.partition)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._positions[tp] = 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._broker.end(tp.topic, tp.partition) for tp in partitions}

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        found: dict[TopicPartition, list[Record]] = {}
        for tp in partitions or tuple(self._positions):
            records = self._broker.read(tp.topic, tp.partition, self._positions[tp])
            if records:
                found[tp] = records
                self._positions[tp] = records[-1].offset + 1
        await asyncio.sleep(0)  # (a poll that found nothing lets the caller's loop go on)
        return found

    def __aiter__(self) -> AsyncIterator[Record]:
        return self._each()

    async def _each(self) -> AsyncIterator[Record]:
        while True:
            batch = await self.getmany()
            if not batch:
                return
            for records in batch.values():
                for record in records:
                    yield record

    async def commit(self) -> None:
        """The positions, as ``group_id``'s committed offsets."""
        if self._group is not None:
            self._broker.commit(self._group, self._positions)
