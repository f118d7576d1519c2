"""What a replay did: per raw partition, its range and its running totals, summed up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from symfonic_stream.engine.transaction import Progress

__all__ = ["ReplayProgress", "ReplaySummary"]


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

    @classmethod
    def of(cls, start: int, end: int, progress: Progress | None) -> ReplayProgress:
        if progress is None:
            return cls(start, end, start)
        return cls(start, end, progress.next_offset, progress.records_in, progress.records_out,
                   progress.dead_letters, dict(progress.by_type), dict(progress.counts))


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
        return _merged(p.by_type for p in self.partitions.values())

    def counts(self) -> dict[str, int]:
        return _merged(p.counts for p in self.partitions.values())

    @property
    def offsets_total(self) -> int:
        return sum(p.end - p.start for p in self.partitions.values())

    @property
    def offsets_done(self) -> int:
        return sum(min(p.next_offset, p.end) - p.start for p in self.partitions.values())


def _merged(parts: Iterable[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for part in parts:
        for key, n in part.items():
            merged[key] = merged.get(key, 0) + n
    return dict(sorted(merged.items()))
