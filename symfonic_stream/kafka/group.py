"""The consumer group outside a transaction: its committed offsets at set-up, asked so that
a transaction still holding them is waited for, and a static member leaving it on purpose.

aiokafka 0.14 cannot make either request:

* **OffsetFetch v7** with ``require_stable`` answers ``UNSTABLE_OFFSET_COMMIT`` while a
  transaction still holds offsets for a partition, so its new owner waits for that
  transaction's end instead of reading what it would then process twice (set-up step 2, wait for
  stable offsets, ``engine/setup.py``); aiokafka speaks OffsetFetch up to v3.
* **LeaveGroup v3** with the member's instance id. A member with a ``group.instance.id``
  (static membership, KIP-345) sends no LeaveGroup when it stops: a restart then gets its
  partitions back without a rebalance, but a member that goes for good (a scale-down) holds
  its partitions unassigned until its session times out, 10 s by default. aiokafka speaks
  LeaveGroup v0 and v1 only, which name a member by its member id and cannot remove a
  static member, so a consumer told to (``SYMFONIC_LEAVE_GROUP_ON_STOP``) sends v3 itself
  once it stopped, naming its instance id and the member id it last had, as Kafka Streams'
  ``close(leaveGroup=true)`` does (KIP-812). A successor that already took the instance id
  over has another member id, and the coordinator answers FENCED_INSTANCE_ID instead of
  removing it.

Both are checked against every broker of the test matrix
(``tests/integration/test_group_fencing.py``, ``test_static_leave.py``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import ConnectionGroup, CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Array,
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import admin_kwargs

log = logging.getLogger(__name__)

UNSTABLE_OFFSET_COMMIT = 88
_TAGS = ("tags", TaggedFields)
_NAME = ("name", CompactString("utf-8"))


# -- a transaction's offsets, fenced by the group's generation (TxnOffsetCommit v3; sent by
#    kafka/producer.py) ---------------------------------------------------------------------

#: The group coordinator's answers that mean "this member's generation is over":
#: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
GENERATION_ERRORS = frozenset({22, 25, 82})
_NO_LEADER_EPOCH = -1
#: A partition's committed position, as the offset requests' schemas spell it.
COMMITTED = (("partition_index", Int32), ("committed_offset", Int64),
             ("committed_leader_epoch", Int32))


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Who commits: what a consumer's generation is, as the group coordinator knows it."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None

    @property
    def in_generation(self) -> bool:
        """Whether it is a member of a generation. aiokafka forgets both when it learns its
        membership was lost, and then calls the revocation listener; offsets sent with
        generation -1 are taken without any check (a commit from outside the group), so a
        zombie's would be too."""
        return self.generation_id >= 0 and bool(self.member_id)


class GenerationFenced(Exception):
    """The group coordinator refused offsets: the member's generation is over (a rebalance
    gave its partitions to another); the transaction can only abort."""


def group_metadata(consumer: Any) -> GroupMetadata:
    """A consumer's current generation (aiokafka keeps it on its group coordinator)."""
    coordinator: Any = consumer._coordinator
    return GroupMetadata(
        group_id=coordinator.group_id,
        generation_id=coordinator.generation,
        member_id=coordinator.member_id,
        group_instance_id=getattr(coordinator, "_group_instance_id", None),
    )


class TxnOffsetCommitResponse_v3(Response):  # type: ignore[misc]  # aiokafka's naming
    API_KEY = 28
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            _NAME,
            ("partitions", CompactArray(("partition_index", Int32), ("error_code", Int16), _TAGS)),
            _TAGS)),
        _TAGS,
    )


class TxnOffsetCommitRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),
        ("topics", CompactArray(
            _NAME,
            ("partitions", CompactArray(
                *COMMITTED, ("committed_metadata", CompactString("utf-8")), _TAGS)),
            _TAGS)),
        _TAGS,
    )


class OneVersion(Request[Any]):  # type: ignore[misc]
    """A request of one version: aiokafka's client negotiates versions per ``Request``,
    and fails with ``NotImplementedError`` when the broker does not speak this one."""

    API_KEY = -1

    def __init__(self, struct: type[RequestStruct], *fields: Any) -> None:
        self._struct = struct
        self._fields = fields
        # Per instance: this request has the one version.
        self._CLASSES = (struct,)

    def build(self, request_struct_class: type[Any]) -> Any:
        return request_struct_class(*self._fields)


