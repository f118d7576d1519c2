"""Human-review records (SPEC §7): tickets, answers, resumes and rejections."""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: A ticket id is an ``interrupt_id``: the same bound (models/agent_event.py).
MAX_TICKET_ID = 256
#: The most bytes a resume request (its answer, ticket id, token and responder) may have
#: for the validator to read it (``SYMFONIC_MAX_ANSWER_BYTES``): checking an answer against
#: a hostile schema costs CPU and memory that grow with the answer (docs/pauses.md).
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024


class Ticket(BaseModel):
    """One pause, routed to a human queue topic; ``ticket_id`` is the ``interrupt_id``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    queue: str
    kind: Literal["ask_user", "interrupt"]
    name: str
    questions: list[Any] | None
    payload: dict[str, Any]
    token: str
    run_id: str
    root_run_id: str | None
    session_id: str | None
    thread_id: str | None
    tool_call_id: str | None
    tenant: str | None
    principal: str | None
    expires_at: float
    resumable: bool
    routed_at: float
    source: str = Field(description="topic/partition/offset of the raw event.")


class ResumeRequest(BaseModel):
    """A human-review tool's answer, on ``<prefix>.resume-requests``."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    ticket_id: str = Field(min_length=1, max_length=MAX_TICKET_ID)
    token: str
    answer: Any
    responder: str | None = None
    tenant: str | None = Field(None, description=(
        "The ticket's tenant (its `tenant` field): two tenants' tickets may share an id. "
        "Absent: the ticket of that id whose token this is."))


class Resume(BaseModel):
    """An accepted answer, on ``<prefix>.resumes`` keyed by run id (the kernel reads it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    run_id: str
    tool_call_id: str | None
    interrupt_id: str
    answer: Any
    responder: str | None
    answered_at: float


class RejectionReason(enum.StrEnum):
    UNKNOWN_TICKET = "unknown_ticket"
    BAD_TOKEN = "bad_token"
    EXPIRED = "expired"
    ALREADY_ANSWERED = "already_answered"
    INVALID_ANSWER = "invalid_answer"


class ResumeRejection(BaseModel):
    """A refused answer, on ``<prefix>.resume-rejections`` keyed by ticket id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    reason: RejectionReason
    detail: str
    responder: str | None
    rejected_at: float
