"""The AsyncAPI 3.0 document: info, server, channels, operations and components together."""

from __future__ import annotations

from typing import Any

from symfonic_stream import __version__
from symfonic_stream.models.names import CONSUMERS, TopicNames
from symfonic_stream.tools.schemas.asyncapi.channels import build_channels
from symfonic_stream.tools.schemas.asyncapi.messages import build_messages
from symfonic_stream.tools.schemas.asyncapi.operations import build_operations
from symfonic_stream.tools.schemas.conventions import DEFAULT_PREFIX

ASYNCAPI_VERSION = "3.0.0"


def asyncapi_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every topic (SPEC §1), for one topic prefix."""
    names = TopicNames(prefix)
    channels = build_channels(names)
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
        "operations": build_operations(names, channels),
        "components": {"messages": build_messages(names), "tags": tags},
    }
