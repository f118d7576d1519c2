"""Fencing by consumer-group generation (KIP-447): the two requests aiokafka 0.14 cannot make.

The engine writes through one producer for all of a process's partitions, as Kafka Streams'
``exactly_once_v2`` and Quix Streams do (``engine/committer.py``): its transactions per
second do not grow with the partitions. It is safe only with two requests aiokafka 0.14
does not make (it sends TxnOffsetCommit v0 and OffsetFetch up to v3):

* **TxnOffsetCommit v3** carries the member's generation and id, so the group coordinator
  refuses the offsets of a zombie whose partitions were reassigned (``ILLEGAL_GENERATION``,
  ``UNKNOWN_MEMBER_ID``, ``FENCED_INSTANCE_ID``) and its transaction can only abort;
* **OffsetFetch v7** with ``require_stable`` answers ``UNSTABLE_OFFSET_COMMIT`` while a
  transaction still holds offsets for a partition, so its new owner waits for that
  transaction's end instead of reading what it would then process twice.

Both are here, checked against every broker of the test matrix by
``tests/integration/test_group_fencing.py``; the engine's commit (step 6) and set-up
(step 2) use them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import ConnectionGroup, CoordinationType
from aiokafka.errors import GroupAuthorizationFailedError, for_code
from aiokafka.producer.sender import TxnOffsetCommitHandler
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

#: The group coordinator's answers that mean "this member's generation is over":
#: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
GENERATION_ERRORS = frozenset({22, 25, 82})
UNSTABLE_OFFSET_COMMIT = 88
_NO_LEADER_EPOCH = -1
_TAGS = ("tags", TaggedFields)
_NAME = ("name", CompactString("utf-8"))
#: A partition's committed position, as both requests' schemas spell it.
_COMMITTED = (("partition_index", Int32), ("committed_offset", Int64),
              ("committed_leader_epoch", Int32))


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
                *_COMMITTED, ("committed_metadata", CompactString("utf-8")), _TAGS)),
            _TAGS)),
        _TAGS,
    )


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            _NAME,
            ("partitions", CompactArray(
                *_COMMITTED, ("metadata", CompactString("utf-8")), ("error_code", Int16), _TAGS)),
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


class OffsetFetchV7(OneVersion):
    API_KEY = 9


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


class OffsetsUnstable(Exception):
    """A transaction still holds offsets for these partitions; ask again shortly."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        super().__init__(f"offsets pending in a transaction: {sorted(partitions)}")
        self.partitions = partitions


def group_metadata(consumer: AIOKafkaConsumer) -> GroupMetadata:
    """The consumer's current generation (aiokafka keeps it on its group coordinator)."""
    coordinator: Any = consumer._coordinator
    return GroupMetadata(
        group_id=coordinator.group_id,
        generation_id=coordinator.generation,
        member_id=coordinator.member_id,
        group_instance_id=getattr(coordinator, "_group_instance_id", None),
    )


def _by_topic(offsets: Mapping[TopicPartition, Any]) -> list[tuple[Any, ...]]:
    grouped: dict[str, list[tuple[Any, ...]]] = collections.defaultdict(list)
    for tp, committed in sorted(offsets.items()):
        grouped[tp.topic].append(
            (tp.partition, committed.offset, _NO_LEADER_EPOCH, committed.metadata, {}))
    return [(topic, partitions, {}) for topic, partitions in grouped.items()]


class _GenerationOffsetsHandler(TxnOffsetCommitHandler):  # type: ignore[misc]
    """aiokafka's TxnOffsetCommit step, sending v3 with the member's generation."""

    def __init__(self, sender: Any, offsets: Any, group_id: str, member: GroupMetadata) -> None:
        super().__init__(sender, offsets, group_id)
        self._member = member

    def create_request(self) -> TxnOffsetCommitV3:
        txn = self._sender._txn_manager
        member = self._member
        return TxnOffsetCommitV3(
            TxnOffsetCommitRequest_v3, txn.transactional_id, self._group_id, txn.producer_id,
            txn.producer_epoch, member.generation_id, member.member_id,
            member.group_instance_id, _by_topic(self._offsets), {})

    def handle_response(self, resp: Any) -> float | None:
        errors = [(name, [(index, code) for index, code, _ in partitions])
                  for name, partitions, _ in resp.topics]
        refused = {code for _, partitions in errors for _, code in partitions} & GENERATION_ERRORS
        if refused:
            exc = GenerationFenced(
                f"{for_code(min(refused)).__name__}: generation {self._member.generation_id}"
                f" of member {self._member.member_id!r} in group {self._group_id!r} is over")
            self._sender._txn_manager.error_transaction(exc)
            return None
        result: float | None = super().handle_response(SimpleNamespace(errors=errors))
        return result


async def send_offsets_fenced(
    producer: AIOKafkaProducer, offsets: Mapping[TopicPartition, int], member: GroupMetadata,
) -> None:
    """``producer.send_offsets_to_transaction`` with the member's generation (v3).

    aiokafka's own steps (AddOffsetsToTxn, retries, coordinator lookup) are kept; only the
    TxnOffsetCommit it sends is replaced, for this producer. Raises :class:`GenerationFenced`
    when the coordinator refuses the generation; the transaction must then be aborted.
    """
    if not member.in_generation:
        raise GenerationFenced(f"member of group {member.group_id!r} without a generation: "
                               "its membership was lost")
    sender: Any = producer._sender

    async def txn_offset_commit(pending: Any, group_id: str) -> bool | None:
        if not pending:
            return None
        try:
            node_id = await sender._find_coordinator(CoordinationType.GROUP, group_id)
        except GroupAuthorizationFailedError as exc:
            sender._txn_manager.error_transaction(exc)
            return None
        done: bool = await _GenerationOffsetsHandler(sender, pending, group_id, member).do(node_id)
        return done

    sender._do_txn_offset_commit = txn_offset_commit
    try:
        await producer.send_offsets_to_transaction(dict(offsets), member.group_id)
    except GenerationFenced:
        # aiokafka parks the same error on its transaction waiter, which nobody awaits.
        waiter: Any = sender._txn_manager._transaction_waiter
        if waiter.done() and not waiter.cancelled():
            waiter.exception()
        raise


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
