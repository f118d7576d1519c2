"""schemas/: a JSON Schema for every record type and an AsyncAPI document of the topics.

Everything here is generated from the models (``symfonic_stream.models``) and the topic
names (``symfonic_stream.topics``), so the files in schemas/ are never edited by hand: run
``make schemas`` (``symfonic-stream schemas generate``) and commit the result. The unit
tests fail when the committed files drift from what :func:`generate` returns.

Two directions, two kinds of schema:

* Records the project *reads* from outside (AgentEvent, ResumeRequest) get pydantic's
  *validation* schema: what a consumer accepts. Fields with a default may be absent.
* Records the project *writes* (envelopes, events, tickets, resumes, rejections) get the
  *serialization* schema with every field required: every field is always on the wire,
  ``null`` included, which is what a reader of those topics can rely on.

The generator is pure: :func:`generate` returns ``{filename: text}`` and touches no file.
Output is deterministic (sorted keys, 2-space indent, trailing newline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode
from pydantic_core import core_schema

from symfonic_stream import __version__
from symfonic_stream.models.agent_event import KNOWN_KINDS, AgentEvent
from symfonic_stream.models.dead_letter import (
    DETAIL_MAX_BYTES,
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
    DeadLetterReason,
)
from symfonic_stream.models.envelope import (
    EndRecord,
    GapRecord,
    StreamChunkRecord,
    StreamEventRecord,
)
from symfonic_stream.models.headers import (
    KIND_HEADER,
    OUTCOME_HEADER,
    QUEUE_HEADER,
    RECORD_TYPE_HEADER,
)
from symfonic_stream.models.headers import TICKET_MARK as TICKET_MARK_BYTES
from symfonic_stream.models.pauses import (
    RejectionReason,
    Resume,
    ResumeRejection,
    ResumeRequest,
    Ticket,
)
from symfonic_stream.models.stream_event import StreamChunk, StreamEvent
from symfonic_stream.topics import CONSUMERS, TopicNames

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: ``$id`` base: an identifier, never fetched.
SCHEMA_ID_BASE = "https://symfonic-stream.dev/schemas/"
ASYNCAPI_FILE = "asyncapi.yaml"
ASYNCAPI_VERSION = "3.0.0"
KAFKA_BINDING_VERSION = "0.5.0"
#: How the AsyncAPI document labels the payload schemas it references. The files declare
#: draft 2020-12 and use nothing draft-07 tools cannot read (``$defs`` is reached through
#: ordinary JSON pointers); draft-07 is the JSON Schema format every AsyncAPI 3 tool must
#: support, so the document stays loadable by standard tooling.
PAYLOAD_SCHEMA_FORMAT = "application/schema+json;version=draft-07"
DEFAULT_PREFIX = "symfonic"

REGENERATE_HINT = "run `make schemas` (symfonic-stream schemas generate) and commit schemas/"
GENERATED_NOTE = (
    "Generated from symfonic_stream/models by `symfonic-stream schemas generate` "
    "(make schemas). Do not edit by hand."
)


class _WireSchema(GenerateJsonSchema):
    """Pydantic's generator, except that in serialization mode every field is required.

    The project writes every field of its output records, defaults and nulls included
    (``"type"``, ``"phase"``, ``"source_index": null``, ``"error": null``), so a reader may
    rely on each being present. Pydantic leaves fields with a default optional unless the
    model opts in, and the models are shared with code that needs them unchanged.
    """

    def field_is_required(
        self,
        field: core_schema.ModelField | core_schema.DataclassField | core_schema.TypedDictField,
        total: bool,
    ) -> bool:
        if self.mode == "serialization" and field["type"] != "typed-dict-field":
            return True
        return super().field_is_required(field, total)


@dataclass(frozen=True, slots=True)
class RecordSchema:
    """One JSON Schema file: which type it is generated from, and in which direction."""

    filename: str
    title: str
    target: Any
    #: ``validation`` for records read from outside, ``serialization`` for records written.
    mode: JsonSchemaMode
    description: str


def _names() -> TopicNames:
    return TopicNames(DEFAULT_PREFIX)


RECORD_SCHEMAS: tuple[RecordSchema, ...] = (
    RecordSchema(
        "agent-event.json",
        "AgentEvent",
        AgentEvent,
        "validation",
        "A raw kernel event: the value of a record on `<prefix>.agent-events` (SPEC §2), "
        "keyed by its run id. JSON types are checked strictly: no string, fraction or "
        "boolean where an integer is due, no string where a number is due (an integer is "
        "a valid number). Unknown fields are ignored; an unknown `kind` is valid.",
    ),
    RecordSchema(
        "stream-event.json",
        "StreamEvent",
        StreamEvent,
        "serialization",
        "The typed vocabulary (SPEC §3): the `event` of a record on `<prefix>.stream-events`, "
        "a union discriminated on `type`.",
    ),
    RecordSchema(
        "stream-chunk.json",
        "StreamChunk",
        StreamChunk,
        "serialization",
        "The chunk vocabulary (SPEC §4): the `event` of a record on `<prefix>.stream-chunks`.",
    ),
    RecordSchema(
        "stream-events-record.json",
        "StreamEventsRecord",
        StreamEventRecord,
        "serialization",
        "The value of a record on `<prefix>.stream-events` (SPEC §5), keyed by run id: "
        "exactly one of an event, a run segment's end, or a gap. `seq` is dense per run.",
    ),
    RecordSchema(
        "stream-chunks-record.json",
        "StreamChunksRecord",
        StreamChunkRecord,
        "serialization",
        "The value of a record on `<prefix>.stream-chunks` (SPEC §5), keyed by run id: "
        "exactly one of a chunk, a run segment's end, or a gap. `seq` is dense per run.",
    ),
    RecordSchema(
        "end-record.json",
        "EndRecord",
        EndRecord,
        "serialization",
        "The record that ends a run segment on the stream-events and stream-chunks topics "
        "(SPEC §5): completed, error, cancelled or paused.",
    ),
    RecordSchema(
        "gap-record.json",
        "GapRecord",
        GapRecord,
        "serialization",
        "A range of kernel indexes lost upstream (SPEC §5), reported on the stream-events "
        "and stream-chunks topics instead of waiting for it forever.",
    ),
    RecordSchema(
        "ticket.json",
        "Ticket",
        Ticket,
        "serialization",
        "A pause routed to a human queue (SPEC §7): the value of a record on "
        "`<prefix>.human.<queue>`, `<prefix>.human.<tenant>.<queue>` or "
        "`<prefix>.human.expired`.",
    ),
    RecordSchema(
        "resume-request.json",
        "ResumeRequest",
        ResumeRequest,
        "validation",
        "A human-review tool's answer to a ticket: the value of a record on "
        "`<prefix>.resume-requests` (SPEC §7).",
    ),
    RecordSchema(
        "resume.json",
        "Resume",
        Resume,
        "serialization",
        "An accepted answer for the kernel: the value of a record on `<prefix>.resumes`, "
        "keyed by run id (SPEC §7).",
    ),
    RecordSchema(
        "resume-rejection.json",
        "ResumeRejection",
        ResumeRejection,
        "serialization",
        "A refused answer: the value of a record on `<prefix>.resume-rejections`, keyed by "
        "ticket id (SPEC §7).",
    ),
)

DEAD_LETTER_HEADERS_FILE = "dead-letter-headers.json"

# -- JSON Schemas -------------------------------------------------------------------------


def _model_schema(spec: RecordSchema) -> dict[str, Any]:
    schema = TypeAdapter(spec.target).json_schema(mode=spec.mode, schema_generator=_WireSchema)
    own = schema.pop("description", None)
    schema["title"] = spec.title
    schema["description"] = f"{spec.description}\n\n{own}" if own else spec.description
    if spec.target is AgentEvent:
        _agent_event_rules(schema)
    return schema


def _agent_event_rules(schema: dict[str, Any]) -> None:
    """What AgentEvent checks in code that pydantic cannot put in its schema."""
    kind = schema["properties"]["kind"]
    kind.setdefault(
        "description",
        "One of "
        + ", ".join(f"`{name}`" for name in sorted(KNOWN_KINDS))
        + ". Any other kind is valid: it projects to nothing and its index still advances "
        "the run.",
    )
    kind.setdefault("examples", sorted(KNOWN_KINDS))
    schema["properties"]["run_id"].setdefault(
        "description", "The run; must equal the record key (UTF-8)."
    )
    # AgentEvent's model validator: on an ask_user event with an interrupt, the payload's
    # `questions` (becoming the typed ask_user event's list) is a list when present.
    schema["allOf"] = [
        {
            "if": {
                "properties": {"kind": {"const": "ask_user"}, "interrupt": {"type": "object"}},
                "required": ["kind", "interrupt"],
            },
            "then": {
                "properties": {
                    "interrupt": {
                        "properties": {
                            "payload": {"properties": {"questions": {"type": ["array", "null"]}}}
                        }
                    }
                }
            },
        }
    ]


def dead_letter_headers_schema() -> dict[str, Any]:
    """The four ``symfonic-dlq-*`` headers a dead letter carries (SPEC §6)."""
    reason = TypeAdapter(DeadLetterReason).json_schema()
    return {
        "$defs": {"DeadLetterReason": reason},
        "title": "DeadLetterHeaders",
        "description": (
            "The headers of a record on `<prefix>.dead-letter` (SPEC §6), as UTF-8 text. The "
            "record keeps the original key, value and headers; these four are added. "
            "Other headers are the original record's and may hold any bytes."
        ),
        "type": "object",
        "properties": {
            HEADER_REASON: {
                "$ref": "#/$defs/DeadLetterReason",
                "description": (
                    "Why the record could not be processed. For a raw record the checks run "
                    "in the order too_large, invalid_json, invalid_event, key_mismatch; "
                    "run_closed is a new index after the run's closing end record; "
                    "unroutable is a ticket no routing rule can place."
                ),
            },
            HEADER_DETAIL: {
                "type": "string",
                "maxLength": DETAIL_MAX_BYTES,
                "description": f"Human-readable detail, at most {DETAIL_MAX_BYTES} bytes of UTF-8.",
            },
            HEADER_SOURCE: {
                "type": "string",
                "pattern": "^.+/(0|[1-9][0-9]*)/(0|[1-9][0-9]*)$",
                "description": "Where the original record was read: `topic/partition/offset`.",
                "examples": [f"{_names().agent_events}/3/1042"],
            },
            HEADER_CONSUMER: {
                "type": "string",
                "minLength": 1,
                "description": "The consumer that dead-lettered the record: "
                + ", ".join(f"`{consumer}`" for consumer in CONSUMERS)
                + ".",
                "examples": [CONSUMERS[0]],
            },
        },
        "required": [HEADER_REASON, HEADER_DETAIL, HEADER_SOURCE, HEADER_CONSUMER],
        "additionalProperties": True,
    }


def _finish(schema: dict[str, Any], filename: str) -> dict[str, Any]:
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": SCHEMA_ID_BASE + filename,
        "$comment": GENERATED_NOTE,
        **schema,
    }


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every JSON Schema, by file name, as a Python object."""
    schemas = {
        spec.filename: _finish(_model_schema(spec), spec.filename) for spec in RECORD_SCHEMAS
    }
    schemas[DEAD_LETTER_HEADERS_FILE] = _finish(
        dead_letter_headers_schema(), DEAD_LETTER_HEADERS_FILE
    )
    return schemas


