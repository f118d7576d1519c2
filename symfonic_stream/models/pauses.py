"""Human-review records (contract §7): tickets, answers, resumes and rejections."""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from symfonic_stream.models.trace import Traced

#: A ticket id is an ``interrupt_id``: the same bound (models/agent_event.py).
MAX_TICKET_ID = 256
#: The most bytes a resume request (its answer, ticket id, token and responder) may have
#: for the validator to read it (``SYMFONIC_MAX_ANSWER_BYTES``): checking an answer against
#: a hostile schema costs CPU and memory that grow with the answer (docs/pauses.md).
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024
#: A claim's holder is compared with answers' ``responder``: a name, not a document.
MAX_RESPONDER = 256
MAX_REQUEST_ID = 128


class Ticket(Traced):
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
    request_id: str | None = Field(None, max_length=MAX_REQUEST_ID, description=(
        "The sender's name for this request, copied into the ticket's review history with "
        "the verdict (the gateway waits for it there)."))


class ClaimRequest(BaseModel):
    """A reviewer claims a ticket for the lease (``claim``) or gives it back (``release``),
    on ``<prefix>.resume-requests`` like an answer; the validator decides, in the order the
    requests reach it (docs/pauses.md, "Claims")."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    action: Literal["claim", "release"]
    ticket_id: str = Field(min_length=1, max_length=MAX_TICKET_ID)
    token: str
    responder: str = Field(min_length=1, max_length=MAX_RESPONDER, description=(
        "Who claims: the holder of the lease, compared with each later answer's responder."))
    tenant: str | None = None
    request_id: str | None = Field(None, max_length=MAX_REQUEST_ID)


class Resume(Traced):
    """An accepted answer, on ``<prefix>.resumes`` keyed by run id (the kernel reads it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    run_id: str
    tool_call_id: str | None
    interrupt_id: str
    answer: Any
    responder: str | None
    answered_at: float
    tenant: str | None = Field(None, description=(
        "The run's tenant (its ticket's, the owner of the run id: contract §9), also the "
        "`symfonic-tenant` header. A kernel takes a resume only when it is its run's."))
    request_id: str | None = Field(None, description=(
        "The answering request's `request_id`, as it sent it."))


class RejectionReason(enum.StrEnum):
    UNKNOWN_TICKET = "unknown_ticket"
    BAD_TOKEN = "bad_token"
    EXPIRED = "expired"
    ALREADY_ANSWERED = "already_answered"
    #: Another reviewer holds the ticket's claim, and its lease has not run out.
    CLAIMED = "claimed"
    INVALID_ANSWER = "invalid_answer"


class ResumeRejection(BaseModel):
    """A refused answer, on ``<prefix>.resume-rejections`` keyed by ticket id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket_id: str
    reason: RejectionReason
    detail: str
    responder: str | None
    rejected_at: float
    tenant: str | None = Field(None, description=(
        "The ticket's tenant when the request showed it may know the ticket (its token "
        "matched), also the `symfonic-tenant` header; else null."))
    request_id: str | None = Field(None, description=(
        "The refused request's `request_id`, as it sent it."))


class ReviewClaim(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    by: str
    until: float


class ReviewEscalation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    from_queue: str
    to_queue: str
    at: float


class ReviewAnswered(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    by: str | None
    at: float
    digest: str = Field(description="SHA-256 of the accepted answer as sorted-key JSON: a "
                                    "replay of the same answer is told from another.")


class ReviewEntry(BaseModel):
    """One step of a ticket's review history."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: float
    event: Literal["routed", "claimed", "claim_refused", "released", "lease_expired",
                   "escalated", "answered", "answer_refused"]
    by: str | None = None
    request: str | None = None
    reason: str | None = None
    detail: str | None = None


class ReviewTicket(BaseModel):
    """A ticket's review state, on the compacted ``<prefix>.review-tickets`` keyed by
    ``["<tenant>", "<ticket id>"]``, written by the resume validator in the transaction of
    each change; a tombstone when the validator forgets the ticket."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket: Ticket = Field(description="As routed (its `queue` the current one).")
    claim: ReviewClaim | None
    escalated: ReviewEscalation | None
    answered: ReviewAnswered | None
    history: list[ReviewEntry] = Field(description="The latest steps, oldest first.")
