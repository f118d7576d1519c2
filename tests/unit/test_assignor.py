"""The warm-up assignor's plan (engine/assignor.py): balanced, sticky, and no partition
moves to a member that has not warmed it up while its owner is there to go on."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from symfonic_stream.engine.assignor import WARM_LAG, Warmth, plan, warm_up_assignor

TWELVE = list(range(12))


def _all(p: dict[str, Any]) -> list[int]:
    return sorted(x for entry in p.values() for x in entry.active)


def test_one_member_gets_everything() -> None:
    assert plan(TWELVE, {"a": Warmth()})["a"].active == TWELVE


def test_a_cold_member_warms_up_its_share_while_the_owner_goes_on() -> None:
    a = Warmth(frozenset(TWELVE), dict.fromkeys(TWELVE, 0))
    plans = plan(TWELVE, {"a": a, "b": Warmth()})
    assert plans["a"].active == TWELVE
    assert plans["b"].active == [] and len(plans["b"].warm_up) == 6
    assert set(plans["b"].warm_up).isdisjoint(range(6))  # a keeps the ones it would anyway


def test_once_warm_the_share_moves() -> None:
    a = Warmth(frozenset(TWELVE), dict.fromkeys(TWELVE, 0))
    cold = plan(TWELVE, {"a": a, "b": Warmth()})
    warm_b = Warmth(frozenset(), dict.fromkeys(cold["b"].warm_up, WARM_LAG))
    plans = plan(TWELVE, {"a": a, "b": warm_b})
    assert plans["b"].active == sorted(cold["b"].warm_up) and plans["b"].warm_up == []
    assert len(plans["a"].active) == 6 and _all(plans) == TWELVE


def test_state_further_behind_than_the_warm_lag_is_not_warm() -> None:
    a = Warmth(frozenset(TWELVE), dict.fromkeys(TWELVE, 0))
    behind = Warmth(frozenset(), dict.fromkeys(TWELVE, WARM_LAG + 1))
    assert plan(TWELVE, {"a": a, "b": behind})["b"].active == []


def test_a_partition_without_an_owner_goes_to_the_warmest_member_at_once() -> None:
    # c owned 8-11 and left; a kept state of 8-9 (it owned them before), b of nothing.
    a = Warmth(frozenset(range(4)), {**dict.fromkeys(range(4), 0), 8: 5, 9: 5})
    b = Warmth(frozenset(range(4, 8)), dict.fromkeys(range(4, 8), 0))
    plans = plan(TWELVE, {"a": a, "b": b})
    assert plans["a"].active == [0, 1, 2, 3, 8, 9] and plans["b"].active == [4, 5, 6, 7, 10, 11]
    assert plans["a"].warm_up == plans["b"].warm_up == []


def test_members_keep_what_they_own_when_a_third_joins() -> None:
    a = Warmth(frozenset(range(6)), dict.fromkeys(range(6), 0))
    b = Warmth(frozenset(range(6, 12)), dict.fromkeys(range(6, 12), 0))
    c_warm = Warmth(frozenset(), dict.fromkeys(TWELVE, 0))
    plans = plan(TWELVE, {"a": a, "b": b, "c": c_warm})
    assert set(plans["a"].active) <= set(range(6)) and set(plans["b"].active) <= set(range(6, 12))
    assert [len(plans[m].active) for m in "abc"] == [4, 4, 4]


@settings(max_examples=300, derandomize=True)
@given(st.integers(1, 24), st.lists(st.tuples(st.sets(st.integers(0, 23)),
                                              st.dictionaries(st.integers(0, 23),
                                                              st.integers(0, 3 * WARM_LAG))),
                                    min_size=1, max_size=5))
def test_every_partition_is_active_exactly_once_and_moves_only_warm(
    count: int, said: list[tuple[set[int], dict[int, int]]]
) -> None:
    partitions = list(range(count))
    owned: set[int] = set()
    members = {}
    for n, (mine, lags) in enumerate(said):
        mine = (mine & set(partitions)) - owned  # a partition has one owner
        owned |= mine
        members[f"m{n}"] = Warmth(frozenset(mine), lags)
    plans = plan(partitions, members)
    assert _all(plans) == partitions
    owner = {p: m for m, w in members.items() for p in w.owned}
    for member, entry in plans.items():
        for p in entry.active:  # a partition moves away from a live owner only when warm
            assert owner.get(p, member) == member or members[member].warm(p)
        assert set(entry.warm_up).isdisjoint(entry.active)
    if all(not w.owned for w in members.values()):  # nothing to defer: balanced
        sizes = [len(e.active) for e in plans.values()]
        assert max(sizes) - min(sizes) <= 1


def test_the_assignor_speaks_the_group_protocol() -> None:
    warm_ups: list[list[int]] = []
    said = Warmth(frozenset(TWELVE), dict.fromkeys(TWELVE, 0))
    assignor = warm_up_assignor("src", lambda: said, warm_ups.append)
    meta = assignor.metadata(["src"])
    assert Warmth.decode(meta.user_data) == said
    cold = SimpleNamespace(user_data=b"not json")
    cluster: Any = SimpleNamespace(partitions_for_topic=lambda topic: set(TWELVE))
    out = assignor.assign(cluster, {"a": meta, "b": cold})
    assert out["a"].assignment[0] == ("src", TWELVE)
    assert len(orjson.loads(out["b"].user_data)["warm_up"]) == 6
    assignor.on_assignment(out["b"])
    assert len(warm_ups[-1]) == 6
