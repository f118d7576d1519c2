"""A consumer's topology: where it reads, where it writes, and which processor runs.

The four consumers (typed, chunks, pauses, resumes) and the benchmark's copier are all
one engine with a different :class:`Topology`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from symfonic_stream.engine.records import Processor

if TYPE_CHECKING:
    from symfonic_stream.kafka.specs import TopicSpec


@dataclass(frozen=True, slots=True)
class Topology:
    """Everything the engine needs to know about one consumer.

    ``processor_factory`` builds the processor (and so the state store) of one input
    partition. ``changelog_topic`` is ``None`` for a stateless consumer; otherwise it is
    compacted and co-partitioned with ``source_topic``: state for input partition p lives
    in changelog partition p.
    """

    consumer: str
    group_id: str
    source_topic: str
    output_topics: tuple[str, ...]
    dead_letter_topic: str
    changelog_topic: str | None
    processor_factory: Callable[[int], Processor]
    #: The spec of an output topic the engine creates the first time it is written to
    #: (``None``: the topic must exist already). See :mod:`symfonic_stream.engine.on_demand`.
    on_demand_topic: Callable[[str], TopicSpec | None] | None = None