def dump_json(schema: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# -- AsyncAPI -----------------------------------------------------------------------------


def _ref(pointer: str) -> dict[str, str]:
    return {"$ref": pointer}


def _payload(filename: str) -> dict[str, Any]:
    return {"schemaFormat": PAYLOAD_SCHEMA_FORMAT, "schema": _ref(f"./{filename}")}


def _key(description: str) -> dict[str, Any]:
    return {
        "kafka": {
            "key": {"type": "string", "description": description},
            "bindingVersion": KAFKA_BINDING_VERSION,
        }
    }


def _group(group_id: str) -> dict[str, Any]:
    return {
        "kafka": {
            "groupId": {"type": "string", "enum": [group_id]},
            "bindingVersion": KAFKA_BINDING_VERSION,
        }
    }


_RUN_KEY = "The run id, UTF-8."
_TICKET_KEY = "The ticket id (the pause's interrupt_id), UTF-8; equal to the payload's ticket_id."

TICKET_MARK = TICKET_MARK_BYTES.decode()
ACCEPTED_OUTCOME = "accepted"


def _headers(properties: dict[str, Any]) -> dict[str, Any]:
    """An inline headers schema: every header listed is always present, as UTF-8 text."""
    return {"type": "object", "properties": properties, "required": list(properties)}


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


def _messages(names: TopicNames) -> dict[str, Any]:
    """``components.messages``: one message per record type, with its key and payload."""
    return {
        "agentEvent": {
            "name": "AgentEvent",
            "title": "Raw kernel event",
            "summary": "One event of a kernel run; index is dense per run: 0, 1, 2, …",
            "contentType": "application/json",
            "payload": _payload("agent-event.json"),
            "bindings": _key(_RUN_KEY + " Must equal the payload's run_id."),
            "examples": [
                {
                    "name": "text_delta",
                    "payload": {
                        "run_id": "run-1",
                        "index": 0,
                        "kind": "text_delta",
                        "timestamp": 1767225600.25,
                        "text": "Hello",
                    },
                },
                {
                    "name": "done",
                    "payload": {
                        "run_id": "run-1",
                        "index": 1,
                        "kind": "done",
                        "timestamp": 1767225601.5,
                        "result": {
                            "text": "Hello",
                            "duration_ms": 1250.0,
                            "usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
                        },
                    },
                },
            ],
        },
        "streamEventsRecord": {
            "name": "StreamEventsRecord",
            "title": "Typed stream record",
            "summary": "A typed event, a run segment's end, or a gap; seq is dense per run.",
            "contentType": "application/json",
            "payload": _payload("stream-events-record.json"),
            "bindings": _key(_RUN_KEY),
            "examples": [
                {
                    "name": "event",
                    "payload": {
                        "run_id": "run-1",
                        "seq": 0,
                        "source_index": 0,
                        "ts": 1767225600.25,
                        "event": {"type": "text_delta", "text": "Hello"},
                    },
                },
                {
                    "name": "end",
                    "payload": {
                        "run_id": "run-1",
                        "seq": 3,
                        "source_index": 1,
                        "ts": 1767225601.5,
                        "end": {"status": "completed", "error": None},
                    },
                },
                {
                    "name": "gap",
                    "payload": {
                        "run_id": "run-2",
                        "seq": 4,
                        "source_index": None,
                        "ts": 1767225605.0,
                        "gap": {"from_index": 5, "to_index": 7},
                    },
                },
            ],
        },
        "streamChunksRecord": {
            "name": "StreamChunksRecord",
            "title": "Chunk stream record",
            "summary": "A chunk, a run segment's end, or a gap; seq is dense per run.",
            "contentType": "application/json",
            "payload": _payload("stream-chunks-record.json"),
            "bindings": _key(_RUN_KEY),
            "examples": [
                {
                    "name": "chunk",
                    "payload": {
                        "run_id": "run-1",
                        "seq": 0,
                        "source_index": 0,
                        "ts": 1767225600.25,
                        "event": {"type": "text", "content": "Hello", "name": None},
                    },
                },
            ],
        },
        "ticket": {
            "name": "Ticket",
            "title": "Human-review ticket",
            "summary": "One pause waiting for a human answer; written once per interrupt_id.",
            "contentType": "application/json",
            "headers": _headers(
                {
                    QUEUE_HEADER: {
                        "type": "string",
                        "description": "The topic name after `<prefix>.human.`: `<queue>`, "
                        "`<tenant>.<queue>` or `expired`.",
                    },
                    KIND_HEADER: {"type": "string", "enum": ["ask_user", "interrupt"]},
                }
            ),
            "payload": _payload("ticket.json"),
            "bindings": _key(_RUN_KEY),
            "examples": [
                {
                    "name": "ask_user",
                    "headers": {QUEUE_HEADER: "default", KIND_HEADER: "ask_user"},
                    "payload": _ticket_example(names),
                }
            ],
        },
        "ticketRegistration": {
            "name": "TicketRegistration",
            "title": "Ticket registration",
            "summary": "Internal: the pause router registers each ticket with the validator.",
            "description": (
                "The ticket again, written by the pause router in the same transaction as the "
                "queue record and keyed by ticket id, so it shares a partition with every "
                "answer to it and precedes them all. Human-review tools skip records with "
                "this header: they are not answers."
            ),
            "contentType": "application/json",
            "headers": _headers(
                {RECORD_TYPE_HEADER: {"type": "string", "const": TICKET_MARK}},
            ),
            "payload": _payload("ticket.json"),
            "bindings": _key(_TICKET_KEY),
            "tags": [_ref("#/components/tags/internal")],
            "examples": [
                {
                    "name": "registration",
                    "headers": {RECORD_TYPE_HEADER: TICKET_MARK},
                    "payload": _ticket_example(names),
                }
            ],
        },
        "resumeRequest": {
            "name": "ResumeRequest",
            "title": "Answer to a ticket",
            "summary": "A human-review tool's answer; the first valid answer wins.",
            "contentType": "application/json",
            "payload": _payload("resume-request.json"),
            "bindings": _key(_TICKET_KEY),
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
        },
        "resume": {
            "name": "Resume",
            "title": "Accepted answer",
            "summary": "A validated answer the kernel resumes the run with.",
            "contentType": "application/json",
            "headers": _headers(
                {OUTCOME_HEADER: {"type": "string", "const": ACCEPTED_OUTCOME}},
            ),
            "payload": _payload("resume.json"),
            "bindings": _key(_RUN_KEY),
            "examples": [
                {
                    "name": "resume",
                    "headers": {OUTCOME_HEADER: ACCEPTED_OUTCOME},
                    "payload": {
                        "ticket_id": "int-1",
                        "run_id": "run-1",
                        "tool_call_id": "call-1",
                        "interrupt_id": "int-1",
                        "answer": {"approved": True},
                        "responder": "alice@example.com",
                        "answered_at": 1767225700.0,
                    },
                }
            ],
        },
        "resumeRejection": {
            "name": "ResumeRejection",
            "title": "Rejected answer",
            "summary": "An answer the resume validator refused, with the reason.",
            "contentType": "application/json",
            "headers": _headers(
                {
                    OUTCOME_HEADER: {
                        "type": "string",
                        "enum": [reason.value for reason in RejectionReason],
                        "description": "The rejection reason.",
                    }
                },
            ),
            "payload": _payload("resume-rejection.json"),
            "bindings": _key(_TICKET_KEY),
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
                    },
                }
            ],
        },
        "deadLetter": {
            "name": "DeadLetter",
            "title": "Dead letter",
            "summary": "A record a consumer could not process, kept whole.",
            "description": (
                "The original record's key, value and headers, unchanged (the value is not "
                "necessarily JSON, or even UTF-8), plus the four `symfonic-dlq-*` headers."
            ),
            "contentType": "application/octet-stream",
            "headers": {
                "schemaFormat": PAYLOAD_SCHEMA_FORMAT,
                "schema": _ref(f"./{DEAD_LETTER_HEADERS_FILE}"),
            },
            "bindings": _key("The original record's key, unchanged (may be absent)."),
            "examples": [
                {
                    "name": "invalid_event",
                    "headers": {
                        HEADER_REASON: DeadLetterReason.INVALID_EVENT.value,
                        HEADER_DETAIL: "index: Input should be a valid integer",
                        HEADER_SOURCE: f"{names.agent_events}/3/1042",
                        HEADER_CONSUMER: CONSUMERS[0],
                    },
                }
            ],
        },
        "stateChange": {
            "name": "StateChange",
            "title": "State changelog record",
            "summary": "Internal: one key of a consumer's state store; null value deletes it.",
            "description": (
                "Private to symfonic-stream: the encoding may change between versions and "
                "is not a contract. Written in the same transaction as the consumer's output "
                "and input offsets; replayed to restore state after a crash or rebalance."
            ),
            "contentType": "application/octet-stream",
            "bindings": _key("The state-store key (for the projectors, the run id)."),
        },
    }


