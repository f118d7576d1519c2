"""A changelog topic and aiokafka consumers of it, in memory, for the unit tests of
symfonic_stream/state/restore.py and kept.py, with a clock of the test's own.

The consumer answers as aiokafka's does where the code under test depends on it: a
position moves past every record and marker a fetch covered (aiokafka's fetcher steps over
commit markers and aborted batches), a partition whose fetch came back empty keeps its
position, ``last_stable_offset`` and ``last_poll_timestamp`` are known once a fetch of the
partition was answered. What a fetch returns is the test's to decide: ``starved`` partitions
come back empty from the restoring consumer's fetches (filled by other partitions), and a
probe's consumer (its client id says ``-probe``) gets a partition's first batch (KIP-74)
unless the partition is ``silent``. A :class:`RecordingBackend` holds a task's values as
a :class:`~symfonic_stream.state.store.MemoryBackend` does, and records what a restore or a
tail gave it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from symfonic_stream.state.store import MemoryBackend

TOPIC = "changelog"


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class Partition:
    """One partition: records and markers (``None``) by offset, from ``start``."""

    entries: list[Record | None] = field(default_factory=list)
    start: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.entries)

    def at(self, offset: int) -> Record | None:
        return self.entries[offset - self.start]


class RecordingBackend(MemoryBackend):
    """A task's committed values in memory, and what it was told: each changelog record
    applied (its key as the store partition passes it on), each offset marked, whether it
    was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[bytes, bytes | None]] = []
        self.marks: list[int] = []
        self.closed = False

    def apply(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))
        super().apply(key, value)

    def mark(self, offset: int, counts: Mapping[bytes, int]) -> None:
        self.marks.append(offset)
        super().mark(offset, counts)

    def close(self) -> None:
        self.closed = True


class Clock:
    """``time.monotonic`` of the modules under test: moved by each poll and by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


class Changelog:
    """The topic, what its fetches return, and the consumers made of it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.partitions: dict[int, Partition] = {}
        #: Partitions the restoring consumer's next fetches return nothing of (others filled
        #: them), and how many of its fetches yet.
        self.starved: dict[int, int] = {}
        #: Partitions whose fetch, alone, gets no response at all (a broker that is slow).
        self.silent: set[int] = set()
        #: The last stable offset of a partition, when not its end (an open transaction).
        self.stable: dict[int, int] = {}
        #: Raised by the next fetch (then cleared).
        self.fail_next: KafkaError | None = None
        #: Raised by a consumer's stop.
        self.fail_stop: KafkaError | None = None
        #: Called after each fetch (a commit landing meanwhile, say).
        self.after_fetch: list[Any] = []
        self.consumers: list[FakeConsumer] = []
        self.fetches = 0

    def write(self, partition: int, *entries: tuple[bytes | None, bytes | None] | None
              ) -> None:
        """Appends records (key, value) and markers (None) to ``partition``."""
        log = self.partitions.setdefault(partition, Partition())
        for entry in entries:
            log.entries.append(None if entry is None else Record(log.end, *entry))

    def lso(self, partition: int) -> int:
        return self.stable.get(partition, self.partitions[partition].end)

    def consumer(self, **kwargs: Any) -> FakeConsumer:
        client_id = str(kwargs.get("client_id", ""))
        assert f"-{TOPIC}-" in client_id, f"client id {client_id!r} does not name the topic"
        assert kwargs.get("isolation_level") == "read_committed", kwargs
        made = FakeConsumer(self, probe="-probe" in client_id)
        self.consumers.append(made)
        return made


class FakeConsumer:
    """The part of ``AIOKafkaConsumer`` that restore.py and kept.py use."""

    def __init__(self, changelog: Changelog, probe: bool = False) -> None:
        self.log = changelog
        self.probe = probe
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.answered: set[TopicPartition] = set()
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True
        if self.log.fail_stop is not None:
            raise self.log.fail_stop

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        self.assigned = list(tps)
        assert all(tp.topic == TOPIC for tp in self.assigned), self.assigned
        self.positions = {tp: self.log.partitions[tp.partition].start for tp in self.assigned}
        self.answered = set()

    def unsubscribe(self) -> None:
        self.assigned, self.positions = [], {}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert tp in self.assigned, f"seek of {tp}, not assigned"
        self.positions[tp] = offset

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.log.partitions[tp.partition].start for tp in tps}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.log.lso(tp.partition) for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.log.lso(tp.partition) if tp in self.answered else None

    def last_poll_timestamp(self, tp: TopicPartition) -> int | None:
        return 1 if tp in self.answered else None

    async def getmany(self, *tps: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """One fetch: the clock moves by the poll's wait."""
        self.log.fetches += 1
        self.log.clock.now += timeout_ms / 1000
        if self.log.fail_next is not None:
            failure, self.log.fail_next = self.log.fail_next, None
            raise failure
        wanted = list(tps) or list(self.assigned)
        out: dict[TopicPartition, list[Record]] = {}
        left = max_records or 1 << 30
        for tp in wanted:
            p = tp.partition
            if self.probe and p in self.log.silent:
                continue
            if not self.probe and self.log.starved.get(p, 0) > 0:
                self.log.starved[p] -= 1
                continue
            self.answered.add(tp)
            got, at = [], self.positions[tp]
            while at < min(self.log.lso(p), self.log.partitions[p].end) and left > 0:
                entry = self.log.partitions[p].at(at)
                at += 1
                if entry is not None:
                    got.append(entry)
                    left -= 1
            self.positions[tp] = at
            if got:
                out[tp] = got
        for then in self.log.after_fetch:
            then()
        return out
