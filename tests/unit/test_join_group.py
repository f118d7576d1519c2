"""One JoinGroup per join with two assignors (symfonic_stream/kafka/join_group.py,
aio-libs/aiokafka#1168): aiokafka's own rebalance class, against a coordinator that
answers like Kafka's and records what it is sent."""

from __future__ import annotations

from typing import Any

from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.protocol.group import JoinGroupRequest, SyncGroupRequest

import symfonic_stream.kafka  # noqa: F401  (installs join_once)
from symfonic_stream.engine.assignor import NAME, Warmth, warm_up_assignor

TOPIC = "acme.agent-events"


class _Response:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Coordinator:
    """The group coordinator's side aiokafka's rebalance class talks to; a follower's
    join: Kafka answers a JoinGroup with the generation, a SyncGroup with an assignment."""

    member_id = "member-1"
    generation = -1
    _group_instance_id = None
    _rebalance_timeout_ms = 30_000

    def __init__(self) -> None:
        self.sent: list[Any] = []
        #: Each JoinGroup's protocols when it was sent (aiokafka's request holds the list
        #: its loop goes on filling).
        self.joins: list[list[str]] = []

    async def _send_req(self, request: Any) -> Any:
        self.sent.append(request)
        if isinstance(request, JoinGroupRequest):
            self.joins.append([name for name, _ in request._group_protocols])
            return _Response(error_code=0, member_id=self.member_id, generation_id=7,
                             group_protocol=NAME, leader_id="member-0")
        assert isinstance(request, SyncGroupRequest)
        assignment = ConsumerProtocolMemberAssignment(0, [(TOPIC, [0, 1])], b"{}").encode()
        return _Response(error_code=0, member_assignment=assignment)

    def request_rejoin(self) -> None:
        raise AssertionError("a clean join asks for no rejoin")


class _Subscription:
    topics = frozenset({TOPIC})
    active = True


def _rebalance(coordinator: _Coordinator) -> CoordinatorGroupRebalance:
    assignors = [warm_up_assignor(TOPIC, Warmth, lambda partitions: None),
                 RoundRobinPartitionAssignor]
    return CoordinatorGroupRebalance(coordinator, "acme-typed", 1, _Subscription(),
                                     assignors, 10_000, 100)


async def test_a_join_with_two_assignors_sends_one_join_group_listing_both() -> None:
    coordinator = _Coordinator()
    protocol, assignment = await _rebalance(coordinator).perform_group_join()
    assert coordinator.joins == [[NAME, "roundrobin"]]
    assert protocol == NAME and assignment
    assert "_send_req" not in vars(coordinator)  # the coordinator's own method again


async def test_aiokafkas_own_join_sends_one_join_group_per_assignor() -> None:
    """What join_once corrects (if aiokafka fixes it, this fails: drop join_group.py)."""
    coordinator = _Coordinator()
    original = CoordinatorGroupRebalance.perform_group_join.__wrapped__
    await original(_rebalance(coordinator))
    assert coordinator.joins == [[NAME], [NAME, "roundrobin"]]
