"""What a replay covers: a time range, an offset range, or one bound of each.

Pure: the planner asks Kafka for the numbers (last stable offsets, log start offsets, the
offsets of timestamps) and :func:`plan_ranges` turns them into one ``[start, end)`` offset
range per raw partition. Kept apart from the replay's I/O so every combination of bounds
is tested without a broker.

Offsets are written ``N`` (the same offset in every partition) or ``P:N[,P:N...]`` (only
the partitions named are replayed). A range whose bounds name partitions must name the same
ones at both ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The same offset in every partition, or an offset per named partition.
Offsets = int | dict[int, int]


class RangeError(ValueError):
    """The range cannot be replayed as given; the message names the option."""


def parse_offsets(text: str, option: str) -> Offsets:
    """``"1200"`` → 1200; ``"0:10,3:7"`` → ``{0: 10, 3: 7}``."""
    text = text.strip()
    if ":" not in text:
        return _offset(text, option)
    offsets: dict[int, int] = {}
    for item in text.split(","):
        partition_text, sep, offset_text = item.strip().partition(":")
        if not sep:
            raise RangeError(f"{option}: {item!r} is not PARTITION:OFFSET")
        partition = _offset(partition_text, option, what="partition")
        if partition in offsets:
            raise RangeError(f"{option}: partition {partition} is given twice")
        offsets[partition] = _offset(offset_text, option)
    return offsets


def _offset(text: str, option: str, what: str = "offset") -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise RangeError(f"{option}: {what} {text.strip()!r} is not a whole number") from None
    if value < 0:
        raise RangeError(f"{option}: {what} {value} is negative")
    return value


@dataclass(frozen=True)
class ReplayRange:
    """The two bounds of a replay: a start (time or offsets) and an optional end."""

    from_ms: int | None = None
    from_offsets: Offsets | None = None
    to_ms: int | None = None
    to_offsets: Offsets | None = None

    def __post_init__(self) -> None:
        if (self.from_ms is None) == (self.from_offsets is None):
            raise RangeError("give the start of the range: --from TIME or --from-offset OFFSETS")
        if self.to_ms is not None and self.to_offsets is not None:
            raise RangeError("give at most one end: --to TIME or --to-offset OFFSETS")
        if self.from_ms is not None and self.to_ms is not None and self.to_ms <= self.from_ms:
            raise RangeError("the range is empty: --to must be later than --from")
        if (
            isinstance(self.from_offsets, dict)
            and isinstance(self.to_offsets, dict)
            and set(self.from_offsets) != set(self.to_offsets)
        ):
            raise RangeError("--from-offset and --to-offset must name the same partitions")
        for start, end in self._offset_pairs():
            if end < start:
                raise RangeError(
                    f"the range is empty: --to-offset {end} is before --from-offset {start}"
                )

    def _offset_pairs(self) -> list[tuple[int, int]]:
        start, end = self.from_offsets, self.to_offsets
        if start is None or end is None:
            return []
        if isinstance(start, int) and isinstance(end, int):
            return [(start, end)]
        if isinstance(start, dict) and isinstance(end, dict):
            return [(start[p], end[p]) for p in start]
        if isinstance(start, dict):
            return [(s, end) for s in start.values()] if isinstance(end, int) else []
        return [(start, e) for e in end.values()] if isinstance(end, dict) else []

    @property
    def time_only(self) -> bool:
        return self.from_offsets is None and self.to_offsets is None

    def check_partitions(self, partitions: int) -> None:
        """Raise :class:`RangeError` when the offsets name a partition the topic lacks."""
        missing = sorted(p for p in self.named_partitions() or () if p >= partitions)
        if missing:
            raise RangeError(
                f"the raw topic has {partitions} partitions; there is no partition "
                + ", ".join(map(str, missing))
            )

    def named_partitions(self) -> set[int] | None:
        """The partitions the offsets name (None: every partition of the raw topic)."""
        for offsets in (self.from_offsets, self.to_offsets):
            if isinstance(offsets, dict):
                return set(offsets)
        return None

    def identity(self) -> list[Any]:
        """What identifies the range in the replay id (a time range keeps its old form)."""
        if self.time_only:
            return [self.from_ms, self.to_ms]
        return [
            self.from_ms, offsets_json(self.from_offsets), self.to_ms, offsets_json(self.to_offsets)
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "from_ms": self.from_ms,
            "from_offsets": offsets_json(self.from_offsets),
            "to_ms": self.to_ms,
            "to_offsets": offsets_json(self.to_offsets),
        }


def offsets_json(offsets: Offsets | None) -> int | dict[str, int] | None:
    if isinstance(offsets, dict):
        return {str(p): offsets[p] for p in sorted(offsets)}
    return offsets


def _at(offsets: Offsets, partition: int) -> int:
    return offsets if isinstance(offsets, int) else offsets[partition]


def plan_ranges(
    replay_range: ReplayRange,
    partitions: int,
    *,
    firsts: Mapping[int, int],
    ends: Mapping[int, int],
    from_times: Mapping[int, int | None],
    to_times: Mapping[int, int | None],
) -> dict[int, tuple[int, int]]:
    """``[start, end)`` per replayed partition, inside what the partition holds.

    ``firsts``: log start offsets; ``ends``: last stable offsets; ``from_times`` and
    ``to_times``: the first offset at or after each time bound (None: no such record).
    An offset before the log start means "from the oldest record still there"; one past
    the end means "up to the end".
    """
    replay_range.check_partitions(partitions)
    named = replay_range.named_partitions()
    ranges: dict[int, tuple[int, int]] = {}
    for p in sorted(named) if named is not None else range(partitions):
        first, end = firsts[p], ends[p]
        if replay_range.from_offsets is not None:
            start = _at(replay_range.from_offsets, p)
        else:
            at = from_times.get(p)
            start = end if at is None else at
        if replay_range.to_offsets is not None:
            stop = _at(replay_range.to_offsets, p)
        elif replay_range.to_ms is not None:
            at = to_times.get(p)
            stop = end if at is None else at
        else:
            stop = end
        start = min(max(start, first), end)
        ranges[p] = (start, max(start, min(stop, end)))
    return ranges
