"""Each topic's value schema as a schema registry holds it (``schemas register``,
docs/schema-registry.md): derived from the AsyncAPI document's channels and their messages'
payload files, so the declarations stay the one list of which topic carries what.

A topic is a declared topic's name, or for a family of topics (``human.{queue}``) each name
the deployment's wiring gives it (the routing rules' queues, ``human.expired``); a family
created on demand (``human.{tenant}.{queue}``) has no name to register ahead. A topic whose
messages carry no payload schema (the dead letters: any record's original bytes) has no
value schema. A topic carrying several record types gets one schema that is any of them.
"""

from __future__ import annotations

import re
from typing import Any

from symfonic_stream.config import Settings
from symfonic_stream.consumers import deployed, engines
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.schemas.asyncapi import asyncapi_document
from symfonic_stream.tools.schemas.asyncapi.channels import document_topics
from symfonic_stream.tools.schemas.files import dump_json
from symfonic_stream.tools.schemas.json_schema import json_schemas

#: The dialect the registered form declares. The files in schemas/ declare draft 2020-12 and
#: use nothing draft-07 readers cannot read (as the AsyncAPI document labels them); registries
#: check compatibility with draft-07 validators (Apicurio's, Confluent's before 7.x's newer
#: dialects), which refuse a 2020-12 document as "could not determine version".
REGISTERED_DIALECT = "http://json-schema.org/draft-07/schema#"
_PARAMETER = re.compile(r"\\\{[A-Za-z0-9_]+\\\}")


def _address_pattern(address: str) -> re.Pattern[str]:
    """A channel's address as a pattern: each ``{parameter}`` one dot-free name part."""
    return re.compile(_PARAMETER.sub("[^.]+", re.escape(address)))


def topic_names(settings: Settings) -> tuple[str, ...]:
    """Every topic of the deployment that a schema can be registered for, in declared order."""
    names = TopicNames(settings.topic_prefix)
    found = [topic.name(names) for topic in document_topics() if not topic.family]
    for engine in engines(deployed()):
        if any(write.topic.family for write in engine.writes):
            found.extend(engine.wire(settings, names).family_topics)
    return tuple(dict.fromkeys(found))


def _payload_files(document: dict[str, Any], topic: str) -> list[str]:
    """The payload files of the messages every channel whose address matches ``topic``
    carries, once each, in order."""
    messages = document["components"]["messages"]
    files: list[str] = []
    for channel in document["channels"].values():
        if not _address_pattern(channel["address"]).fullmatch(topic):
            continue
        for ref in channel["messages"].values():
            payload = messages[ref["$ref"].rpartition("/")[2]].get("payload")
            if payload is not None:
                files.append(payload["schema"]["$ref"].removeprefix("./"))
    return list(dict.fromkeys(files))


def _registered(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "$schema": REGISTERED_DIALECT}


def value_schemas(settings: Settings) -> dict[str, str]:
    """Topic → the text of its value schema as registered (sorted keys, as schemas/ writes
    them, so the same schema is the same text and a registry finds it unchanged)."""
    document = asyncapi_document(settings.topic_prefix)
    schemas = json_schemas()
    found: dict[str, str] = {}
    for topic in topic_names(settings):
        files = _payload_files(document, topic)
        if not files:
            continue
        if len(files) == 1:
            schema = _registered(schemas[files[0]])
        else:
            parts = [{k: v for k, v in schemas[f].items() if k != "$schema"} for f in files]
            schema = {
                "$schema": REGISTERED_DIALECT,
                "title": f"The value of a record on {topic}",
                "description": "Any of: " + ", ".join(files) + " (schemas/).",
                "anyOf": parts,
            }
        found[topic] = dump_json(schema)
    return found
