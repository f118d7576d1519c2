"""``channels``: every topic the deployment's declarations read or write, and each stateful
engine's changelog, with the messages it carries."""

from __future__ import annotations

from typing import Any

from symfonic_stream.consumers import READERS, Engine, Topic, deployed, engines, topics_of
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import STATE_CHANGE
from symfonic_stream.tools.schemas.asyncapi.objects import KAFKA_BINDING_VERSION, camel, ref


def document_topics() -> tuple[Topic, ...]:
    """The declared topics of a deployment: read or written by its consumers or readers,
    and the dead letters (every engine writes them)."""
    return topics_of(deployed(), READERS)


def changelog_channel_id(engine: Engine) -> str:
    return f"{camel(engine.name)}StateChangelog"


def _channel(address: str, message_ids: tuple[str, ...], description: str,
             **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "address": address,
        "description": description,
        "messages": {name: ref(f"#/components/messages/{name}") for name in message_ids},
    }
    body.update(extra)
    return body


#: A compacted topic's channel bindings.
_COMPACTED = {
    "kafka": {
        "topicConfiguration": {"cleanup.policy": ["compact"]},
        "bindingVersion": KAFKA_BINDING_VERSION,
    }
}


def _topic_channel(topic: Topic, names: TopicNames) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if topic.parameters:
        extra["parameters"] = {key: dict(value) for key, value in topic.parameters.items()}
    if topic.internal:
        extra["tags"] = [ref("#/components/tags/internal")]
    if topic.compact:
        extra["bindings"] = _COMPACTED
    return _channel(topic.name(names), tuple(m.id for m in topic.messages), topic.description,
                    **extra)


def _changelog_channel(engine: Engine, names: TopicNames) -> dict[str, Any]:
    return _channel(
        names.changelog(engine.name),
        (STATE_CHANGE.id,),
        f"Internal: the compacted state changelog of group {names.group(engine.name)}, "
        f"co-partitioned with its input topic.",
        tags=[ref("#/components/tags/internal")],
        bindings=_COMPACTED,
    )


def build_channels(names: TopicNames) -> dict[str, Any]:
    channels = {topic.id: _topic_channel(topic, names) for topic in document_topics()}
    for engine in engines(deployed()):
        if engine.stores:
            channels[changelog_channel_id(engine)] = _changelog_channel(engine, names)
    return channels
