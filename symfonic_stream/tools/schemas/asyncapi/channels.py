"""``channels``: every topic, by its name under one prefix, with the messages it carries."""

from __future__ import annotations

from typing import Any

from symfonic_stream.models.names import CONSUMERS, TopicNames
from symfonic_stream.tools.schemas.asyncapi.objects import KAFKA_BINDING_VERSION, ref


def build_channels(names: TopicNames) -> dict[str, Any]:
    def channel(
        address: str, messages: str | tuple[str, ...], description: str, **extra: Any
    ) -> dict[str, Any]:
        listed = (messages,) if isinstance(messages, str) else messages
        body: dict[str, Any] = {
            "address": address,
            "description": description,
            "messages": {name: ref(f"#/components/messages/{name}") for name in listed},
        }
        body.update(extra)
        return body

    queue = {
        "description": "The queue a routing rule chose (`default` unless the rules file names "
        "another). `expired` is reserved for tickets already past expires_at.",
        "examples": ["default"],
    }
    channels: dict[str, Any] = {
        "agentEvents": channel(
            names.agent_events,
            "agentEvent",
            "Raw AgentEvents from the kernel, keyed by run id: every record of a run lives "
            "in one partition.",
        ),
        "streamEvents": channel(
            names.stream_events,
            "streamEventsRecord",
            "The typed projection. Read with isolation_level=read_committed to see each "
            "record exactly once.",
        ),
        "streamChunks": channel(
            names.stream_chunks,
            "streamChunksRecord",
            "The chunk projection (text-only consumers). Read with isolation_level=read_committed.",
        ),
        "humanQueue": channel(
            names.human_queue("{queue}"),
            "ticket",
            "A human-review queue: one ticket per pause, routed by the rules file, keyed by "
            "run id.",
            parameters={"queue": queue},
        ),
        "tenantHumanQueue": channel(
            names.human_queue("{queue}", tenant="{tenant}"),
            "ticket",
            "A tenant's human-review queue, used when per-tenant queues are on "
            "(SYMFONIC_TENANT_QUEUES): one tenant's tickets never reach another's queue.",
            parameters={
                "tenant": {"description": "The event's scope.tenant."},
                "queue": queue,
            },
        ),
        "expiredTickets": channel(
            names.expired_queue,
            "ticket",
            "Tickets already past expires_at when routed, kept out of the live queues "
            "(per tenant, `<prefix>.human.<tenant>.expired` when per-tenant queues are on).",
        ),
        "resumeRequests": channel(
            names.resume_requests,
            "resumeRequest",
            "Answers from human-review tools, with any key: the resume validator's intake "
            "appends each one to the registrations topic under its ticket id. Nothing here "
            "is ever taken for a ticket registration, whatever its headers.",
        ),
        "pauseRegistrations": channel(
            names.pause_registrations,
            ("ticketRegistration", "registeredAnswer"),
            "Internal, written only by the pause router (ticket registrations) and the "
            "validator's intake (answers), keyed by ticket id: each ticket's registration "
            "precedes every answer to it on one partition. Reviewers may not write it.",
            tags=[ref("#/components/tags/internal")],
        ),
        "resumes": channel(
            names.resumes,
            "resume",
            "Validated answers the kernel resumes runs with, keyed by run id.",
        ),
        "resumeRejections": channel(
            names.resume_rejections,
            "resumeRejection",
            "Refused answers, with the reason, keyed by ticket id.",
        ),
        "reviewTickets": channel(
            names.review_tickets,
            "reviewTicket",
            "Each open ticket's review state (its queue, claim, escalation, answer and "
            "history), written by the resume validator after each change, compacted, keyed "
            "by [tenant, ticket id]; the gateway's review console reads it. It holds the "
            "tickets' tokens: only the validator writes it and only the gateway reads it.",
            tags=[ref("#/components/tags/internal")],
            bindings={
                "kafka": {
                    "topicConfiguration": {"cleanup.policy": ["compact"]},
                    "bindingVersion": KAFKA_BINDING_VERSION,
                }
            },
        ),
        "deadLetter": channel(
            names.dead_letter,
            "deadLetter",
            "Every record a consumer could not process: never dropped silently, never "
            "blocking the consumer.",
        ),
    }
    for consumer in CONSUMERS:
        channels[f"{consumer}StateChangelog"] = channel(
            names.changelog(consumer),
            "stateChange",
            f"Internal: the compacted state changelog of group {names.group(consumer)}, "
            f"co-partitioned with its input topic.",
            tags=[ref("#/components/tags/internal")],
            bindings={
                "kafka": {
                    "topicConfiguration": {"cleanup.policy": ["compact"]},
                    "bindingVersion": KAFKA_BINDING_VERSION,
                }
            },
        )
    return channels
