"""Rolling back in memory: a store puts every key back to its last committed value.

The reference is the changelog: after any abort, a processor's stores must hold exactly
what a fresh processor restored from the committed changelog records holds (what the
engine rebuilt before stores could roll back), and the committed outputs of a delivery
with aborts anywhere must be the contract's projection of the kernel's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symfonic_stream.engine.records import Collector, OutputRecord
from symfonic_stream.processors.ordering.guard import GuardLimits
from symfonic_stream.processors.projector import ProjectorProcessor
from symfonic_stream.projections.typed import project_typed
from symfonic_stream.state.store import Codec, StateStore, write_changes
from tests.unit.helpers import restore_from, store_contents
from tests.unit.test_guard import Harness, damaged_delivery, expected_records

LIST: Codec[list[str]] = Codec(lambda v: ",".join(v).encode(), lambda b: b.decode().split(","))


def _commit(store: StateStore[Any]) -> dict[bytes, bytes | None]:
    changes: dict[bytes, bytes | None] = {}
    write_changes([store], changes)
    store.committed()
    return changes


def test_a_value_changed_in_place_after_its_get_is_put_back() -> None:
    store: StateStore[list[str]] = StateStore("run", LIST)
    store.track_uncommitted()
    store.put("a", ["1"])
    store.put("gone", ["x"])
    _commit(store)
    value = store.get("a")
    assert value is not None
    value.append("2")  # in place, as the guard changes a run
    store.touch("a")
    store.put("new", ["n"])
    store.delete("gone")
    assert store.roll_back() == 3
    assert (store.get("a"), store.get("new"), store.get("gone")) == (["1"], None, ["x"])
    assert store.dirty == 0
    assert _commit(store) == {}  # nothing uncommitted is written after a roll back


def test_changes_after_a_taken_transaction_roll_back_with_it_or_alone() -> None:
    store: StateStore[list[str]] = StateStore("run", LIST)
    store.track_uncommitted()
    store.put("a", ["1"])
    _commit(store)
    store.put("a", ["2"])  # the transaction being committed...
    taken: dict[bytes, bytes | None] = {}
    write_changes([store], taken)
    assert taken == {b"run/a": b"2"}
    store.put("a", ["3"])  # ...and what was processed meanwhile
    store.put("b", ["b"])
    # It aborts: both go, back to the last commit.
    store.roll_back()
    assert (store.get("a"), store.get("b")) == (["1"], None)

    store.put("a", ["2"])
    write_changes([store], {})
    store.put("a", ["3"])
    store.committed()  # this time it commits: only what followed it goes
    store.roll_back()
    assert store.get("a") == ["2"]


def test_a_roll_back_drops_deadlines_and_a_store_without_images_refuses() -> None:
    store: StateStore[list[str]] = StateStore("run", LIST)
    store.track_uncommitted()
    store.put("a", ["1"])
    store.schedule("a", 5.0)
    store.roll_back()
    assert store.next_due() is None and store.get("a") is None
    with pytest.raises(RuntimeError, match="keeps no before-images"):
        StateStore("run", LIST).roll_back()


def test_a_store_outside_the_engine_keeps_no_images() -> None:
    store: StateStore[list[str]] = StateStore("run", LIST)
    for n in range(100):
        store.put(f"k{n}", ["v"])
        store.get(f"k{n}")
    assert store._images == {}  # offline and replay-free uses pay nothing


@dataclass
class _Partition:
    """A projector processor driven as a task drives it: windows of records, each taken
    into a transaction that commits or aborts while the next window is processed."""

    limits: GuardLimits
    processor: ProjectorProcessor = field(init=False)
    changelog: dict[bytes, bytes | None] = field(default_factory=dict)
    committed: list[OutputRecord] = field(default_factory=list)
    position: int = 0  # the committed offset

    def __post_init__(self) -> None:
        self.processor = _projector(self.limits)
        for store in self.processor.stores:
            store.track_uncommitted()

    def process(self, events: list[dict[str, Any]], start: int, end: int) -> Collector:
        harness = Harness(self.limits)
        harness.processor, harness.offset = self.processor, start
        for event in events[start:end]:
            harness.feed(event)
        return harness.out

    def commit(self, out: Collector, end: int) -> None:
        self.changelog.update(out.state)
        self.committed.extend(out.outputs)
        for store in self.processor.stores:
            store.committed()
        self.position = end

    def roll_back(self) -> None:
        for store in self.processor.stores:
            store.roll_back()
        self.processor.restored()


def _projector(limits: GuardLimits) -> ProjectorProcessor:
    return ProjectorProcessor(project_typed, "out", limits, check_keys=True)


def _contents(processor: ProjectorProcessor) -> tuple[Any, ...]:
    """The stores, and what the guard derives from them (each run's buffer, the counts)."""
    guard = processor.guard
    buffers = {key: sorted(run.buffer) for key, run in guard.runs.items()}
    return (store_contents(processor), buffers, guard.buffered, guard.buffered_bytes,
            list(guard.waiting_runs))


@settings(max_examples=150, deadline=None)
@given(damaged_delivery(), st.data())
def test_aborts_anywhere_leave_what_the_changelog_restores_and_the_kernels_order(
    case: tuple[list[list[dict[str, Any]]], list[dict[str, Any]]], data: st.DataObject
) -> None:
    runs, delivered = case
    limits = GuardLimits(run_buffer_max=1000)
    part = _Partition(limits)
    aborts = 0
    done = 0  # processed up to here (past the position while a window is uncommitted)
    carried: list[OutputRecord] = []  # processed, not yet taken
    while part.position < len(delivered):
        # A transaction takes what was processed; the next records are processed meanwhile.
        end = data.draw(st.integers(done + 1, len(delivered))) if done < len(delivered) else done
        taken = part.process(delivered, done, end)
        taken.outputs[:0] = carried
        write_changes(part.processor.stores, taken.state)  # commit step 2
        done = data.draw(st.integers(end, len(delivered)))
        carried = part.process(delivered, end, done).outputs
        if aborts < 3 and data.draw(st.booleans()):
            aborts += 1  # it aborts: everything since the last commit goes
        else:
            part.commit(taken, end)
            if data.draw(st.booleans()):
                continue  # what was processed meanwhile goes into the next transaction
        # Rolled back (to the position: both windows, or what followed a commit).
        part.roll_back()
        done, carried = part.position, []
        rebuilt = _projector(limits)
        restore_from(rebuilt, part.changelog)
        assert _contents(part.processor) == _contents(rebuilt)
    harness = Harness(limits)
    harness.out.outputs.extend(part.committed)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in harness.records():
        by_run.setdefault(record["run_id"], []).append(record)
    for run in runs:
        assert by_run.get(run[0]["run_id"], []) == expected_records(run)
