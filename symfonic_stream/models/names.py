"""Topic and consumer-group names, all derived from ``SYMFONIC_TOPIC_PREFIX``.

Names are never constants in code (contract §1): everything here is computed from the prefix,
so two deployments with different prefixes share a cluster without touching each other.
Which consumers and groups there are is declared in :mod:`symfonic_stream.consumers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The two projections of the raw stream (contract §3, §4).
ProjectionName = Literal["typed", "chunks"]


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The topics and groups of one deployment."""

    prefix: str = "symfonic"

    @property
    def agent_events(self) -> str:
        return f"{self.prefix}.agent-events"

    @property
    def stream_events(self) -> str:
        return f"{self.prefix}.stream-events"

    @property
    def stream_chunks(self) -> str:
        return f"{self.prefix}.stream-chunks"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead-letter"

    @property
    def resume_requests(self) -> str:
        return f"{self.prefix}.resume-requests"

    @property
    def pause_registrations(self) -> str:
        """Where the router registers each ticket and the validator's intake appends each
        answer after it; only those two may write it (contract §7)."""
        return f"{self.prefix}.pause-registrations"

    @property
    def resumes(self) -> str:
        return f"{self.prefix}.resumes"

    @property
    def resume_rejections(self) -> str:
        return f"{self.prefix}.resume-rejections"

    @property
    def review_tickets(self) -> str:
        """Each open ticket's review state (claim, escalation, history), compacted: written
        by the resume validator, read by the gateway's review console."""
        return f"{self.prefix}.review-tickets"

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
            return f"{self.prefix}.human.{queue}"
        return f"{self.prefix}.human.{tenant}.{queue}"

    def tenant_queues_prefix(self, tenant: str) -> str:
        """Every queue topic of ``tenant`` starts with this, and no other topic does."""
        return f"{self.prefix}.human.{tenant}."

    @property
    def copier_output(self) -> str:
        """Where the copier (the benchmark baseline) copies the raw topic to."""
        return f"{self.prefix}.copier-output"

    def group(self, consumer: str) -> str:
        """The consumer group of one consumer: ``symfonic-typed``, ``symfonic-chunks``, …"""
        return f"{self.prefix}-{consumer}"

    def changelog(self, consumer: str) -> str:
        """The compacted state changelog of one consumer group (Kafka Streams' naming)."""
        return f"{self.group(consumer)}-state-changelog"
