"""The state store on its own: changed keys and tombstones, restore, and deadlines."""

from __future__ import annotations

import sys

import pytest

from symfonic_stream.state.store import (
    Codec,
    StateStore,
    StorePartition,
    restore_records,
    write_changes,
)

TEXT: Codec[str] = Codec(str.encode, bytes.decode)


def test_changes_are_the_latest_value_of_each_dirty_key_or_a_tombstone() -> None:
    store = StateStore("run", TEXT)
    store.put("a", "1")
    store.put("a", "2")
    store.put("b", "x")
    store.delete("b")
    store.delete("never-there")
    changes: dict[bytes, bytes | None] = {}
    write_changes([store], changes)
    assert changes == {b"run/a": b"2"}  # b never committed: no tombstone for it
    assert not store.partition.changed
    again: dict[bytes, bytes | None] = {}
    write_changes([store], again)
    assert again == {}


def test_a_store_restores_only_records_under_its_prefix() -> None:
    runs, tickets = StateStore("run", TEXT), StateStore("ticket", TEXT)
    partition = StorePartition([runs, tickets])
    assert partition.apply(b"ticket/t1", b"v")
    assert partition.apply(b"run/r1", b"w")
    assert not partition.apply(b"other/x", b"?")
    assert partition.apply(b"run/r1", None)  # a tombstone
    partition.applied(3)
    assert (tickets.get("t1"), runs.get("r1"), len(runs), len(tickets)) == ("v", None, 0, 1)
    assert partition.offset == 3
    assert restore_records([StateStore("run", TEXT)], [(b"run/x", b"1"), (b"no/y", b"2")]) == 1
    with pytest.raises(ValueError):
        StateStore("a/b", TEXT)


def test_due_yields_each_current_deadline_once_earliest_first() -> None:
    store = StateStore("run", TEXT)
    for key, at in (("late", 30.0), ("early", 10.0), ("moved", 5.0)):
        store.put(key, key)
        store.schedule(key, at)
    store.schedule("moved", 20.0)  # the entry at 5 is stale now
    store.delete("late")
    assert list(store.due(25.0)) == ["early", "moved"]
    assert list(store.due(100.0)) == []
    assert store.deadline("early") is None and store.next_due() is None
    store.schedule("early", 10.0)  # a fired key can be scheduled again, even at its old time
    assert store.deadline("early") == 10.0 and list(store.due(10.0)) == ["early"]


def test_firing_and_rescheduling_keys_does_not_grow_the_deadline_table() -> None:
    # A punctuation fires thousands of keys and schedules most again; with a million keys
    # a dict that must resize costs tens of ms, so the table is overwritten, not churned.
    store = StateStore("run", TEXT)
    for n in range(10_000):
        store.schedule(f"k{n}", 1.0)
    size = sys.getsizeof(store._deadline)
    for round_ in range(1, 20):
        for key in list(store.due(float(round_))):
            store.schedule(key, round_ + 1.0)
    assert sys.getsizeof(store._deadline) == size


def test_a_horizon_drops_the_deadlines_beyond_it_and_keeps_no_new_one_there() -> None:
    store = StateStore("run", TEXT)
    for n in range(10):
        store.schedule(f"k{n}", 100.0 * n)
    store.limit_deadlines_to(450.0)
    assert [store.deadline(f"k{n}") for n in range(10)] == [0.0, 100.0, 200.0, 300.0, 400.0,
                                                           *[None] * 5]
    store.schedule("k1", 900.0)  # moved beyond it: no deadline at all
    store.schedule("k9", 420.0)  # brought within it
    assert store.deadline("k1") is None and store.deadline("k9") == 420.0
    assert list(store.due(1000.0)) == ["k0", "k2", "k3", "k4", "k9"]
    store.limit_deadlines_to(None)
    store.schedule("k1", 900.0)
    assert store.deadline("k1") == 900.0
