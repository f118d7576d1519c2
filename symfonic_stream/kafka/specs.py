"""A topic as the project wants it: name, partitions, replication, configs.

Which topics a deployment needs is the application's business
(:mod:`symfonic_stream.app.topics`); this module only describes one topic, so the Kafka
layer knows nothing of the project's domain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from symfonic_stream.config import Settings


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic as the project wants it."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    #: Why the topic exists (printed by ``topics ensure``).
    purpose: str = ""

    @property
    def cleanup_policy(self) -> str:
        return self.configs.get("cleanup.policy", "delete")


#: A record batch's own bytes (headers, key, framing) beyond the largest value.
_BATCH_HEADROOM_BYTES = 65_536


def topic_spec(settings: Settings, name: str, purpose: str, *, compact: bool = False) -> TopicSpec:
    """A topic as the project creates it: the configured partitions, replication and ISR,
    and room for the largest record the project may write to it (a compacted changelog's
    largest state record; elsewhere a dead letter's value and headers, or an output)."""
    largest = (settings.max_state_record_bytes if compact else
               max(2 * settings.max_record_bytes, settings.max_output_bytes))
    return TopicSpec(
        name=name,
        partitions=settings.partitions,
        replication_factor=settings.replication_factor,
        configs={
            "min.insync.replicas": str(settings.min_insync_replicas),
            "cleanup.policy": "compact" if compact else "delete",
            "max.message.bytes": str(largest + _BATCH_HEADROOM_BYTES),
        },
        purpose=purpose,
    )
