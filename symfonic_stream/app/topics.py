"""Which topics a deployment needs: every topic its consumers' declarations read or write.

``topics ensure`` creates this list, the engine checks co-partitioning against it, and the
pause router's queue topics (from the routing rules, through its wiring) are part of it
rather than created on their own. The chart's KafkaTopics are generated from
:func:`declared_topics` (``symfonic_stream.tools.chart``).
"""

from __future__ import annotations

from dataclasses import dataclass

from symfonic_stream.config import Settings
from symfonic_stream.consumers import Consumer, deployed, engines, registered, topics_of
from symfonic_stream.kafka.specs import TopicSpec, topic_spec
from symfonic_stream.models.names import TopicNames


@dataclass(frozen=True, slots=True)
class Needed:
    """A topic a deployment needs whatever its settings; ``owner``: the consumer whose
    engine keeps its state there (a changelog), else ``None``."""

    name: str
    purpose: str
    compact: bool = False
    owner: str | None = None


def chosen_consumers(include_copier: bool = False) -> tuple[Consumer, ...]:
    """The deployment's consumers, and with ``include_copier`` those no deployment has."""
    return registered() if include_copier else deployed()


def declared_topics(names: TopicNames, consumers: tuple[Consumer, ...]) -> list[Needed]:
    """The declared topics ``consumers`` read or write (and the dead letters), then their
    changelogs: all but the families' topics."""
    found = [Needed(t.name(names), t.purpose, compact=t.compact)
             for t in topics_of(consumers) if not t.family]
    found += [Needed(names.changelog(e.name), f"state changelog of the {names.group(e.name)} "
                     "group", compact=True, owner=c.name)
              for c in consumers for e in c.engines if e.stores]
    return found


def required_topics(settings: Settings, *, include_copier: bool = False) -> list[TopicSpec]:
    """Every topic of the deployment, in creation order: :func:`declared_topics`, then the
    families' topics their writers' wiring names (raises the rules module's ``RulesError``
    for a bad rules file).

    All topics get ``SYMFONIC_PARTITIONS`` partitions, so a changelog is always
    co-partitioned with the topic its engine reads (state of input partition p lives in
    changelog partition p) and scaling out is uniform. Changelogs, and the topics declared
    compacted (review-tickets), are compacted: only the latest state of each key survives.
    """
    names = TopicNames(settings.topic_prefix)
    consumers = chosen_consumers(include_copier)
    topics = [topic_spec(settings, t.name, t.purpose, compact=t.compact)
              for t in declared_topics(names, consumers)]
    for engine in engines(consumers):
        family = next((w.topic for w in engine.writes if w.topic.family), None)
        if family is not None:
            topics += [topic_spec(settings, name, family.purpose)
                       for name in engine.wire(settings, names).family_topics]
    unique: dict[str, TopicSpec] = {}
    for spec in topics:
        unique.setdefault(spec.name, spec)
    return list(unique.values())
