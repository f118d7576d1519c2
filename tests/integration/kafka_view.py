"""What the cluster itself says about who holds what: the leader of a partition, the
coordinator of a group or of a transactional id, and a transactional id's transaction.

The tests ask these instead of assuming them: the cluster tests kill the broker that leads
the input or coordinates the group or the transactions, and a kill "mid-transaction"
checks that the victim's own transactional id has a transaction open, not merely that
some writer's transaction is open on the output.

aiokafka has no DescribeTransactions (KIP-664); the request is defined here from Kafka's
message schema (``DescribeTransactionsRequest.json``, v0, a flexible version).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from .conftest import bootstrap_from_env

BOOTSTRAP = bootstrap_from_env()

#: FindCoordinator's key types.
GROUP, TRANSACTION = 0, 1


class DescribeTransactionsResponse_v0(Response):
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("transaction_states", CompactArray(
            ("error_code", Int16),
            ("transactional_id", CompactString("utf-8")),
            ("transaction_state", CompactString("utf-8")),
            ("transaction_timeout_ms", Int32),
            ("transaction_start_time_ms", Int64),
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("topics", CompactArray(
                ("topic", CompactString("utf-8")),
                ("partitions", CompactArray(Int32)),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):
    FLEXIBLE_VERSION: ClassVar[bool] = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest(Request[DescribeTransactionsRequest_v0]):
    API_KEY = 65

    def __init__(self, transactional_ids: list[str]) -> None:
        self._ids = transactional_ids

    def build(self, request_struct_class: type[DescribeTransactionsRequest_v0]
              ) -> DescribeTransactionsRequest_v0:
        return request_struct_class(self._ids, {})


@dataclass(frozen=True)
class Transaction:
    """A transactional id's transaction as its coordinator describes it."""

    transactional_id: str
    #: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead,
    #: PrepareEpochFence (Kafka's TransactionState names).
    state: str
    producer_id: int
    producer_epoch: int
    #: topic -> partitions the transaction has written to.
    partitions: dict[str, frozenset[int]]

    def open_on(self, topic: str) -> bool:
        """Begun and not yet ending, with ``topic`` among what it wrote."""
        return self.state == "Ongoing" and bool(self.partitions.get(topic))


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    return admin


async def coordinator(key: str, kind: int, bootstrap: str = BOOTSTRAP) -> int:
    """The node id of the coordinator of group ``key`` (GROUP) or of transactional id
    ``key`` (TRANSACTION), as FindCoordinator answers; -1 while there is none (its
    partition of the internal topic has no leader now)."""
    admin = await _admin(bootstrap)
    try:
        client: Any = admin._client  # (the admin client's own connections)
        response = await client.send(client.get_random_node(),
                                     FindCoordinatorRequest(key, kind))
    except (KafkaError, OSError):  # the node asked went away meanwhile
        return -1
    finally:
        await admin.close()
    return int(response.coordinator_id) if response.error_code == 0 else -1


async def leaders(topic: str, bootstrap: str = BOOTSTRAP) -> dict[int, int]:
    """partition -> the node id of its leader (-1: none now); nothing while the node asked
    does not answer (it went away: ask again)."""
    admin = await _admin(bootstrap)
    try:
        [described] = await admin.describe_topics([topic])
    except (KafkaError, OSError):
        return {}
    finally:
        await admin.close()
    assert described["error_code"] == 0, described
    return {p["partition"]: p["leader"] for p in described["partitions"]}


async def transactions(transactional_ids: list[str],
                       bootstrap: str = BOOTSTRAP) -> dict[str, Transaction]:
    """Each transactional id's transaction, asked of its coordinator (an id its
    coordinator does not know, or whose coordinator is not available now, is left out)."""
    by_node: dict[int, list[str]] = {}
    for tid in transactional_ids:
        by_node.setdefault(await coordinator(tid, TRANSACTION, bootstrap), []).append(tid)
    by_node.pop(-1, None)
    found: dict[str, Transaction] = {}
    admin = await _admin(bootstrap)
    try:
        client: Any = admin._client  # (the admin client's own connections)
        for node, ids in by_node.items():
            response = await client.send(node, DescribeTransactionsRequest(ids))
            for state in response.transaction_states:
                error, tid, name, _, _, producer_id, epoch, topics = state[:8]
                if error != 0:  # e.g. TRANSACTIONAL_ID_NOT_FOUND: never used
                    continue
                found[tid] = Transaction(tid, name, producer_id, epoch, {
                    topic[0]: frozenset(topic[1]) for topic in topics})
    finally:
        await admin.close()
    return found


def transactional_ids(group: str, source: str, partitions: Iterable[int]) -> list[str]:
    """The engine's transactional ids of ``partitions`` of a group's input
    (``<group>-<topic>-<partition>``, README: exactly once)."""
    return [f"{group}-{source}-{p}" for p in sorted(partitions)]
