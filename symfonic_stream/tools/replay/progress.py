"""A replay's progress: what it committed, kept in ``<target>.replay-progress``.

The topic is compacted and has one partition; every key starts with the replay id, so
several replays into the same target never mix (see
:mod:`symfonic_stream.tools.replay.replay` for why each record exists and when it is
written):

=================================  =================================================
``<id>/plan``                      the offset range of every raw partition (JSON)
``<id>/offset/<p>``                partition p's next offset and running totals (JSON)
``<id>/state/<p>/<run_id>``        the ordering guard's state of one run (its changelog
                                   format); tombstoned when partition p is done
=================================  =================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = [
    "ProgressKeys",
    "ReplayProgress",
    "ReplaySummary",
    "SavedProgress",
    "progress_topic",
    "read_progress",
]

_POLL_MS = 500


def progress_topic(to_topic: str) -> str:
    return f"{to_topic}.replay-progress"


@dataclass(slots=True)
class ReplayProgress:
    """One raw partition's range and how far the replay has committed."""

    start: int
    end: int
    next_offset: int
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "start": self.start,
                "end": self.end,
                "next_offset": self.next_offset,
                "records_in": self.records_in,
                "records_out": self.records_out,
                "dead_letters": self.dead_letters,
                "by_type": self.by_type,
                "counts": self.counts,
            }
        )

    @classmethod
    def decode(cls, value: bytes, start: int, end: int) -> ReplayProgress:
        """Saved progress; the range always comes from the plan."""
        saved = orjson.loads(value)
        return cls(
            start=start,
            end=end,
            next_offset=int(saved["next_offset"]),
            records_in=int(saved.get("records_in", 0)),
            records_out=int(saved.get("records_out", 0)),
            dead_letters=int(saved.get("dead_letters", 0)),
            by_type=dict(saved.get("by_type", {})),
            counts=dict(saved.get("counts", {})),
        )


@dataclass(slots=True)
class ReplaySummary:
    """A replay's outcome (and, while it runs, its progress), over every raw partition."""

    replay_id: str
    source_topic: str
    to_topic: str
    partitions: dict[int, ReplayProgress]
    resumed: bool = False
    already_complete: bool = False

    def total(self, name: str) -> int:
        return sum(int(getattr(p, name)) for p in self.partitions.values())

    def by_type(self) -> dict[str, int]:
        merged: dict[str, int] = {}
        for progress in self.partitions.values():
            for key, n in progress.by_type.items():
                merged[key] = merged.get(key, 0) + n
        return dict(sorted(merged.items()))

    def counts(self) -> dict[str, int]:
        merged: dict[str, int] = {}
        for progress in self.partitions.values():
            for key, n in progress.counts.items():
                merged[key] = merged.get(key, 0) + n
        return dict(sorted(merged.items()))

    @property
    def offsets_total(self) -> int:
        return sum(p.end - p.start for p in self.partitions.values())

    @property
    def offsets_done(self) -> int:
        return sum(min(p.next_offset, p.end) - p.start for p in self.partitions.values())


@dataclass(frozen=True, slots=True)
class ProgressKeys:
    """The keys of one replay in the progress topic."""

    replay_id: str

    def _key(self, *parts: object) -> bytes:
        return "/".join([self.replay_id, *map(str, parts)]).encode()

    @property
    def prefix(self) -> bytes:
        return self._key("")

    @property
    def plan(self) -> bytes:
        return self._key("plan")

    def offset(self, partition: int) -> bytes:
        return self._key("offset", partition)

    @property
    def state_prefix(self) -> bytes:
        return self._key("state", "")

    def state(self, partition: int, run_id: bytes) -> bytes:
        return self._key("state", partition) + b"/" + run_id


@dataclass(slots=True)
class SavedProgress:
    """What a replay committed before: its plan, offsets and guard states."""

    plan: dict[str, Any] | None = None
    offsets: dict[int, bytes] = field(default_factory=dict)
    #: (partition, run id) → the run's guard state.
    states: dict[tuple[int, bytes], bytes] = field(default_factory=dict)


async def read_progress(
    consumer: AIOKafkaConsumer, topic: str, keys: ProgressKeys
) -> SavedProgress:
    """Read the progress topic to its end (read_committed) and keep this replay's keys."""
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    end = (await consumer.end_offsets([tp]))[tp]
    await consumer.seek_to_beginning(tp)
    latest: dict[bytes, bytes | None] = {}
    while await consumer.position(tp) < end:
        batch = await consumer.getmany(tp, timeout_ms=_POLL_MS, max_records=10_000)
        for record in batch.get(tp, ()):
            if record.offset < end and record.key and record.key.startswith(keys.prefix):
                latest[record.key] = record.value  # the last write wins, as compaction keeps
    saved = SavedProgress()
    plan = latest.pop(keys.plan, None)
    saved.plan = orjson.loads(plan) if plan else None
    for key, value in latest.items():
        if value is None:
            continue  # a tombstone: the state of a finished partition
        if key.startswith(keys.state_prefix):
            partition, _, run_id = key[len(keys.state_prefix) :].partition(b"/")
            saved.states[(int(partition), run_id)] = value
        else:
            saved.offsets[int(key.rsplit(b"/", 1)[1])] = value
    return saved
