"""``components.messages`` of the pause path: tickets, their registrations, answers and
claims, verdicts and each ticket's review state (see :mod:`.messages`, which lists them all
with the others)."""

from __future__ import annotations

from typing import Any

from symfonic_stream.models.headers import ANSWER_MARK as ANSWER_MARK_BYTES
from symfonic_stream.models.headers import (
    KIND_HEADER,
    OUTCOME_HEADER,
    QUEUE_HEADER,
    RECORD_TYPE_HEADER,
    TENANT_HEADER,
)
from symfonic_stream.models.headers import TICKET_MARK as TICKET_MARK_BYTES
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import RejectionReason
from symfonic_stream.tools.schemas.asyncapi.objects import RUN_KEY, headers_schema, key_binding, ref

_TICKET_KEY = "The ticket id (the pause's interrupt_id), UTF-8; equal to the payload's ticket_id."

TICKET_MARK = TICKET_MARK_BYTES.decode()
ANSWER_MARK = ANSWER_MARK_BYTES.decode()
ACCEPTED_OUTCOME = "accepted"


def _ticket_example(names: TopicNames) -> dict[str, Any]:
    return {
        "ticket_id": "int-1",
        "queue": "default",
        "kind": "ask_user",
        "name": "ask_user",
        "questions": ["Proceed with the refund?"],
        "payload": {"questions": ["Proceed with the refund?"]},
        "token": "tok-9f2c",
        "run_id": "run-1",
        "root_run_id": None,
        "session_id": "sess-1",
        "thread_id": None,
        "tool_call_id": "call-1",
        "tenant": None,
        "principal": None,
        "expires_at": 1767229200.0,
        "resumable": True,
        "routed_at": 1767225602.0,
        "source": f"{names.agent_events}/0/17",
    }


def _ticket(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "Ticket",
        "title": "Human-review ticket",
        "summary": "One pause waiting for a human answer; written once per interrupt_id.",
        "contentType": "application/json",
        "headers": headers_schema(
            {
                QUEUE_HEADER: {
                    "type": "string",
                    "description": "The topic name after `<prefix>.human.`: `<queue>`, "
                    "`<tenant>.<queue>` or `expired`.",
                },
                KIND_HEADER: {"type": "string", "enum": ["ask_user", "interrupt"]},
            }
        ),
        "bindings": key_binding(RUN_KEY),
        "examples": [
            {
                "name": "ask_user",
                "headers": {QUEUE_HEADER: "default", KIND_HEADER: "ask_user"},
                "payload": _ticket_example(names),
            }
        ],
    }


def _ticket_registration(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "TicketRegistration",
        "title": "Ticket registration",
        "summary": "Internal: the pause router registers each ticket with the validator.",
        "description": (
            "The ticket again, written by the pause router to the registrations topic in "
            "the same transaction as the queue record and keyed by ticket id, so it "
            "shares a partition with every answer to it and precedes them all."
        ),
        "contentType": "application/json",
        "headers": headers_schema(
            {RECORD_TYPE_HEADER: {"type": "string", "const": TICKET_MARK}},
        ),
        "bindings": key_binding(_TICKET_KEY),
        "tags": [ref("#/components/tags/internal")],
        "examples": [
            {
                "name": "registration",
                "headers": {RECORD_TYPE_HEADER: TICKET_MARK},
                "payload": _ticket_example(names),
            }
        ],
    }


def _registered_answer(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "RegisteredAnswer",
        "title": "Answer, appended after its ticket",
        "summary": "Internal: the validator's intake appends each answer here.",
        "description": (
            "A resume request's value, unchanged, keyed by its ticket id; the client's "
            "headers are not copied, but for its trace context, checked."
        ),
        "contentType": "application/json",
        "headers": headers_schema(
            {RECORD_TYPE_HEADER: {"type": "string", "const": ANSWER_MARK}},
        ),
        "bindings": key_binding(_TICKET_KEY),
        "tags": [ref("#/components/tags/internal")],
    }


