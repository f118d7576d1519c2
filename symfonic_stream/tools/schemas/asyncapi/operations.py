"""``operations``: who sends and receives on each channel, outside the project and inside it."""

from __future__ import annotations

from typing import Any

from symfonic_stream.models.names import INTAKE, TopicNames
from symfonic_stream.tools.schemas.asyncapi.objects import group_binding, ref


def build_operations(names: TopicNames, channels: dict[str, Any]) -> dict[str, Any]:
    operations: dict[str, Any] = {}

    def operation(
        op_id: str,
        action: str,
        channel_id: str,
        summary: str,
        *,
        group: str | None = None,
        tag: str,
        messages: tuple[str, ...] | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "action": action,
            "channel": ref(f"#/channels/{channel_id}"),
            "summary": summary,
            "messages": [
                ref(f"#/channels/{channel_id}/messages/{message}")
                for message in (messages or tuple(channels[channel_id]["messages"]))
            ],
            "tags": [ref(f"#/components/tags/{tag}")],
        }
        if group is not None:
            body["bindings"] = group_binding(group)
        operations[op_id] = body

    # Outside the project: who feeds it and who reads it.
    operation(
        "kernelPublishAgentEvents",
        "send",
        "agentEvents",
        "The kernel publishes each run's events, keyed by run id.",
        tag="external",
    )
    operation(
        "clientsReadStreamEvents",
        "receive",
        "streamEvents",
        "Applications follow typed streams (read_committed).",
        tag="external",
    )
    operation(
        "clientsReadStreamChunks",
        "receive",
        "streamChunks",
        "Text-only applications follow chunk streams (read_committed).",
        tag="external",
    )
    operation(
        "reviewToolsReadTickets",
        "receive",
        "humanQueue",
        "Human-review tools take tickets from their queue.",
        tag="external",
    )
    operation(
        "reviewToolsReadTenantTickets",
        "receive",
        "tenantHumanQueue",
        "Human-review tools take a tenant's tickets (per-tenant queues).",
        tag="external",
    )
    operation(
        "reviewToolsSendAnswers",
        "send",
        "resumeRequests",
        "Human-review tools answer a ticket with its token, keyed by ticket id.",
        tag="external",
        messages=("resumeRequest",),
    )
    operation(
        "kernelReadResumes",
        "receive",
        "resumes",
        "The kernel resumes paused runs with accepted answers.",
        tag="external",
    )
    operation(
        "reviewToolsReadRejections",
        "receive",
        "resumeRejections",
        "Human-review tools learn why an answer was refused.",
        tag="external",
    )
    operation(
        "gatewayReadReviewTickets",
        "receive",
        "reviewTickets",
        "The gateway's review console and AG-UI resume read every ticket's review state.",
        tag="external",
    )
    operation(
        "gatewaySendAnswers",
        "send",
        "resumeRequests",
        "The gateway answers and claims on a reviewer's behalf, with the ticket's token.",
        tag="external",
        messages=("resumeRequest",),
    )
    operation(
        "operatorsReadDeadLetters",
        "receive",
        "deadLetter",
        "Operators inspect, fix and replay dead letters.",
        tag="external",
    )

    # The four consumers: receive with their group, produce in the same transaction.
    Output = tuple[str, str, str, tuple[str, ...] | None]
    consumers: dict[str, tuple[str, list[Output]]] = {
        "typed": (
            "agentEvents",
            [("SendStreamEvents", "streamEvents", "Typed events, end and gap records.", None)],
        ),
        "chunks": (
            "agentEvents",
            [("SendStreamChunks", "streamChunks", "Chunks, end and gap records.", None)],
        ),
        "pauses": (
            "agentEvents",
            [
                ("SendTickets", "humanQueue", "One ticket per interrupt_id.", None),
                ("SendTenantTickets", "tenantHumanQueue", "Per-tenant queues, when on.", None),
                ("SendExpiredTickets", "expiredTickets", "Tickets expired when routed.", None),
                (
                    "SendTicketRegistrations",
                    "pauseRegistrations",
                    "Each ticket again, registered with the resume validator.",
                    ("ticketRegistration",),
                ),
            ],
        ),
        "resumeIntake": (
            "resumeRequests",
            [
                (
                    "SendAnswers",
                    "pauseRegistrations",
                    "Each answer, keyed by its ticket id, after its registration.",
                    ("registeredAnswer",),
                ),
            ],
        ),
        "resumes": (
            "pauseRegistrations",
            [
                ("SendResumes", "resumes", "Accepted answers, keyed by run id.", None),
                ("SendRejections", "resumeRejections", "Refused answers, with the reason.", None),
                ("SendReviewTickets", "reviewTickets",
                 "Each ticket's review state after each change.", None),
                ("SendEscalatedTickets", "humanQueue",
                 "A ticket unanswered past its queue's escalation, to its new queue, once.",
                 None),
            ],
        ),
    }
    for consumer, (source, outputs) in consumers.items():
        # The intake is the resumes process's first stage: its own group, the same tag.
        intake = consumer == "resumeIntake"
        group = names.group(INTAKE if intake else consumer)
        tag = "resumes" if intake else consumer
        operation(
            f"{consumer}Receive",
            "receive",
            source,
            f"The {consumer} consumer reads its input in group {group}.",
            group=group,
            tag=tag,
        )
        for suffix, channel_id, summary, messages in outputs:
            operation(
                f"{consumer}{suffix}",
                "send",
                channel_id,
                f"{summary} Committed in one transaction with the input offsets.",
                tag=tag,
                messages=messages,
            )
        operation(
            f"{consumer}SendDeadLetters",
            "send",
            "deadLetter",
            "Records it cannot process, in the same transaction.",
            tag=tag,
        )
        if intake:
            continue  # stateless: no changelog
        operation(
            f"{consumer}WriteState",
            "send",
            f"{consumer}StateChangelog",
            "State changes, in the same transaction as the output.",
            tag=tag,
        )
        operation(
            f"{consumer}RestoreState",
            "receive",
            f"{consumer}StateChangelog",
            "Replays the changelog partitions of its assigned input partitions before consuming.",
            tag=tag,
        )
    return operations