class TxnOffsetCommitV3(OneVersion):
    API_KEY = 28


def by_topic(offsets: Mapping[TopicPartition, Any]) -> list[tuple[Any, ...]]:
    grouped: dict[str, list[tuple[Any, ...]]] = collections.defaultdict(list)
    for tp, committed in sorted(offsets.items()):
        grouped[tp.topic].append(
            (tp.partition, committed.offset, _NO_LEADER_EPOCH, committed.metadata, {}))
    return [(topic, partitions, {}) for topic, partitions in grouped.items()]



class OffsetsUnstable(Exception):
    """A transaction still holds offsets for these partitions; ask again shortly."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        super().__init__(f"offsets pending in a transaction: {sorted(partitions)}")
        self.partitions = partitions


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            _NAME,
            ("partitions", CompactArray(
                *COMMITTED, ("metadata", CompactString("utf-8")), ("error_code", Int16), _TAGS)),
            _TAGS)),
        ("error_code", Int16),
        _TAGS,
    )


class OffsetFetchRequest_v7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("topics", CompactArray(_NAME, ("partition_indexes", CompactArray(Int32)), _TAGS)),
        ("require_stable", Boolean),
        _TAGS,
    )


class OffsetFetchV7(OneVersion):
    API_KEY = 9


async def fetch_stable_offsets(
    consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, int | None]:
    """The group's committed offsets (``None``: none yet), refusing any still pending in a
    transaction: raises :class:`OffsetsUnstable` naming those partitions."""
    coordinator: Any = consumer._coordinator
    await coordinator.ensure_coordinator_known()
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    request = OffsetFetchV7(
        OffsetFetchRequest_v7, coordinator.group_id,
        [(topic, sorted(indexes), {}) for topic, indexes in by_topic.items()], True, {})
    client: Any = consumer._client
    resp = await client.send(
        coordinator.coordinator_id, request, group=ConnectionGroup.COORDINATION)
    if resp.error_code:
        raise for_code(resp.error_code)()
    committed: dict[TopicPartition, int | None] = {}
    unstable: list[TopicPartition] = []
    for name, rows, _ in resp.topics:
        for index, offset, _epoch, _metadata, code, _ in rows:
            tp = TopicPartition(name, index)
            if code == UNSTABLE_OFFSET_COMMIT:
                unstable.append(tp)
            elif code:
                raise for_code(code)()
            else:
                committed[tp] = offset if offset >= 0 else None
    if unstable:
        raise OffsetsUnstable(unstable)
    return committed


# -- a static member leaving ----------------------------------------------------------------

#: How long a stopping consumer tries to leave before it lets the session timeout do it.
LEAVE_TIMEOUT_S = 5.0
_MEMBER = (("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]  # aiokafka's naming
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("members", Array(*_MEMBER, ("error_code", Int16))),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(("group_id", String("utf-8")), ("members", Array(*_MEMBER)))


class LeaveGroupV3(OneVersion):
    API_KEY = 13


async def leave_group(settings: Settings, group_id: str, instance_id: str,
                      member_id: str) -> bool:
    """Remove this static member from ``group_id``; whether the coordinator did. Through a
    client of its own (the consumer's is stopped by then: a consumer still running would
    rejoin at its next heartbeat). A failure is logged, not raised: the session timeout
    still ends the membership."""
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    try:
        async with asyncio.timeout(LEAVE_TIMEOUT_S):
            await admin.start()
            client = admin._client
            node = await client.coordinator_lookup(CoordinationType.GROUP, group_id)
            response = await client.send(node, LeaveGroupV3(
                LeaveGroupRequest_v3, group_id, [(member_id, instance_id)]))
    except Exception as exc:  # (a stop must go on: the session timeout is the fallback)
        log.warning("leaving the group failed; its session timeout will end the membership",
                    extra={"group": group_id, "error": repr(exc)})
        return False
    finally:
        await admin.close()
    errors = [response.error_code, *(member[2] for member in response.members)]
    failed = next((code for code in errors if code != 0), 0)
    if failed:
        log.warning("the coordinator refused to remove this member",
                    extra={"group": group_id, "error": for_code(failed).__name__})
        return False
    log.info("left the group", extra={"group": group_id, "group_instance_id": instance_id})
    return True