def _resume_request(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "ResumeRequest",
        "title": "Answer to a ticket",
        "summary": "A human-review tool's answer; the first valid answer wins.",
        "contentType": "application/json",
        "bindings": key_binding(_TICKET_KEY),
        "examples": [
            {
                "name": "answer",
                "payload": {
                    "ticket_id": "int-1",
                    "token": "tok-9f2c",
                    "answer": {"approved": True},
                    "responder": "alice@example.com",
                },
            }
        ],
    }


def _verdict_headers(outcome: dict[str, Any]) -> dict[str, Any]:
    """A verdict's headers: its outcome, always; its run's tenant (contract §9) when the
    verdict may name it (a resume of a run with a tenant; a rejection whose request had
    the ticket's token)."""
    return {"type": "object", "required": [OUTCOME_HEADER], "properties": {
        OUTCOME_HEADER: outcome,
        TENANT_HEADER: {"type": "string", "description": "The run's tenant, as the "
                        "verdict's `tenant` field. A kernel takes a resume only when it is "
                        "its run's."},
    }}


def _resume(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "Resume",
        "title": "Accepted answer",
        "summary": "A validated answer the kernel resumes the run with.",
        "contentType": "application/json",
        "headers": _verdict_headers({"type": "string", "const": ACCEPTED_OUTCOME}),
        "bindings": key_binding(RUN_KEY),
        "examples": [
            {
                "name": "resume",
                "headers": {OUTCOME_HEADER: ACCEPTED_OUTCOME, TENANT_HEADER: "acme"},
                "payload": {
                    "ticket_id": "int-1",
                    "run_id": "run-1",
                    "tool_call_id": "call-1",
                    "interrupt_id": "int-1",
                    "answer": {"approved": True},
                    "responder": "alice@example.com",
                    "answered_at": 1767225700.0,
                    "tenant": "acme",
                    "request_id": "c2f1",
                },
            }
        ],
    }


def _resume_rejection(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "ResumeRejection",
        "title": "Rejected answer",
        "summary": "An answer the resume validator refused, with the reason.",
        "contentType": "application/json",
        "headers": _verdict_headers({
            "type": "string",
            "enum": [reason.value for reason in RejectionReason],
            "description": "The rejection reason.",
        }),
        "bindings": key_binding(_TICKET_KEY),
        "examples": [
            {
                "name": "bad_token",
                "headers": {OUTCOME_HEADER: RejectionReason.BAD_TOKEN.value},
                "payload": {
                    "ticket_id": "int-1",
                    "reason": "bad_token",
                    "detail": "token does not match the ticket",
                    "responder": "mallory@example.com",
                    "rejected_at": 1767225701.0,
                    "tenant": None,
                    "request_id": None,
                },
            }
        ],
    }


def _claim_request(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "ClaimRequest",
        "title": "Claim of a ticket, or its release",
        "summary": "A reviewer claims a ticket for the lease, or gives it back; the validator "
        "decides, in the order the requests reach it.",
        "description": (
            "On the same topic as answers, with the ticket's token, and through the same "
            "intake: of two racing claims exactly one wins; while a lease holds, another "
            "responder's answer is refused `claimed`. The gateway sends them on its "
            "reviewers' behalf (docs/pauses.md, \"Claims and escalation\")."
        ),
        "contentType": "application/json",
        "bindings": key_binding(_TICKET_KEY),
        "examples": [
            {
                "name": "claim",
                "payload": {
                    "action": "claim",
                    "ticket_id": "int-1",
                    "token": "tok-9f2c",
                    "responder": "alice@example.com",
                    "request_id": "9b1d0c3e",
                },
            }
        ],
    }


def _review_ticket(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "ReviewTicket",
        "title": "Review state of a ticket",
        "summary": "A ticket's queue, claim, escalation, answer and history; null: forgotten.",
        "contentType": "application/json",
        "bindings": key_binding("`[tenant, ticket id]` as JSON."),
        "tags": [ref("#/components/tags/internal")],
    }


#: The pause path's messages, by id.
PAUSE_MESSAGES = {
    "ticket": _ticket,
    "ticketRegistration": _ticket_registration,
    "registeredAnswer": _registered_answer,
    "resumeRequest": _resume_request,
    "claimRequest": _claim_request,
    "resume": _resume,
    "resumeRejection": _resume_rejection,
    "reviewTicket": _review_ticket,
}
