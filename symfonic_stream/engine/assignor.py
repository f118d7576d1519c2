"""The group's partition assignor: balanced, sticky, and warm before a partition moves.

aiokafka's own assignors (range, round robin) know nothing of state: when an instance
joins, half the partitions move to it at once and stall while it restores them (4.7-4.9 s
with a million open runs on 12 partitions, issue 36). This one follows Kafka Streams'
KIP-441:

1. **target**: each member gets its share (the partition count over the members, the
   remainder to those that own most now), keeping what it owns up to its share, then the
   rest to the members under their share, warmest first;
2. **warm-up**: a partition whose target is not warm for it (its state more than
   :data:`WARM_LAG` changelog records behind, or none) stays with its current owner, and
   the target is told to warm it up: it restores and tails that changelog as a standby
   (:mod:`symfonic_stream.state.kept`) while the owner goes on;
3. **probing**: once a member's warm-ups caught up it asks the group to rebalance, and
   the warm-up rule lets the partitions move, each restoring only a tail.

A partition without a current owner (the first assignment, an owner that left) goes to its
target at once: nothing goes on processing it meanwhile. Each member says, in its
JoinGroup metadata, which partitions it owned and how far behind its kept state of the
others is; the leader's assignment tells each member what to warm up. A member of an
older version (without this assignor) makes the group use round robin: every member lists
it second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

log = logging.getLogger(__name__)

#: Changelog records behind its end a member's state of a partition may be and still take
#: it over (at ~1.1 s per 100,000 runs restored, 10,000 records cost ~0.1 s).
WARM_LAG = 10_000
NAME = "symfonic-warm-up"


@dataclass(frozen=True, slots=True)
class Warmth:
    """What one member says of itself when it joins."""

    #: The partitions it owned until this rebalance.
    owned: frozenset[int] = frozenset()
    #: For each partition it holds state of: changelog records its state is behind.
    lags: Mapping[int, int] = field(default_factory=dict)

    def warm(self, partition: int) -> bool:
        lag = self.lags.get(partition)
        return lag is not None and lag <= WARM_LAG

    def encode(self) -> bytes:
        return orjson.dumps({"v": 1, "owned": sorted(self.owned),
                             "lags": {str(p): lag for p, lag in self.lags.items()}})

    @classmethod
    def decode(cls, data: bytes | None) -> Warmth:
        """A member's metadata; a member that says nothing readable holds nothing."""
        try:
            found = orjson.loads(data or b"{}")
            return cls(frozenset(int(p) for p in found.get("owned", ())),
                       {int(p): int(lag) for p, lag in found.get("lags", {}).items()})
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            return cls()


@dataclass(slots=True)
class Plan:
    """One member's part of an assignment."""

    active: list[int] = field(default_factory=list)
    warm_up: list[int] = field(default_factory=list)


def plan(partitions: Sequence[int], members: Mapping[str, Warmth]) -> dict[str, Plan]:
    """Steps 1 and 2 (the module's docstring) for one topic's ``partitions``."""
    ids = sorted(members)
    if not ids:
        return {}
    target = _target(sorted(partitions), members, ids)
    owner = {p: m for m in ids for p in members[m].owned}
    plans = {m: Plan() for m in ids}
    for member in ids:
        for partition in target[member]:
            current = owner.get(partition)
            if current is not None and current != member and not members[member].warm(partition):
                plans[current].active.append(partition)
                plans[member].warm_up.append(partition)
            else:
                plans[member].active.append(partition)
    for entry in plans.values():
        entry.active.sort()
    return plans


def _target(partitions: list[int], members: Mapping[str, Warmth],
            ids: list[str]) -> dict[str, list[int]]:
    """The target: every member its share, sticky, the rest to the warmest."""
    base, extra = divmod(len(partitions), len(ids))
    wanted = set(partitions)
    by_owned = sorted(ids, key=lambda m: (-len(members[m].owned & wanted), m))
    share = {m: base + (1 if n < extra else 0) for n, m in enumerate(by_owned)}
    target: dict[str, list[int]] = {m: [] for m in ids}
    taken: set[int] = set()
    for member in ids:
        for partition in sorted(members[member].owned & wanted - taken):
            if len(target[member]) < share[member]:
                target[member].append(partition)
                taken.add(partition)
    left = [p for p in partitions if p not in taken]
    for partition in left:
        open_ = [m for m in ids if len(target[m]) < share[m]]
        best = min(open_, key=lambda m: (members[m].lags.get(partition, 1 << 62),
                                         len(target[m]), m))
        target[best].append(partition)
    return target


def warm_up_assignor(
    topic: str,
    warmth: Callable[[], Warmth],
    on_warm_up: Callable[[list[int]], None],
) -> type[AbstractPartitionAssignor]:
    """The assignor class of one engine (aiokafka calls an assignor's class methods):
    ``warmth`` says what this member holds when it joins; ``on_warm_up`` gets the
    partitions the leader asks it to warm up."""

    class WarmUpAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
        name = NAME
        version = 0

        @classmethod
        def assign(cls, cluster: ClusterMetadata,
                   members: Mapping[str, ConsumerProtocolMemberMetadata],
                   ) -> dict[str, ConsumerProtocolMemberAssignment]:
            partitions = sorted(cluster.partitions_for_topic(topic) or ())
            said = {m: Warmth.decode(meta.user_data) for m, meta in members.items()}
            plans = plan(partitions, said)
            log.info("assignment planned", extra={
                "active": {m: p.active for m, p in plans.items()},
                "warm_up": {m: p.warm_up for m, p in plans.items() if p.warm_up}})
            return {m: ConsumerProtocolMemberAssignment(
                cls.version, [(topic, p.active)],
                orjson.dumps({"v": 1, "warm_up": p.warm_up})) for m, p in plans.items()}

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, sorted(topics), warmth().encode())

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            try:
                found = orjson.loads(assignment.user_data or b"{}")
                warm_up = [int(p) for p in found.get("warm_up", ())]
            except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
                warm_up = []
            on_warm_up(warm_up)

    return WarmUpAssignor
