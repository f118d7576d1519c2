"""Which topics a deployment needs: the single list every part of the project reuses.

``topics ensure`` creates it, the engine checks co-partitioning against it, and the pause
router's queue topics (from the routing rules) are added here rather than created on their
own.
"""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.kafka.specs import TopicSpec, topic_spec
from symfonic_stream.models.names import CONSUMERS, TopicNames


def pause_queue_topics(settings: Settings) -> list[str]:
    """The human-queue topics the pause router may write to, from SYMFONIC_ROUTING_RULES
    (and SYMFONIC_TENANT_QUEUES): they must exist before it writes, so they are created
    here. Raises the rules module's ``RulesError`` for an unreadable or invalid file."""
    from symfonic_stream.processors.pauses.router import queue_topics
    from symfonic_stream.processors.pauses.rules import load_rules

    return queue_topics(TopicNames(settings.topic_prefix), load_rules(settings.routing_rules),
                        settings.tenant_queues)


def required_topics(settings: Settings, *, include_copier: bool = False) -> list[TopicSpec]:
    """Every topic of the deployment, in creation order.

    All topics get ``SYMFONIC_PARTITIONS`` partitions, so a changelog is always
    co-partitioned with the raw topic (state of input partition p lives in changelog
    partition p) and scaling out is uniform. Changelogs are compacted: only the latest
    state of each run survives.
    """
    names = TopicNames(settings.topic_prefix)
    delete, compact = False, True

    def spec(name: str, compacted: bool, purpose: str) -> TopicSpec:
        return topic_spec(settings, name, purpose, compact=compacted)

    topics = [
        spec(names.agent_events, delete, "raw AgentEvents from the kernel"),
        spec(names.stream_events, delete, "typed projection output"),
        spec(names.stream_chunks, delete, "chunk projection output"),
        spec(names.dead_letter, delete, "records no consumer could process"),
        spec(names.resume_requests, delete, "answers from human-review tools"),
        spec(names.pause_registrations, delete,
             "ticket registrations and answers, for the resume validator"),
        spec(names.resumes, delete, "validated resumes for the kernel"),
        spec(names.resume_rejections, delete, "rejected resume requests"),
        spec(names.review_tickets, compact,
             "each open ticket's review state: claim, escalation, history (the console's)"),
        spec(names.human_queue("default"), delete, "default human-review queue"),
        spec(names.expired_queue, delete, "tickets already expired when routed"),
    ]
    topics.extend(
        spec(names.changelog(consumer), compact, f"state changelog of the {consumer} group")
        for consumer in CONSUMERS
    )
    known = {topic.name for topic in topics}
    topics.extend(
        spec(queue, delete, "human-review queue (routing rules)")
        for queue in pause_queue_topics(settings)
        if queue not in known
    )
    if include_copier:
        topics.append(spec(names.copier_output, delete, "copier (benchmark) output"))
    return topics
