"""The pause router: each ask_user or interrupt to a ticket on a human-review queue, and its
registration with the resume validator (contract §7)."""

from __future__ import annotations

import re
from collections.abc import Callable

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Consumer, Engine, Resources, Wiring, Write
from symfonic_stream.kafka.specs import TopicSpec, topic_spec
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import (
    AGENT_EVENTS,
    EXPIRED_TICKETS,
    HUMAN_QUEUE,
    PAUSE_REGISTRATIONS,
    TENANT_HUMAN_QUEUE,
    TICKET_REGISTRATION,
)
from symfonic_stream.processors.pauses.router import PauseRouter, queue_topics
from symfonic_stream.processors.pauses.rules import NAME_PART, RoutingRules, load_rules


def tenant_queue_specs(settings: Settings, names: TopicNames, rules: RoutingRules
                       ) -> Callable[[str], TopicSpec | None] | None:
    """With per-tenant queues, the spec of a tenant's queue topic a writer may create on
    first use (the router's routed tickets, the validator's escalated ones); else None."""
    if not settings.tenant_queues:
        return None
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


def router_wiring(settings: Settings, names: TopicNames) -> Wiring:
    """The router, its queues from the routing rules file (read here: a bad file stops
    ``run`` and ``topics ensure`` with its message), and with per-tenant queues the
    queues it may create on a tenant's first ticket."""
    rules = load_rules(settings.routing_rules)

    def make(partition: int) -> PauseRouter:
        return PauseRouter(
            names, rules, tenant_queues=settings.tenant_queues,
            grace_s=settings.closed_run_grace_s, max_lifetime_s=settings.ticket_max_lifetime_s,
            idle_timeout_s=settings.run_idle_timeout_s,
            punctuate_budget_s=settings.punctuate_budget_ms / 1000,
            decode=settings.decode_limits(),
        )

    return Wiring(
        make,
        family_topics=tuple(queue_topics(names, rules, settings.tenant_queues)),
        on_demand_topic=tenant_queue_specs(settings, names, rules),
    )


PAUSES = Consumer(
    name="pauses",
    title="the pause router",
    summary="interrupts to `<prefix>.human.<queue>` tickets",
    engines=(
        Engine(
            name="pauses",
            reads=AGENT_EVENTS,
            writes=(
                Write(HUMAN_QUEUE, "One ticket per interrupt_id."),
                Write(TENANT_HUMAN_QUEUE, "Per-tenant queues, when on."),
                Write(EXPIRED_TICKETS, "Tickets expired when routed."),
                Write(PAUSE_REGISTRATIONS,
                      "Each ticket again, registered with the resume validator.",
                      (TICKET_REGISTRATION,)),
            ),
            wire=router_wiring,
        ),
    ),
    scales_on="pauses",
    metrics_port=9402,
    resources=Resources(cpu="50m", memory="192Mi", memory_limit="384Mi"),
)
