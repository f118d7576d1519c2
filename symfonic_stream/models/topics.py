"""Every topic of a deployment, once: its name's template, why it exists, what it carries,
and who outside the project uses it; and the record kinds (AsyncAPI messages) they carry.

Names are never constants in code (contract §1): each is its template under
``SYMFONIC_TOPIC_PREFIX`` (:class:`~symfonic_stream.models.names.TopicNames` reads them from
here), so two deployments with different prefixes share a cluster without touching each
other. Which of them a deployment has follows from the consumers' declarations that name
them (:mod:`symfonic_stream.consumers`, :func:`symfonic_stream.app.topics.required_topics`);
a changelog is not listed here: an engine with state stores has one
(``<prefix>-<engine>-state-changelog``, :meth:`TopicNames.changelog`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.envelope import StreamChunkRecord, StreamEventRecord
from symfonic_stream.models.pauses import (
    ClaimRequest,
    Resume,
    ResumeRejection,
    ResumeRequest,
    ReviewTicket,
    Ticket,
)


class Prefixed(Protocol):
    """What names a deployment's topics: its prefix (a
    :class:`~symfonic_stream.models.names.TopicNames`, which reads its names from here)."""

    @property
    def prefix(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Message:
    """One kind of record on a topic: an AsyncAPI message (``id``) and its wire model (a
    pydantic model, or a union of them such as an envelope's).

    ``model`` ``None``: bytes the project does not give a JSON form (a dead letter keeps
    the original record's bytes; a changelog record is private)."""

    id: str
    model: Any = None


@dataclass(frozen=True, slots=True)
class Outside:
    """Someone outside the project who sends to or receives from a topic (an AsyncAPI
    operation: ``operation`` is its id)."""

    operation: str
    action: Literal["send", "receive"]
    summary: str


@dataclass(frozen=True, slots=True)
class Topic:
    """One topic, or one family of topics (``family``: its writer's wiring says which
    topics of it a deployment has, such as the router's queues from its rules), once."""

    #: The AsyncAPI channel id.
    id: str
    #: Its name: ``{prefix}`` the deployment's (``SYMFONIC_TOPIC_PREFIX``); a family's holds
    #: its other ``{parameters}`` too.
    template: str
    #: One line, printed by ``topics ensure``.
    purpose: str
    #: What a reader of the AsyncAPI document needs to know of it.
    description: str
    messages: tuple[Message, ...]
    internal: bool = False
    #: Compacted (``cleanup.policy=compact``): only each key's latest record is kept.
    compact: bool = False
    family: bool = False
    #: AsyncAPI parameters of a family's ``{parameters}``.
    parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    outside: tuple[Outside, ...] = ()

    def name(self, names: Prefixed, **parameters: str) -> str:
        """Its name under ``names``' prefix; a family's with the ``parameters`` given, each
        other one left as ``{parameter}`` (the AsyncAPI channel's address)."""
        return self.template.format_map(_Parameters(prefix=names.prefix, **parameters))


class _Parameters(dict[str, str]):
    """A template's values; one not given stays a ``{placeholder}``."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


AGENT_EVENT = Message("agentEvent", AgentEvent)
STREAM_EVENTS_RECORD = Message("streamEventsRecord", StreamEventRecord)
STREAM_CHUNKS_RECORD = Message("streamChunksRecord", StreamChunkRecord)
TICKET = Message("ticket", Ticket)
TICKET_REGISTRATION = Message("ticketRegistration", Ticket)
REGISTERED_ANSWER = Message("registeredAnswer", ResumeRequest)
RESUME_REQUEST = Message("resumeRequest", ResumeRequest)
CLAIM_REQUEST = Message("claimRequest", ClaimRequest)
RESUME = Message("resume", Resume)
RESUME_REJECTION = Message("resumeRejection", ResumeRejection)
REVIEW_TICKET = Message("reviewTicket", ReviewTicket)
DEAD_LETTER_MESSAGE = Message("deadLetter")
#: A changelog's record (every changelog carries this one kind).
STATE_CHANGE = Message("stateChange")

_QUEUE = {
    "description": "The queue a routing rule chose (`default` unless the rules file names "
    "another). `expired` is reserved for tickets already past expires_at.",
    "examples": ["default"],
}

AGENT_EVENTS = Topic(
    "agentEvents", "{prefix}.agent-events", "raw AgentEvents from the kernel",
    "Raw AgentEvents from the kernel, keyed by run id: every record of a run lives in one "
    "partition.",
    (AGENT_EVENT,),
    outside=(Outside("kernelPublishAgentEvents", "send",
                     "The kernel publishes each run's events, keyed by run id."),),
)
STREAM_EVENTS = Topic(
    "streamEvents", "{prefix}.stream-events", "typed projection output",
    "The typed projection. Read with isolation_level=read_committed to see each record "
    "exactly once.",
    (STREAM_EVENTS_RECORD,),
    outside=(Outside("clientsReadStreamEvents", "receive",
                     "Applications follow typed streams (read_committed)."),),
)
STREAM_CHUNKS = Topic(
    "streamChunks", "{prefix}.stream-chunks", "chunk projection output",
    "The chunk projection (text-only consumers). Read with isolation_level=read_committed.",
    (STREAM_CHUNKS_RECORD,),
    outside=(Outside("clientsReadStreamChunks", "receive",
                     "Text-only applications follow chunk streams (read_committed)."),),
)
HUMAN_QUEUE = Topic(
    "humanQueue", "{prefix}.human.{queue}", "human-review queue (routing rules)",
    "A human-review queue: one ticket per pause, routed by the rules file, keyed by run id.",
    (TICKET,),
    family=True,
    parameters={"queue": _QUEUE},
    outside=(Outside("reviewToolsReadTickets", "receive",
                     "Human-review tools take tickets from their queue."),),
)
TENANT_HUMAN_QUEUE = Topic(
    "tenantHumanQueue", "{prefix}.human.{tenant}.{queue}",
    "human-review queue of a tenant (routing rules)",
    "A tenant's human-review queue, used when per-tenant queues are on "
    "(SYMFONIC_TENANT_QUEUES): one tenant's tickets never reach another's queue.",
    (TICKET,),
    family=True,
    parameters={"tenant": {"description": "The event's scope.tenant."}, "queue": _QUEUE},
    outside=(Outside("reviewToolsReadTenantTickets", "receive",
                     "Human-review tools take a tenant's tickets (per-tenant queues)."),),
)
EXPIRED_TICKETS = Topic(
    "expiredTickets", "{prefix}.human.expired", "tickets already expired when routed",
    "Tickets already past expires_at when routed, kept out of the live queues (per tenant, "
    "`<prefix>.human.<tenant>.expired` when per-tenant queues are on).",
    (TICKET,),
    family=True,
)
RESUME_REQUESTS = Topic(
    "resumeRequests", "{prefix}.resume-requests", "answers from human-review tools",
    "Answers and claims from human-review tools (and from the gateway, on its reviewers' "
    "behalf), with any key: the resume validator's intake appends each one to the "
    "registrations topic under its ticket id. Nothing here is ever taken for a ticket "
    "registration, whatever its headers.",
    (RESUME_REQUEST, CLAIM_REQUEST),
    outside=(Outside("reviewToolsSendAnswers", "send",
                     "Human-review tools answer (or claim) a ticket with its token, keyed by "
                     "ticket id."),),
)
PAUSE_REGISTRATIONS = Topic(
    "pauseRegistrations", "{prefix}.pause-registrations",
    "ticket registrations and answers, for the resume validator",
    "Internal, written only by the pause router (ticket registrations) and the validator's "
    "intake (answers), keyed by ticket id: each ticket's registration precedes every answer "
    "to it on one partition. Reviewers may not write it.",
    (TICKET_REGISTRATION, REGISTERED_ANSWER),
    internal=True,
)
RESUMES = Topic(
    "resumes", "{prefix}.resumes", "validated resumes for the kernel",
    "Validated answers the kernel resumes runs with, keyed by run id.",
    (RESUME,),
    outside=(Outside("kernelReadResumes", "receive",
                     "The kernel resumes paused runs with accepted answers."),),
)
RESUME_REJECTIONS = Topic(
    "resumeRejections", "{prefix}.resume-rejections", "rejected resume requests",
    "Refused answers, with the reason, keyed by ticket id.",
    (RESUME_REJECTION,),
    outside=(Outside("reviewToolsReadRejections", "receive",
                     "Human-review tools learn why an answer was refused."),),
)
REVIEW_TICKETS = Topic(
    "reviewTickets", "{prefix}.review-tickets",
    "each open ticket's review state: claim, escalation, history (the console's)",
    "Each open ticket's review state (its queue, claim, escalation, answer and history), "
    "written by the resume validator after each change, keyed by [tenant, ticket id], a "
    "tombstone once it forgets the ticket; the gateway's review console reads it. It holds "
    "the tickets' tokens: only the validator writes it and only the gateway reads it.",
    (REVIEW_TICKET,),
    internal=True,
    compact=True,
)
#: Every engine writes here (the engine's, not a declaration's: no engine names it).
DEAD_LETTER = Topic(
    "deadLetter", "{prefix}.dead-letter", "records no consumer could process",
    "Every record a consumer could not process: never dropped silently, never blocking the "
    "consumer.",
    (DEAD_LETTER_MESSAGE,),
    outside=(Outside("operatorsReadDeadLetters", "receive",
                     "Operators inspect, fix and replay dead letters."),),
)
COPIER_OUTPUT = Topic(
    "copierOutput", "{prefix}.copier-output", "copier (benchmark) output",
    "The raw topic copied unchanged by the copier, the benchmark baseline.",
    (AGENT_EVENT,),
    internal=True,
)

#: In the order ``topics ensure`` creates them and the AsyncAPI document lists them.
TOPICS: tuple[Topic, ...] = (
    AGENT_EVENTS, STREAM_EVENTS, STREAM_CHUNKS, DEAD_LETTER, RESUME_REQUESTS,
    PAUSE_REGISTRATIONS, RESUMES, RESUME_REJECTIONS, REVIEW_TICKETS, HUMAN_QUEUE,
    TENANT_HUMAN_QUEUE,
    EXPIRED_TICKETS, COPIER_OUTPUT,
)
