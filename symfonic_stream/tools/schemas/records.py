"""The catalogue of record schemas: which model each file describes, and in which direction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic.json_schema import JsonSchemaMode

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.envelope import (
    EndRecord,
    GapRecord,
    StreamChunkRecord,
    StreamEventRecord,
)
from symfonic_stream.models.pauses import (
    ClaimRequest,
    Resume,
    ResumeRejection,
    ResumeRequest,
    ReviewTicket,
    Ticket,
)
from symfonic_stream.models.stream_event import StreamChunk, StreamEvent


@dataclass(frozen=True, slots=True)
class RecordSchema:
    """One JSON Schema file: which type it is generated from, and in which direction."""

    filename: str
    title: str
    target: Any
    #: ``validation`` for records read from outside, ``serialization`` for records written.
    mode: JsonSchemaMode
    description: str


RECORD_SCHEMAS: tuple[RecordSchema, ...] = (
    RecordSchema(
        "agent-event.json",
        "AgentEvent",
        AgentEvent,
        "validation",
        "A raw kernel event: the value of a record on `<prefix>.agent-events` (contract §2), "
        "keyed by its run id. JSON types are checked strictly: no string, fraction or "
        "boolean where an integer is due, no string where a number is due (an integer is "
        "a valid number). Unknown fields are ignored; an unknown `kind` is valid.",
    ),
    RecordSchema(
        "stream-event.json",
        "StreamEvent",
        StreamEvent,
        "serialization",
        "The typed vocabulary (contract §3): the `event` of a record on `<prefix>.stream-events`, "
        "a union discriminated on `type`.",
    ),
    RecordSchema(
        "stream-chunk.json",
        "StreamChunk",
        StreamChunk,
        "serialization",
        "The chunk vocabulary (contract §4): the `event` of a record on `<prefix>.stream-chunks`.",
    ),
    RecordSchema(
        "stream-events-record.json",
        "StreamEventsRecord",
        StreamEventRecord,
        "serialization",
        "The value of a record on `<prefix>.stream-events` (contract §5), keyed by run id: "
        "exactly one of an event, a run segment's end, or a gap. `seq` is dense per run.",
    ),
    RecordSchema(
        "stream-chunks-record.json",
        "StreamChunksRecord",
        StreamChunkRecord,
        "serialization",
        "The value of a record on `<prefix>.stream-chunks` (contract §5), keyed by run id: "
        "exactly one of a chunk, a run segment's end, or a gap. `seq` is dense per run.",
    ),
    RecordSchema(
        "end-record.json",
        "EndRecord",
        EndRecord,
        "serialization",
        "The record that ends a run segment on the stream-events and stream-chunks topics "
        "(contract §5): completed, error, cancelled or paused.",
    ),
    RecordSchema(
        "gap-record.json",
        "GapRecord",
        GapRecord,
        "serialization",
        "A range of kernel indexes lost upstream (contract §5), reported on the stream-events "
        "and stream-chunks topics instead of waiting for it forever.",
    ),
    RecordSchema(
        "ticket.json",
        "Ticket",
        Ticket,
        "serialization",
        "A pause routed to a human queue (contract §7): the value of a record on "
        "`<prefix>.human.<queue>`, `<prefix>.human.<tenant>.<queue>` or "
        "`<prefix>.human.expired`.",
    ),
    RecordSchema(
        "resume-request.json",
        "ResumeRequest",
        ResumeRequest,
        "validation",
        "A human-review tool's answer to a ticket: the value of a record on "
        "`<prefix>.resume-requests` (contract §7).",
    ),
    RecordSchema(
        "resume.json",
        "Resume",
        Resume,
        "serialization",
        "An accepted answer for the kernel: the value of a record on `<prefix>.resumes`, "
        "keyed by run id (contract §7).",
    ),
    RecordSchema(
        "resume-rejection.json",
        "ResumeRejection",
        ResumeRejection,
        "serialization",
        "A refused answer: the value of a record on `<prefix>.resume-rejections`, keyed by "
        "ticket id (contract §7).",
    ),
    RecordSchema(
        "claim-request.json",
        "ClaimRequest",
        ClaimRequest,
        "validation",
        "A reviewer's claim of a ticket for the lease, or its release: the value of a "
        "record on `<prefix>.resume-requests`, like an answer (docs/pauses.md).",
    ),
    RecordSchema(
        "review-ticket.json",
        "ReviewTicket",
        ReviewTicket,
        "serialization",
        "A ticket's review state (claim, escalation, answer, history): the value of a "
        "record on the compacted `<prefix>.review-tickets`, keyed by `[tenant, ticket id]`; "
        "a tombstone once the validator forgets the ticket.",
    ),
)
