"""Topic and consumer-group names, all derived from ``SYMFONIC_TOPIC_PREFIX``.

Names are never constants in code (contract §1): each topic's is its template, declared
with the topic (:mod:`symfonic_stream.models.topics`), under the prefix; a group's and a
changelog's follow from the consumer's name. Which consumers and groups there are is
declared in :mod:`symfonic_stream.consumers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from symfonic_stream.models import topics


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The topics and groups of one deployment, by what they are for."""

    prefix: str = "symfonic"

    @property
    def agent_events(self) -> str:
        return topics.AGENT_EVENTS.name(self)

    @property
    def stream_events(self) -> str:
        return topics.STREAM_EVENTS.name(self)

    @property
    def stream_chunks(self) -> str:
        return topics.STREAM_CHUNKS.name(self)

    @property
    def dead_letter(self) -> str:
        return topics.DEAD_LETTER.name(self)

    @property
    def resume_requests(self) -> str:
        return topics.RESUME_REQUESTS.name(self)

    @property
    def pause_registrations(self) -> str:
        """Where the router registers each ticket and the validator's intake appends each
        answer after it; only those two may write it (contract §7)."""
        return topics.PAUSE_REGISTRATIONS.name(self)

    @property
    def resumes(self) -> str:
        return topics.RESUMES.name(self)

    @property
    def resume_rejections(self) -> str:
        return topics.RESUME_REJECTIONS.name(self)

    @property
    def review_tickets(self) -> str:
        """Each open ticket's review state (claim, escalation, history), compacted: written
        by the resume validator, read by the gateway's review console."""
        return topics.REVIEW_TICKETS.name(self)

    @property
    def expired_queue(self) -> str:
        return self.expired_queue_of(None)

    def expired_queue_of(self, tenant: str | None) -> str:
        """Tickets already expired when routed: ``<prefix>.human.expired``, per tenant
        ``<prefix>.human.<tenant>.expired``."""
        return self.human_queue("expired", tenant)

    def human_queue(self, queue: str, tenant: str | None = None) -> str:
        """``<prefix>.human.<queue>``, or ``<prefix>.human.<tenant>.<queue>`` per tenant.

        Neither part may hold a ``.`` (:mod:`symfonic_stream.processors.pauses.rules`
        checks), so the mapping is injective: no two (tenant, queue) share a topic, and
        the prefix ``<prefix>.human.<tenant>.`` is exactly one tenant's queues (its ACL).
        """
        if tenant is None:
            return topics.HUMAN_QUEUE.name(self, queue=queue)
        return topics.TENANT_HUMAN_QUEUE.name(self, queue=queue, tenant=tenant)

    def tenant_queues_prefix(self, tenant: str) -> str:
        """Every queue topic of ``tenant`` starts with this, and no other topic does."""
        return self.human_queue("", tenant)

    @property
    def copier_output(self) -> str:
        """Where the copier (the benchmark baseline) copies the raw topic to."""
        return topics.COPIER_OUTPUT.name(self)

    def group(self, consumer: str) -> str:
        """The consumer group of one consumer: ``symfonic-typed``, ``symfonic-chunks``, …"""
        return f"{self.prefix}-{consumer}"

    def changelog(self, consumer: str) -> str:
        """The compacted state changelog of one consumer group (Kafka Streams' naming)."""
        return f"{self.group(consumer)}-state-changelog"
