"""The JSON Schema (draft 2020-12) of every record, as Python objects, one per file name.

Records the project reads from outside get pydantic's *validation* schema (what a consumer
accepts); records it writes get the *serialization* schema with every field required (what
a reader of its topics can rely on). See :mod:`symfonic_stream.tools.schemas`.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from symfonic_stream.consumers import deployed, engines
from symfonic_stream.models.agent_event import KNOWN_KINDS, AgentEvent
from symfonic_stream.models.dead_letter import (
    DETAIL_MAX_BYTES,
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
    DeadLetterReason,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.schemas.conventions import (
    DEAD_LETTER_HEADERS_FILE,
    DEFAULT_PREFIX,
    GENERATED_NOTE,
)
from symfonic_stream.tools.schemas.records import RECORD_SCHEMAS, RecordSchema

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: ``$id`` base: an identifier, never fetched.
SCHEMA_ID_BASE = "https://symfonic-stream.dev/schemas/"


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
    """The four ``symfonic-dlq-*`` headers a dead letter carries (contract §6)."""
    reason = TypeAdapter(DeadLetterReason).json_schema()
    return {
        "$defs": {"DeadLetterReason": reason},
        "title": "DeadLetterHeaders",
        "description": (
            "The headers of a record on `<prefix>.dead-letter` (contract §6), as UTF-8 text. The "
            "record keeps the original key, value and headers; these four are added. "
            "Other headers are the original record's and may hold any bytes, but for a "
            "`traceparent` or `tracestate` that is not valid W3C Trace Context, which is "
            "dropped (contract decision 19)."
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
                "examples": [f"{TopicNames(DEFAULT_PREFIX).agent_events}/3/1042"],
            },
            HEADER_CONSUMER: {
                "type": "string",
                "minLength": 1,
                "description": "The consumer that dead-lettered the record (its engine, "
                "for the two of `resumes`): "
                + ", ".join(f"`{engine.name}`" for engine in engines(deployed()))
                + ".",
                "examples": [engines(deployed())[0].name],
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
