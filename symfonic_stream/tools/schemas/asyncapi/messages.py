"""``components.messages``: one AsyncAPI message per record type, with key, headers, examples.
Which channel carries which message, and each message's payload schema (from its model),
come from the declarations (:mod:`symfonic_stream.models.topics`); this module says
what a reader of each needs besides: its key, headers and examples. The pause path's
messages are in :mod:`.pause_messages`.

The examples are literals, not generated, so they cannot drift silently: the unit tests
validate each one against the payload schema its message references.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from symfonic_stream.consumers.typed import TYPED
from symfonic_stream.models.dead_letter import (
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
    DeadLetterReason,
)
from symfonic_stream.models.headers import TENANT_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.schemas.asyncapi.objects import (
    PAYLOAD_SCHEMA_FORMAT,
    RUN_KEY,
    headers_schema,
    key_binding,
    ref,
)
from symfonic_stream.tools.schemas.asyncapi.pause_messages import PAUSE_MESSAGES
from symfonic_stream.tools.schemas.conventions import DEAD_LETTER_HEADERS_FILE

#: On stream-events and stream-chunks records (contract decision 17).
_TENANT_HEADERS = headers_schema({
    TENANT_HEADER: {
        "type": "string",
        "description": "The run's owner (contract §9: its first event's `scope.tenant`), on "
        "every record of a run whose owner has a tenant, gaps and ends included; absent on "
        "the records of a run of no tenant. The SSE gateway checks a token's `tenant` claim "
        "against it.",
    },
}, optional=True)


def _agent_event(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "AgentEvent",
        "title": "Raw kernel event",
        "summary": "One event of a kernel run; index is dense per run: 0, 1, 2, …",
        "contentType": "application/json",
        "bindings": key_binding(RUN_KEY + " Must equal the payload's run_id."),
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
    }


def _stream_events_record(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "StreamEventsRecord",
        "title": "Typed stream record",
        "summary": "A typed event, a run segment's end, or a gap; seq is dense per run.",
        "contentType": "application/json",
        "headers": _TENANT_HEADERS,
        "bindings": key_binding(RUN_KEY),
        "examples": [
            {
                "name": "event",
                "headers": {TENANT_HEADER: "acme"},
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
    }


def _stream_chunks_record(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "StreamChunksRecord",
        "title": "Chunk stream record",
        "summary": "A chunk, a run segment's end, or a gap; seq is dense per run.",
        "contentType": "application/json",
        "headers": _TENANT_HEADERS,
        "bindings": key_binding(RUN_KEY),
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
    }


def _dead_letter(names: TopicNames) -> dict[str, Any]:
    return {
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
            "schema": ref(f"./{DEAD_LETTER_HEADERS_FILE}"),
        },
        "bindings": key_binding("The original record's key, unchanged (may be absent)."),
        "examples": [
            {
                "name": "invalid_event",
                "headers": {
                    HEADER_REASON: DeadLetterReason.INVALID_EVENT.value,
                    HEADER_DETAIL: "index: Input should be a valid integer",
                    HEADER_SOURCE: f"{names.agent_events}/3/1042",
                    HEADER_CONSUMER: TYPED.name,
                },
            }
        ],
    }


def _state_change(names: TopicNames) -> dict[str, Any]:
    return {
        "name": "StateChange",
        "title": "State changelog record",
        "summary": "Internal: one key of a consumer's state store; null value deletes it.",
        "description": (
            "Private to symfonic-stream: the encoding may change between versions and "
            "is not a contract. Written in the same transaction as the consumer's output; "
            "the key position/next holds the task's input position, the offset it "
            "resumes at. Replayed to restore state after a crash or rebalance."
        ),
        "contentType": "application/octet-stream",
        "bindings": key_binding("The state-store key (for the projectors, the run id)."),
    }


#: Each message's description, by its id (which channels carry it: the declarations).
_MESSAGES: dict[str, Callable[[TopicNames], dict[str, Any]]] = {
    "agentEvent": _agent_event,
    "streamEventsRecord": _stream_events_record,
    "streamChunksRecord": _stream_chunks_record,
    **PAUSE_MESSAGES,
    "deadLetter": _dead_letter,
    "stateChange": _state_change,
}


#: The W3C Trace Context headers any record but a state change may carry (contract decision
#: 19; docs/metrics.md, "Tracing"): the kernel's, carried checked onto what is projected.
_TRACE_HEADERS = {
    TRACEPARENT_HEADER: {
        "type": "string",
        "pattern": "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        "description": "W3C Trace Context: on a raw record the kernel's, and on every record "
        "projected from it the same (a zero trace or parent id, another version, or a second "
        "one on a record, is not valid: dropped, never carried). Absent when the raw record "
        "carried none valid.",
    },
    TRACESTATE_HEADER: {
        "type": "string",
        "maxLength": 512,
        "description": "W3C Trace Context's vendor list (at most 32 members), carried with "
        "its `traceparent` when valid.",
    },
}
#: Messages that carry no trace context: the consumers' own state.
_UNTRACED = frozenset({"stateChange"})


def _with_trace_headers(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with the optional trace headers among its inline headers (a headers
    schema in a file of its own says so itself)."""
    headers = message.get("headers", {"type": "object", "properties": {}})
    if "properties" not in headers:
        return message
    properties = {**headers["properties"], **_TRACE_HEADERS}
    return {**message, "headers": {**headers, "properties": properties}}


def build_messages(names: TopicNames) -> dict[str, Any]:
    """``components.messages``: one message per record type, with its key and headers."""
    return {message_id: describe(names) if message_id in _UNTRACED
            else _with_trace_headers(describe(names))
            for message_id, describe in _MESSAGES.items()}
