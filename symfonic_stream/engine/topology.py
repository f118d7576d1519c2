"""A consumer's topology: where it reads, where it writes, and which processor runs.

The four consumers (typed, chunks, pauses, resumes), the benchmark's copier and a replay
are all one engine with a different :class:`Topology`. A consumer reads its source as a
member of its group; a replay has no group and reads given offset ranges
(:class:`RangeSource`), keeping its position in its state store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from symfonic_stream.engine.processor import Processor

if TYPE_CHECKING:
    from symfonic_stream.kafka.specs import TopicSpec


@dataclass(frozen=True, slots=True)
class GroupSource:
    """The source read as a member of the topology's consumer group (every consumer): the
    group assigns the partitions, the group's offsets are committed in the transactions,
    and the state of input partition p lives in changelog partition p."""

    #: Whether the group assigns the partitions and is told the offsets.
    grouped: ClassVar[bool] = True

    def changelog_place(self, partition: int) -> tuple[int, bytes]:
        return partition, b""

    def end(self, partition: int) -> int | None:
        """Where the input of ``partition`` ends (None: never)."""
        return None


@dataclass(frozen=True, slots=True)
class RangeSource:
    """A source read without a group (a replay): per partition, the offsets
    ``[start, end)``.

    The engine assigns the partitions itself, resumes each from the position its state
    store holds (or ``start``), tells the processor when ``end`` is reached
    (``end_of_input``) and stops once every partition is done. Changelog records of
    partition p go to ``changelog_partition`` under ``key_prefix(p)``, so many such tasks
    can share one compacted topic. Its tasks keep their totals with their position.
    """

    ranges: Mapping[int, tuple[int, int]]
    changelog_partition: int = 0
    key_prefix: Callable[[int], bytes] = lambda partition: b""
    grouped: ClassVar[bool] = False

    def changelog_place(self, partition: int) -> tuple[int, bytes]:
        return self.changelog_partition, self.key_prefix(partition)

    def start(self, partition: int) -> int:
        return self.ranges[partition][0]

    def end(self, partition: int) -> int | None:
        return self.ranges[partition][1]


#: Where a topology's records come from, and what that decides (one object, asked).
Source = GroupSource | RangeSource


@dataclass(frozen=True, slots=True)
class Topology:
    """Everything the engine needs to know about one consumer.

    ``processor_factory`` builds the processor (and so the state stores) of one input
    partition. ``changelog_topic`` is ``None`` for a stateless consumer; otherwise it is
    compacted and, for a group, co-partitioned with ``source_topic``: the state of input
    partition p lives in changelog partition p. ``dead_letter_topic`` ``None``: dead
    letters are counted, not written (a replay without one).
    """

    consumer: str
    group_id: str
    source_topic: str
    output_topics: tuple[str, ...]
    dead_letter_topic: str | None
    changelog_topic: str | None
    processor_factory: Callable[[int], Processor]
    #: The spec of an output topic the engine creates the first time it is written to
    #: (``None``: the topic must exist already). See :mod:`symfonic_stream.engine.on_demand`.
    on_demand_topic: Callable[[str], TopicSpec | None] | None = None
    #: A group (every consumer), or offset ranges without one (a replay: ``group_id`` then
    #: only names it).
    source: Source = field(default_factory=GroupSource)
    #: The time the processors are given (a replay's clock never moves).
    clock: Callable[[], float] = field(default=time.time)

    def transactional_id(self, partition: int) -> str:
        """The id that fences every earlier owner of ``partition``'s producer."""
        return f"{self.group_id}-{self.source_topic}-{partition}"

    def changelog_place(self, partition: int) -> tuple[int, bytes]:
        """(changelog partition, key prefix) of input partition ``partition``'s state."""
        return self.source.changelog_place(partition)
