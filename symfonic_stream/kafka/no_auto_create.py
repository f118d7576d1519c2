"""No metadata request this project makes may create a topic.

Apache Kafka ships with ``auto.create.topics.enable=true``, and a Metadata request (v4 and
later) carries ``allow_auto_topic_creation``: when both are true, asking about a topic that
does not exist creates it, with the broker's defaults (one partition, ``cleanup.policy=
delete``). aiokafka sets the flag on every Metadata request it builds: the producers' and
consumers' metadata refresh (``partitions_for``, ``subscribe``) and the admin client's
``describe_topics`` and ``list_topics``. So ``topics ensure`` describing the topics it is
about to create would create them first, wrongly (a changelog neither compacted nor
co-partitioned), and a consumer or a reader started before ``topics ensure`` would do the
same. The Java clients stopped this for the admin client (KAFKA-5291) and made it a
consumer setting that the producer never exposes (KIP-361, ``allow.auto.create.topics``).

:func:`forbid_topic_auto_creation` makes aiokafka's ``MetadataRequest`` default to
``allow_auto_topic_creation=False`` (an explicit ``True`` would still pass through; nothing
here passes one). It runs when :mod:`symfonic_stream.kafka` is imported, which every client
the project builds goes through; topics are created only by CreateTopics, with the
settings contract §5-6 names (:mod:`symfonic_stream.kafka.admin`).
"""

from __future__ import annotations

import inspect
from typing import Any

from aiokafka.protocol import metadata as aiokafka_metadata

_MARK = "_symfonic_no_auto_create"


class IncompatibleAiokafka(RuntimeError):
    """aiokafka's MetadataRequest no longer looks the way this workaround expects."""


def forbid_topic_auto_creation() -> None:
    """Make every MetadataRequest aiokafka builds ask the broker not to create topics."""
    request_class: Any = aiokafka_metadata.MetadataRequest
    if getattr(request_class, _MARK, False):
        return
    original = request_class.__init__
    parameters = inspect.signature(original).parameters
    if "allow_auto_topic_creation" not in parameters:
        # Fail at import, loudly: silently creating topics again would be far worse.
        raise IncompatibleAiokafka(
            "aiokafka's MetadataRequest has no allow_auto_topic_creation parameter: "
            "update symfonic_stream/kafka/no_auto_create.py"
        )

    def __init__(
        self: Any, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
    ) -> None:
        allow = False if allow_auto_topic_creation is None else allow_auto_topic_creation
        original(self, topics, allow)

    request_class.__init__ = __init__
    setattr(request_class, _MARK, True)


def metadata_allows_auto_creation(version: int = 5) -> bool:
    """What a MetadataRequest for one topic asks of the broker (the unit test's check)."""
    structs = {
        4: aiokafka_metadata.MetadataRequest_v4,
        5: aiokafka_metadata.MetadataRequest_v5,
    }
    built: Any = aiokafka_metadata.MetadataRequest(["some-topic"]).build(structs[version])
    return bool(built.allow_auto_topic_creation)
