"""The engine's topologies, built from the declarations (``symfonic_stream.consumers``), and
the registry ``symfonic-stream run`` starts them from.

Every consumer of contract §1 and the benchmark's copier is one engine (or two) with a different
:class:`~symfonic_stream.engine.topology.Topology`: where it reads, where it writes, and the
processor each input partition gets. Here a declared :class:`Engine` meets the settings.
"""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers import Consumer, Engine, consumer
from symfonic_stream.consumers.copier import COPIER
from symfonic_stream.consumers.pauses import PAUSES
from symfonic_stream.engine.topology import Topology
from symfonic_stream.models.names import TopicNames
from symfonic_stream.projections.declared import projection


def output_topics(engine: Engine, names: TopicNames, family_topics: tuple[str, ...]
                  ) -> tuple[str, ...]:
    """What ``engine`` writes besides dead letters, in the declared order: a topic's name,
    or for a family the topics its wiring names."""
    found: list[str] = []
    for write in engine.writes:
        found.extend(family_topics if write.topic.family else (write.topic.name(names),))
    return tuple(dict.fromkeys(found))


def build_topology(engine: Engine, settings: Settings) -> Topology:
    """The topology of one declared engine under ``settings``."""
    names = TopicNames(settings.topic_prefix)
    wiring = engine.wire(settings, names)
    return Topology(
        consumer=engine.name,
        group_id=names.group(engine.name),
        source_topic=engine.reads.name(names),
        output_topics=output_topics(engine, names, wiring.family_topics),
        dead_letter_topic=names.dead_letter,
        changelog_topic=names.changelog(engine.name) if engine.stores else None,
        processor_factory=wiring.make,
        on_demand_topic=wiring.on_demand_topic,
    )


def consumer_topologies(declared: Consumer, settings: Settings) -> tuple[Topology, ...]:
    """The topologies of ``run <consumer>``: one per engine, in the declared order."""
    return tuple(build_topology(engine, settings) for engine in declared.engines)


def projector_topology(name: str, settings: Settings) -> Topology:
    """The projector of projection ``name`` (contract §1): the consumer of that name."""
    return consumer_topologies(consumer(projection(name).name), settings)[0]


def router_topology(settings: Settings) -> Topology:
    """The pause router's."""
    return consumer_topologies(PAUSES, settings)[0]


def copier_topology(settings: Settings) -> Topology:
    """The copier's: raw topic → ``<prefix>.copier-output``, group ``<prefix>-copier``."""
    return consumer_topologies(COPIER, settings)[0]


def topologies(name: str, settings: Settings) -> tuple[Topology, ...]:
    """``symfonic-stream run <name>``: the topologies of that consumer's process, from the
    settings (``resumes`` is two: its intake and the validator, one engine each)."""
    return consumer_topologies(consumer(name), settings)
