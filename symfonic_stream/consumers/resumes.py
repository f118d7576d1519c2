"""The resume validator and its intake: humans' answers checked against their tickets before
they reach the kernel (contract §7). One process, two engines: the intake appends each answer
to the registrations topic under its ticket id, after the router's registration of it; the
validator reads that topic."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Consumer, Engine, Resources, Wiring, Write
from symfonic_stream.consumers.pauses import tenant_queue_specs
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import (
    HUMAN_QUEUE,
    PAUSE_REGISTRATIONS,
    REGISTERED_ANSWER,
    RESUME_REJECTIONS,
    RESUME_REQUESTS,
    RESUMES,
    REVIEW_TICKETS,
    TENANT_HUMAN_QUEUE,
)
from symfonic_stream.processors.pauses.desk import ReviewDesk
from symfonic_stream.processors.pauses.intake import ResumeIntake
from symfonic_stream.processors.pauses.rules import load_rules
from symfonic_stream.processors.pauses.validator import ResumeValidator

#: The intake's engine: group ``<prefix>-resume-intake``, stateless.
INTAKE = "resume-intake"


def _intake(settings: Settings, names: TopicNames) -> Wiring:
    decode = settings.decode_limits()
    return Wiring(lambda partition: ResumeIntake(names.pause_registrations, decode))


def _validator(settings: Settings, names: TopicNames) -> Wiring:
    """The validator, its review desk (claims, leases, escalations: the routing rules'
    ``escalations``), and the queues it escalates tickets to: named ahead with shared
    queues, a tenant's created on its first escalated ticket with per-tenant queues."""
    rules = load_rules(settings.routing_rules)
    desk = ReviewDesk(names, rules, settings.tenant_queues, settings.review_claim_lease_s,
                      settings.review_claim_max_s)
    escalated = () if settings.tenant_queues else tuple(
        dict.fromkeys(names.human_queue(e.to) for e in rules.escalations))
    return Wiring(
        lambda partition: ResumeValidator(
            names, grace_s=settings.closed_run_grace_s, decode=settings.decode_limits(),
            max_lifetime_s=settings.ticket_max_lifetime_s,
            punctuate_budget_s=settings.punctuate_budget_ms / 1000,
            max_answer_bytes=settings.max_answer_bytes, desk=desk,
        ),
        family_topics=escalated,
        on_demand_topic=tenant_queue_specs(settings, names, rules) if rules.escalations
        else None,
    )


RESUMES_CONSUMER = Consumer(
    name="resumes",
    title="the resume validator",
    summary="`<prefix>.resume-requests`, through its intake and `<prefix>.pause-registrations`, "
    "to `<prefix>.resumes` / `<prefix>.resume-rejections`; claims, leases and escalations, "
    "each ticket's review state on `<prefix>.review-tickets`",
    engines=(
        Engine(
            name=INTAKE,
            reads=RESUME_REQUESTS,
            writes=(Write(PAUSE_REGISTRATIONS,
                          "Each answer, keyed by its ticket id, after its registration.",
                          (REGISTERED_ANSWER,)),),
            wire=_intake,
        ),
        Engine(
            name="resumes",
            reads=PAUSE_REGISTRATIONS,
            writes=(
                Write(RESUMES, "Accepted answers, keyed by run id."),
                Write(RESUME_REJECTIONS, "Refused answers, and refused claims, with the "
                      "reason."),
                Write(REVIEW_TICKETS, "Each ticket's review state after each change (a claim, "
                      "a release, a lease run out, an escalation, an answer), a tombstone "
                      "once the ticket is forgotten."),
                Write(HUMAN_QUEUE, "A ticket unanswered past its queue's escalation (the "
                      "routing rules' `escalations`), to its new queue, once."),
                Write(TENANT_HUMAN_QUEUE, "The same, per tenant, when per-tenant queues are "
                      "on."),
            ),
            wire=_validator,
        ),
    ),
    scales_on="resumes",
    metrics_port=9403,
    resources=Resources(cpu="50m", memory="192Mi", memory_limit="384Mi"),
)
