"""``operations``: who sends and receives on each channel, outside the project (declared on
the topics) and inside it (each engine of a deployed consumer, each reader)."""

from __future__ import annotations

from typing import Any

from symfonic_stream.consumers import READERS, Consumer, Engine, Message, deployed
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import DEAD_LETTER, STATE_CHANGE
from symfonic_stream.tools.schemas.asyncapi.channels import changelog_channel_id, document_topics
from symfonic_stream.tools.schemas.asyncapi.objects import camel, group_binding, ref, upper_first


def _operation(action: str, channel_id: str, summary: str, tag: str,
               messages: tuple[Message, ...], group: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "action": action,
        "channel": ref(f"#/channels/{channel_id}"),
        "summary": summary,
        "messages": [ref(f"#/channels/{channel_id}/messages/{m.id}") for m in messages],
        "tags": [ref(f"#/components/tags/{tag}")],
    }
    if group is not None:
        body["bindings"] = group_binding(group)
    return body


def _engine_operations(consumer: Consumer, engine: Engine, names: TopicNames
                       ) -> dict[str, Any]:
    """An engine receives with its group and sends its outputs, dead letters and state in
    one transaction with its input offsets; a stateful one restores its state first."""
    me, tag, group = camel(engine.name), consumer.name, names.group(engine.name)
    found = {f"{me}Receive": _operation(
        "receive", engine.reads.id, f"The {engine.name} consumer reads its input in group "
        f"{group}.", tag, engine.reads.messages, group)}
    for write in engine.writes:
        found[f"{me}Send{upper_first(write.topic.id)}"] = _operation(
            "send", write.topic.id,
            f"{write.summary} Committed in one transaction with the input offsets.",
            tag, write.carries())
    found[f"{me}Send{upper_first(DEAD_LETTER.id)}"] = _operation(
        "send", DEAD_LETTER.id, "Records it cannot process, in the same transaction.", tag,
        DEAD_LETTER.messages)
    if engine.stores:
        changelog = changelog_channel_id(engine)
        state = (STATE_CHANGE,)
        found[f"{me}WriteState"] = _operation(
            "send", changelog, "State changes, in the same transaction as the output.", tag,
            state)
        found[f"{me}RestoreState"] = _operation(
            "receive", changelog, "Replays the changelog partitions of its assigned input "
            "partitions before consuming.", tag, state)
    return found


def build_operations(names: TopicNames) -> dict[str, Any]:
    operations: dict[str, Any] = {}
    for topic in document_topics():
        for outside in topic.outside:
            operations[outside.operation] = _operation(
                outside.action, topic.id, outside.summary, "external", topic.messages)
    for consumer in deployed():
        for engine in consumer.engines:
            operations.update(_engine_operations(consumer, engine, names))
    for reader in READERS:
        for topic in reader.reads:
            operations[f"{camel(reader.name)}Receive{upper_first(topic.id)}"] = _operation(
                "receive", topic.id, f"The {reader.name} reads every partition, in no group "
                "(read_committed).", reader.name, topic.messages)
        for write in reader.writes:
            operations[f"{camel(reader.name)}Send{upper_first(write.topic.id)}"] = _operation(
                "send", write.topic.id, write.summary, reader.name, write.carries())
    return operations
