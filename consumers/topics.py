"""Every topic the consumers read or write, once: its name, why it exists, what it carries,
and who outside the project uses it.

Which of them a deployment has follows from the declarations that name them
(:func:`symfonic_stream.app.topics.required_topics`); a changelog is not listed here: an
engine with state stores has one (``<prefix>-<engine>-state-changelog``).
"""

from __future__ import annotations

from symfonic_stream.consumers.declaration import Message, Outside, Topic
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
    "agentEvents", lambda n: n.agent_events, "raw AgentEvents from the kernel",
    "Raw AgentEvents from the kernel, keyed by run id: every record of a run lives in one "
    "partition.",
    (AGENT_EVENT,),
    outside=(Outside("kernelPublishAgentEvents", "send",
                     "The kernel publishes each run's events, keyed by run id."),),
)
STREAM_EVENTS = Topic(
    "streamEvents", lambda n: n.stream_events, "typed projection output",
    "The typed projection. Read with isolation_level=read_committed to see each record "
    "exactly once.",
    (STREAM_EVENTS_RECORD,),
    outside=(Outside("clientsReadStreamEvents", "receive",
                     "Applications follow typed streams (read_committed)."),),
)
STREAM_CHUNKS = Topic(
    "streamChunks", lambda n: n.stream_chunks, "chunk projection output",
    "The chunk projection (text-only consumers). Read with isolation_level=read_committed.",
    (STREAM_CHUNKS_RECORD,),
    outside=(Outside("clientsReadStreamChunks", "receive",
                     "Text-only applications follow chunk streams (read_committed)."),),
)
HUMAN_QUEUE = Topic(
    "humanQueue", lambda n: n.human_queue("{queue}"), "human-review queue (routing rules)",
    "A human-review queue: one ticket per pause, routed by the rules file, keyed by run id.",
    (TICKET,),
    family=True,
    parameters={"queue": _QUEUE},
    outside=(Outside("reviewToolsReadTickets", "receive",
                     "Human-review tools take tickets from their queue."),),
)
TENANT_HUMAN_QUEUE = Topic(
    "tenantHumanQueue", lambda n: n.human_queue("{queue}", tenant="{tenant}"),
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
    "expiredTickets", lambda n: n.expired_queue, "tickets already expired when routed",
    "Tickets already past expires_at when routed, kept out of the live queues (per tenant, "
    "`<prefix>.human.<tenant>.expired` when per-tenant queues are on).",
    (TICKET,),
    family=True,
)
RESUME_REQUESTS = Topic(
    "resumeRequests", lambda n: n.resume_requests, "answers from human-review tools",
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
    "pauseRegistrations", lambda n: n.pause_registrations,
    "ticket registrations and answers, for the resume validator",
    "Internal, written only by the pause router (ticket registrations) and the validator's "
    "intake (answers), keyed by ticket id: each ticket's registration precedes every answer "
    "to it on one partition. Reviewers may not write it.",
    (TICKET_REGISTRATION, REGISTERED_ANSWER),
    internal=True,
)
RESUMES = Topic(
    "resumes", lambda n: n.resumes, "validated resumes for the kernel",
    "Validated answers the kernel resumes runs with, keyed by run id.",
    (RESUME,),
    outside=(Outside("kernelReadResumes", "receive",
                     "The kernel resumes paused runs with accepted answers."),),
)
RESUME_REJECTIONS = Topic(
    "resumeRejections", lambda n: n.resume_rejections, "rejected resume requests",
    "Refused answers, with the reason, keyed by ticket id.",
    (RESUME_REJECTION,),
    outside=(Outside("reviewToolsReadRejections", "receive",
                     "Human-review tools learn why an answer was refused."),),
)
REVIEW_TICKETS = Topic(
    "reviewTickets", lambda n: n.review_tickets,
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
    "deadLetter", lambda n: n.dead_letter, "records no consumer could process",
    "Every record a consumer could not process: never dropped silently, never blocking the "
    "consumer.",
    (DEAD_LETTER_MESSAGE,),
    outside=(Outside("operatorsReadDeadLetters", "receive",
                     "Operators inspect, fix and replay dead letters."),),
)
COPIER_OUTPUT = Topic(
    "copierOutput", lambda n: n.copier_output, "copier (benchmark) output",
    "The raw topic copied unchanged by the copier, the benchmark baseline.",
    (AGENT_EVENT,),
    internal=True,
)

#: The run streams: every run's envelopes, projected (what the gateway serves a viewer).
RUN_STREAMS: tuple[Topic, ...] = (STREAM_EVENTS, STREAM_CHUNKS)

#: In the order ``topics ensure`` creates them and the AsyncAPI document lists them.
TOPICS: tuple[Topic, ...] = (
    AGENT_EVENTS, STREAM_EVENTS, STREAM_CHUNKS, DEAD_LETTER, RESUME_REQUESTS,
    PAUSE_REGISTRATIONS, RESUMES, RESUME_REJECTIONS, REVIEW_TICKETS, HUMAN_QUEUE,
    TENANT_HUMAN_QUEUE,
    EXPIRED_TICKETS, COPIER_OUTPUT,
)