def _channels(names: TopicNames) -> dict[str, Any]:
    def channel(
        address: str, messages: str | tuple[str, ...], description: str, **extra: Any
    ) -> dict[str, Any]:
        listed = (messages,) if isinstance(messages, str) else messages
        body: dict[str, Any] = {
            "address": address,
            "description": description,
            "messages": {name: _ref(f"#/components/messages/{name}") for name in listed},
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
            "Tickets already past expires_at when routed, kept out of the live queues.",
        ),
        "resumeRequests": channel(
            names.resume_requests,
            ("resumeRequest", "ticketRegistration"),
            "Answers from human-review tools, keyed by ticket id, and the pause router's ticket "
            "registrations (header `symfonic-record-type: ticket`) that precede them.",
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
            tags=[_ref("#/components/tags/internal")],
            bindings={
                "kafka": {
                    "topicConfiguration": {"cleanup.policy": ["compact"]},
                    "bindingVersion": KAFKA_BINDING_VERSION,
                }
            },
        )
    return channels


def _operations(names: TopicNames, channels: dict[str, Any]) -> dict[str, Any]:
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
            "channel": _ref(f"#/channels/{channel_id}"),
            "summary": summary,
            "messages": [
                _ref(f"#/channels/{channel_id}/messages/{message}")
                for message in (messages or tuple(channels[channel_id]["messages"]))
            ],
            "tags": [_ref(f"#/components/tags/{tag}")],
        }
        if group is not None:
            body["bindings"] = _group(group)
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
                    "resumeRequests",
                    "Each ticket again, registered with the resume validator.",
                    ("ticketRegistration",),
                ),
            ],
        ),
        "resumes": (
            "resumeRequests",
            [
                ("SendResumes", "resumes", "Accepted answers, keyed by run id.", None),
                ("SendRejections", "resumeRejections", "Refused answers, with the reason.", None),
            ],
        ),
    }
    for consumer, (source, outputs) in consumers.items():
        group = names.group(consumer)
        operation(
            f"{consumer}Receive",
            "receive",
            source,
            f"The {consumer} consumer reads its input in group {group}.",
            group=group,
            tag=consumer,
        )
        for suffix, channel_id, summary, messages in outputs:
            operation(
                f"{consumer}{suffix}",
                "send",
                channel_id,
                f"{summary} Committed in one transaction with the input offsets.",
                tag=consumer,
                messages=messages,
            )
        operation(
            f"{consumer}SendDeadLetters",
            "send",
            "deadLetter",
            "Records it cannot process, in the same transaction.",
            tag=consumer,
        )
        operation(
            f"{consumer}WriteState",
            "send",
            f"{consumer}StateChangelog",
            "State changes, in the same transaction as the output.",
            tag=consumer,
        )
        operation(
            f"{consumer}RestoreState",
            "receive",
            f"{consumer}StateChangelog",
            "Replays the changelog partitions of its assigned input partitions before consuming.",
            tag=consumer,
        )
    return operations


