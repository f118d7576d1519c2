"""The AsyncAPI 3.0 document: info, server, channels, operations and components together."""

from __future__ import annotations

from typing import Any

from symfonic_stream import __version__
from symfonic_stream.consumers import READERS, Message, deployed
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import STATE_CHANGE
from symfonic_stream.tools.schemas.asyncapi.channels import build_channels, document_topics
from symfonic_stream.tools.schemas.asyncapi.messages import build_messages
from symfonic_stream.tools.schemas.asyncapi.objects import payload, upper_first
from symfonic_stream.tools.schemas.asyncapi.operations import build_operations
from symfonic_stream.tools.schemas.conventions import DEFAULT_PREFIX
from symfonic_stream.tools.schemas.records import RECORD_SCHEMAS

ASYNCAPI_VERSION = "3.0.0"


def _tags(names: TopicNames) -> dict[str, Any]:
    tags: dict[str, Any] = {
        "external": {"name": "external", "description": "Done by a system outside the project."},
        "internal": {
            "name": "internal",
            "description": "Private to symfonic-stream; not a contract.",
        },
    }
    for consumer in deployed():
        groups = [names.group(engine.name) for engine in consumer.engines]
        which = f"group {groups[0]}" if len(groups) == 1 else f"groups {' and '.join(groups)}"
        tags[consumer.name] = {
            "name": consumer.name,
            "description": f"{upper_first(consumer.title)}: {consumer.summary} ({which}).",
        }
    for reader in READERS:
        tags[reader.name] = {
            "name": reader.name,
            "description": f"{upper_first(reader.title)}: {reader.summary} (no group).",
        }
    return tags


def _messages(names: TopicNames) -> dict[str, Any]:
    """Every message a channel carries, its payload schema the file of its model's."""
    declared: dict[str, Message] = {STATE_CHANGE.id: STATE_CHANGE}
    declared.update((m.id, m) for topic in document_topics() for m in topic.messages)
    described = build_messages(names)
    if set(described) != set(declared):
        raise ValueError(
            f"messages without a description: {sorted(set(declared) - set(described))}; "
            f"described but carried by no channel: {sorted(set(described) - set(declared))}")
    for message_id, message in declared.items():
        if message.model is not None:
            [file] = [s.filename for s in RECORD_SCHEMAS if s.target is message.model]
            described[message_id]["payload"] = payload(file)
    return described


def asyncapi_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every topic (contract §1), for one topic prefix."""
    names = TopicNames(prefix)
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
        "channels": build_channels(names),
        "operations": build_operations(names),
        "components": {"messages": _messages(names), "tags": _tags(names)},
    }
