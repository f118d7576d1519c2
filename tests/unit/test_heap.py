"""The engine's use of the garbage collector (engine/heap.py): after a set-up, cycles are
collected, what is alive is frozen out of later collections, and young collections wait
for :data:`YOUNG_THRESHOLD` new objects."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from symfonic_stream.engine import garbage as heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def _tracked(obj: object) -> bool:
    """Whether a collection would look at ``obj`` (frozen objects are in no generation)."""
    return any(seen is obj for seen in gc.get_objects())


def test_settle_collects_cycles_and_freezes_what_is_alive() -> None:
    dead = _cycle()
    alive = {"run": [1, 2, 3]}
    heap.settle()
    assert dead() is None
    assert gc.get_freeze_count() > 0
    assert not _tracked(alive)


def test_a_later_settle_collects_what_died_while_frozen() -> None:
    died_frozen = _cycle()
    gc.freeze()  # as an earlier set-up left it, the cycle still referenced
    assert died_frozen() is not None
    gc.collect()
    assert died_frozen() is not None  # a frozen cycle escapes every collection...
    heap.settle()
    assert died_frozen() is None  # ...until the next set-up's settle


def test_settle_raises_only_the_young_threshold() -> None:
    gc.set_threshold(700, 10, 10)
    heap.settle()
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 10, 10)


@pytest.mark.parametrize("young", [0, heap.YOUNG_THRESHOLD * 2])
def test_a_disabled_or_higher_threshold_is_left_alone(young: int) -> None:
    gc.set_threshold(young, 5, 7)
    heap.tune()
    assert gc.get_threshold() == (young, 5, 7)