def asyncapi_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every topic (SPEC §1), for one topic prefix."""
    names = TopicNames(prefix)
    channels = _channels(names)
    tags: dict[str, Any] = {
        "external": {"name": "external", "description": "Done by a system outside the project."},
        "internal": {
            "name": "internal",
            "description": "Private to symfonic-stream; not a contract.",
        },
    }
    for consumer in CONSUMERS:
        tags[consumer] = {
            "name": consumer,
            "description": f"The {consumer} consumer (group {names.group(consumer)}).",
        }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "symfonic-stream",
            "version": __version__,
            "description": (
                "Exactly-once Kafka consumers that turn LLM-agent kernel events into typed "
                "streams, chunk streams and human-review queues. Topic and group names are "
                f"shown with the default prefix `{prefix}` (SYMFONIC_TOPIC_PREFIX); a "
                "deployment with another prefix uses the same names with its own. Payload "
                "schemas are the JSON Schema files beside this document."
            ),
            "license": {
                "name": "Apache-2.0",
                "url": "https://www.apache.org/licenses/LICENSE-2.0",
            },
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:9092",
                "protocol": "kafka",
                "description": "A single local broker (SYMFONIC_BOOTSTRAP_SERVERS default).",
            }
        },
        "channels": channels,
        "operations": _operations(names, channels),
        "components": {"messages": _messages(names), "tags": tags},
    }


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared by two places twice, never as a YAML anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(document: dict[str, Any]) -> str:
    """Deterministic YAML text: keys in the document's order, a header saying not to edit."""
    header = f"# {GENERATED_NOTE}\n"
    return header + yaml.dump(
        document,
        Dumper=_NoAliasDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


# -- everything ---------------------------------------------------------------------------


def generate() -> dict[str, str]:
    """Every file of schemas/, by file name, as the text to write. Pure and deterministic."""
    files = {name: dump_json(schema) for name, schema in sorted(json_schemas().items())}
    files[ASYNCAPI_FILE] = dump_yaml(asyncapi_document())
    return files
