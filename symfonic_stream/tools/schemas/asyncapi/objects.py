"""The small AsyncAPI objects the messages, channels and operations are built from."""

from __future__ import annotations

from typing import Any

KAFKA_BINDING_VERSION = "0.5.0"
#: How the AsyncAPI document labels the payload schemas it references. The files declare
#: draft 2020-12 and use nothing draft-07 tools cannot read (``$defs`` is reached through
#: ordinary JSON pointers); draft-07 is the JSON Schema format every AsyncAPI 3 tool must
#: support, so the document stays loadable by standard tooling.
PAYLOAD_SCHEMA_FORMAT = "application/schema+json;version=draft-07"
#: The key of every record of a run.
RUN_KEY = "The run id, UTF-8."


def ref(pointer: str) -> dict[str, str]:
    return {"$ref": pointer}


def payload(filename: str) -> dict[str, Any]:
    return {"schemaFormat": PAYLOAD_SCHEMA_FORMAT, "schema": ref(f"./{filename}")}


def key_binding(description: str) -> dict[str, Any]:
    return {
        "kafka": {
            "key": {"type": "string", "description": description},
            "bindingVersion": KAFKA_BINDING_VERSION,
        }
    }


def group_binding(group_id: str) -> dict[str, Any]:
    return {
        "kafka": {
            "groupId": {"type": "string", "enum": [group_id]},
            "bindingVersion": KAFKA_BINDING_VERSION,
        }
    }


def headers_schema(properties: dict[str, Any], *, optional: bool = False) -> dict[str, Any]:
    """An inline headers schema, as UTF-8 text: every header listed is always present, or,
    ``optional``, present on some records only."""
    schema = {"type": "object", "properties": properties}
    return schema if optional else {**schema, "required": list(properties)}


def camel(name: str) -> str:
    """``resume-intake`` → ``resumeIntake``: an engine's name as part of an AsyncAPI id."""
    first, *rest = name.split("-")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def upper_first(identifier: str) -> str:
    """``streamEvents`` → ``StreamEvents`` (an id inside another id)."""
    return identifier[:1].upper() + identifier[1:]
