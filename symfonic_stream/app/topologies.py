"""Every consumer's topology, and the registry ``symfonic-stream run`` starts them from.

The four consumers of SPEC §1 and the benchmark's copier are one engine with a different
:class:`~symfonic_stream.engine.topology.Topology`: where it reads, where it writes, and the
processor each input partition gets. This is where the settings meet the processors.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from symfonic_stream.config import Settings
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.specs import TopicSpec, topic_spec
from symfonic_stream.models.names import INTAKE, ProjectionName, TopicNames
from symfonic_stream.processors.copier import Copier
from symfonic_stream.processors.ordering.guard import GuardLimits
from symfonic_stream.processors.pauses.desk import ReviewDesk
from symfonic_stream.processors.pauses.intake import ResumeIntake
from symfonic_stream.processors.pauses.router import PauseRouter, queue_topics
from symfonic_stream.processors.pauses.rules import NAME_PART, RoutingRules, load_rules
from symfonic_stream.processors.pauses.validator import ResumeValidator
from symfonic_stream.processors.projector import PROJECTIONS, ProjectorProcessor

#: The copier (benchmark baseline) consumer's name; its output is created only on request.
COPIER = "copier"


def guard_limits(settings: Settings) -> GuardLimits:
    return GuardLimits(
        gap_timeout_s=settings.gap_timeout_s,
        run_buffer_max=settings.run_buffer_max,
        closed_run_grace_s=settings.closed_run_grace_s,
        run_idle_timeout_s=settings.run_idle_timeout_s,
        buffer_max_bytes=settings.buffer_max_bytes,
        max_output_bytes=settings.max_output_bytes,
        max_state_bytes=settings.max_state_record_bytes,
        punctuate_budget_s=settings.punctuate_budget_ms / 1000,
    )


def projector_topology(projection: ProjectionName, settings: Settings) -> Topology:
    """The typed or chunk projector consumer (SPEC §1)."""
    names = TopicNames(settings.topic_prefix)
    output = names.stream_events if projection == "typed" else names.stream_chunks
    limits = guard_limits(settings)
    project = PROJECTIONS[projection]

    def make(partition: int) -> ProjectorProcessor:
        return ProjectorProcessor(project, output, limits, decode=settings.decode_limits())

    return Topology(
        consumer=projection,
        group_id=names.group(projection),
        source_topic=names.agent_events,
        output_topics=(output,),
        dead_letter_topic=names.dead_letter,
        changelog_topic=names.changelog(projection),
        processor_factory=make,
    )


def tenant_queue_specs(settings: Settings, rules: RoutingRules
                       ) -> Callable[[str], TopicSpec | None] | None:
    """With per-tenant queues, the spec of a tenant's queue topic a writer may create on
    first use (the router's routed tickets, the validator's escalated ones)."""
    if not settings.tenant_queues:
        return None
    names = TopicNames(settings.topic_prefix)
    tenant_queue = re.compile(
        re.escape(names.human_queue("")) + NAME_PART + r"\.(" + "|".join(
            re.escape(queue) for queue in [*rules.queues(), "expired"]
        ) + r")"
    )

    def tenant_queue_spec(topic: str) -> TopicSpec | None:
        # Only ``<prefix>.human.<tenant>.<queue>`` of a queue the rules name: a new tenant's
        # first ticket creates its queue; nothing else is ever created on the fly.
        if not tenant_queue.fullmatch(topic):
            return None
        return topic_spec(settings, topic, "human-review queue of a tenant (created on use)")

    return tenant_queue_spec


def router_topology(settings: Settings, rules: RoutingRules | None = None) -> Topology:
    """The pause router consumer (group ``<prefix>-pauses``)."""
    names = TopicNames(settings.topic_prefix)
    rules = rules if rules is not None else load_rules(settings.routing_rules)

    def make(partition: int) -> PauseRouter:
        return PauseRouter(
            names,
            rules,
            tenant_queues=settings.tenant_queues,
            grace_s=settings.closed_run_grace_s,
            max_lifetime_s=settings.ticket_max_lifetime_s,
            punctuate_budget_s=settings.punctuate_budget_ms / 1000,
            decode=settings.decode_limits(),
        )

    return Topology(
        consumer="pauses",
        group_id=names.group("pauses"),
        source_topic=names.agent_events,
        output_topics=(*queue_topics(names, rules, settings.tenant_queues),
                       names.pause_registrations),
        dead_letter_topic=names.dead_letter,
        changelog_topic=names.changelog("pauses"),
        processor_factory=make,
        on_demand_topic=tenant_queue_specs(settings, rules),
    )


def intake_topology(settings: Settings) -> Topology:
    """The resume validator's intake (group ``<prefix>-resume-intake``): resume-requests
    → pause-registrations, keyed by ticket id."""
    names = TopicNames(settings.topic_prefix)

    def make(partition: int) -> ResumeIntake:
        return ResumeIntake(names.pause_registrations, settings.decode_limits())

    return Topology(
        consumer=INTAKE,
        group_id=names.group(INTAKE),
        source_topic=names.resume_requests,
        output_topics=(names.pause_registrations,),
        dead_letter_topic=names.dead_letter,
        changelog_topic=None,
        processor_factory=make,
    )


def validator_topology(settings: Settings, rules: RoutingRules | None = None) -> Topology:
    """The resume validator (group ``<prefix>-resumes``): pause-registrations → resumes
    and rejections, each ticket's review state (review-tickets), and the tickets it
    escalates to their new queue (the routing rules' ``escalations``)."""
    names = TopicNames(settings.topic_prefix)
    rules = rules if rules is not None else load_rules(settings.routing_rules)
    desk = ReviewDesk(names, rules, settings.tenant_queues, settings.review_claim_lease_s)

    def make(partition: int) -> ResumeValidator:
        return ResumeValidator(
            names, grace_s=settings.closed_run_grace_s, decode=settings.decode_limits(),
            max_lifetime_s=settings.ticket_max_lifetime_s,
            punctuate_budget_s=settings.punctuate_budget_ms / 1000,
            max_answer_bytes=settings.max_answer_bytes, desk=desk,
        )

    escalated = [names.human_queue(e.to) for e in rules.escalations]
    return Topology(
        consumer="resumes",
        group_id=names.group("resumes"),
        source_topic=names.pause_registrations,
        output_topics=(names.resumes, names.resume_rejections, names.review_tickets,
                       *([] if settings.tenant_queues else escalated)),
        dead_letter_topic=names.dead_letter,
        changelog_topic=names.changelog("resumes"),
        processor_factory=make,
        on_demand_topic=tenant_queue_specs(settings, rules) if rules.escalations else None,
    )


def copier_topology(settings: Settings) -> Topology:
    """The copier consumer: raw topic → ``<prefix>.copier-output``, group ``<prefix>-copier``."""
    names = TopicNames(settings.topic_prefix)
    output = names.copier_output

    def make(partition: int) -> Copier:
        return Copier(output)

    return Topology(
        consumer=COPIER,
        group_id=names.group(COPIER),
        source_topic=names.agent_events,
        output_topics=(output,),
        dead_letter_topic=names.dead_letter,
        changelog_topic=None,
        processor_factory=make,
    )


#: ``symfonic-stream run <name>``: the topologies of each consumer's process, from the
#: settings (``resumes`` is two: its intake and the validator, one engine each).
TOPOLOGIES: dict[str, Callable[[Settings], tuple[Topology, ...]]] = {
    "typed": lambda settings: (projector_topology("typed", settings),),
    "chunks": lambda settings: (projector_topology("chunks", settings),),
    "pauses": lambda settings: (router_topology(settings),),
    "resumes": lambda settings: (intake_topology(settings), validator_topology(settings)),
    COPIER: lambda settings: (copier_topology(settings),),
}
