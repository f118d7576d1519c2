"""A task's state transaction (state/store.py): what it changes is its own until the commit
flushes it into the backend, and an abort drops it.

The reference is a plain dict per store, changed only by what commits; and, for the guard,
the changelog: after any abort a processor's stores must hold exactly what a fresh
processor restored from the committed changelog records holds, and the committed outputs
of a delivery with aborts anywhere must be the contract's projection of the kernel's order.
Both backends, memory and RocksDB, go through the same random work.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symfonic_stream.engine.processor import Collector, OutputRecord
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor
from symfonic_stream.projections.typed import project_typed
from symfonic_stream.state.disk import DiskBackend
from symfonic_stream.state.store import (
    Backend,
    Codec,
    MemoryBackend,
    StateStore,
    StorePartition,
    partitions_of,
)
from tests.unit.helpers import restore_from, store_contents
from tests.unit.test_guard import Harness, damaged_delivery, expected_records

LIST: Codec[list[str]] = Codec(lambda v: ",".join(v).encode(), lambda b: b.decode().split(","))


def _stores() -> tuple[StateStore[list[str]], StateStore[list[str]]]:
    return StateStore("run", LIST), StateStore("buf", LIST)


def test_a_value_changed_in_place_after_its_get_is_dropped_by_an_abort() -> None:
    runs, _ = stores = _stores()
    partition = StorePartition(stores)
    runs.put("a", ["1"])
    runs.put("gone", ["x"])
    partition.prepare({})
    partition.flush(7)
    value = runs.get("a")
    assert value is not None
    value.append("2")  # in place, as the guard changes a run: the transaction's own copy
    runs.put("new", ["n"])
    runs.delete("gone")
    assert len(runs) == 2
    assert partition.abort() == 3
    assert (runs.get("a"), runs.get("new"), runs.get("gone")) == (["1"], None, ["x"])
    assert not partition.changed and len(runs) == 2 and partition.offset == 7
    changes: dict[bytes, bytes | None] = {}
    partition.prepare(changes)
    assert changes == {}  # nothing of the aborted transaction is written


def test_changes_after_a_prepared_transaction_go_with_it_or_alone() -> None:
    runs, _ = stores = _stores()
    partition = StorePartition(stores)
    runs.put("a", ["1"])
    partition.prepare({})
    partition.flush(1)
    runs.put("a", ["2"])  # the transaction being committed...
    taken: dict[bytes, bytes | None] = {}
    partition.prepare(taken)
    assert taken == {b"run/a": b"2"}
    assert runs.get("a") == ["2"]  # read through what is prepared
    runs.put("a", ["3"])  # ...and what was processed meanwhile
    runs.put("b", ["b"])
    partition.abort()  # it aborts: both go, back to the last commit
    assert (runs.get("a"), runs.get("b"), len(runs)) == (["1"], None, 1)

    runs.put("a", ["2"])
    partition.prepare({})
    runs.put("a", ["3"])
    partition.flush(2)  # this time it commits: only what followed it goes
    partition.abort()
    assert (runs.get("a"), partition.offset) == (["2"], 2)
    with pytest.raises(RuntimeError, match="prepared already"):
        partition.prepare({})
        partition.prepare({})


def test_an_abort_drops_deadlines_and_a_restore_refuses_uncommitted_changes() -> None:
    runs, _ = stores = _stores()
    partition = StorePartition(stores)
    runs.put("a", ["1"])
    runs.schedule("a", 5.0)
    partition.abort()
    assert runs.next_due() is None and runs.get("a") is None
    runs.put("b", ["1"])
    with pytest.raises(RuntimeError, match="uncommitted"):
        partition.apply(b"run/c", b"2")


def test_a_store_outside_the_engine_holds_everything_in_its_transaction() -> None:
    """Offline and in a processor's unit test nothing is ever encoded or flushed."""
    encoded: list[list[str]] = []
    store: StateStore[list[str]] = StateStore(
        "run", Codec(lambda v: encoded.append(v) or b"", LIST.decode))
    for n in range(100):
        store.put(f"k{n}", ["v"])
        store.get(f"k{n}")
    assert encoded == [] and len(store) == 100
    assert [key for key, _ in store.items()] == [f"k{n}" for n in range(100)]


# -- both backends against a reference -------------------------------------------------

Keys = st.sampled_from(["a", "b", "c", "d", "e"])
Steps = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(["run", "buf"]), Keys, st.text("xyz", max_size=3)),
    st.tuples(st.just("append"), st.sampled_from(["run", "buf"]), Keys, st.text("xyz", max_size=2)),
    st.tuples(st.just("delete"), st.sampled_from(["run", "buf"]), Keys, st.just("")),
    st.tuples(st.sampled_from(["prepare", "commit", "abort", "restart"]), st.just(""),
              st.just(""), st.just("")),
), max_size=60)


@dataclass
class _Reference:
    """What each store holds: the last commit, the prepared changes, the open ones."""

    committed: dict[str, dict[str, list[str]]] = field(
        default_factory=lambda: {"run": {}, "buf": {}})
    prepared: dict[str, dict[str, list[str] | None]] | None = None
    open: dict[str, dict[str, list[str] | None]] = field(
        default_factory=lambda: {"run": {}, "buf": {}})

    def value(self, store: str, key: str) -> list[str] | None:
        for layer in (self.open, self.prepared or {}):
            if key in layer.get(store, {}):
                found = layer[store][key]
                return None if found is None else list(found)
        found = self.committed[store].get(key)
        return None if found is None else list(found)

    def now(self, store: str) -> dict[str, list[str]]:
        keys = {*self.committed[store], *(self.prepared or {}).get(store, {}), *self.open[store]}
        return {k: v for k in sorted(keys) if (v := self.value(store, k)) is not None}


def _backend(kind: str, folder: Path, n: int) -> Backend:
    return MemoryBackend() if kind == "memory" else DiskBackend(folder / f"db-{n}", cache_keys=2)


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=Steps)
def test_random_work_commits_aborts_and_restarts_agree_with_the_reference(
        kind: str, tmp_path: Path, steps: list[tuple[str, str, str, str]]) -> None:
    # A folder of its own per example: tmp_path is the test's, shared by every example, and
    # an id() may come back once its list is freed (a database of an earlier example opened).
    folder = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=tmp_path))
    made = [0]

    def fresh(backend: Backend | None = None) -> tuple[StorePartition, dict[str, StateStore[Any]]]:
        made[0] += 1
        stores = _stores()
        partition = StorePartition(stores, backend or _backend(kind, folder, made[0]))
        return partition, {s.name: s for s in stores}

    partition, stores = fresh()
    reference, changelog = _Reference(), []
    for op, name, key, text in steps:
        if op == "put":
            stores[name].put(key, [text])
            reference.open[name][key] = [text]
        elif op == "append":
            value = stores[name].get(key)
            if value is not None:  # changed in place, as the guard does
                value.append(text)
                reference.open[name][key] = [*(reference.value(name, key) or []), text]
        elif op == "delete":
            stores[name].delete(key)
            reference.open[name][key] = None
        elif op == "prepare" and reference.prepared is None:
            changes: dict[bytes, bytes | None] = {}
            partition.prepare(changes)
            changelog.append(changes)
            reference.prepared, reference.open = reference.open, {"run": {}, "buf": {}}
        elif op == "commit" and reference.prepared is not None:
            partition.flush(len(changelog))
            for store, layer in reference.prepared.items():
                for k, v in layer.items():
                    if v is None:
                        reference.committed[store].pop(k, None)
                    else:
                        reference.committed[store][k] = v
            reference.prepared = None
        elif op == "abort":
            partition.abort()
            if reference.prepared is not None:
                changelog.pop()
            reference.prepared, reference.open = None, {"run": {}, "buf": {}}
        elif op == "restart" and reference.prepared is None and not partition.changed:
            # A fresh partition restored from the committed changelog, as the engine does.
            partition.backend.close()
            partition, stores = fresh()
            for changes in changelog:
                for k, v in changes.items():
                    assert partition.apply(k, v)
            partition.applied(len(changelog))
            reference.open = {"run": {}, "buf": {}}
        for name, store in stores.items():
            assert dict(store.items()) == reference.now(name), (name, op)
            assert len(store) == len(reference.now(name)), (name, op)
    partition.backend.close()


# -- the guard: aborts anywhere ----------------------------------------------------------

@dataclass
class _Task:
    """A projector processor driven as a task drives it: windows of records, each taken
    into a transaction that commits or aborts while the next window is processed."""

    limits: GuardLimits
    processor: ProjectorProcessor = field(init=False)
    partition: StorePartition = field(init=False)
    changelog: dict[bytes, bytes | None] = field(default_factory=dict)
    committed: list[OutputRecord] = field(default_factory=list)
    position: int = 0  # the committed offset

    def __post_init__(self) -> None:
        self.processor = _projector(self.limits)
        self.partition = StorePartition(self.processor.stores)

    def process(self, events: list[dict[str, Any]], start: int, end: int) -> Collector:
        harness = Harness(self.limits)
        harness.processor, harness.offset = self.processor, start
        for event in events[start:end]:
            harness.feed(event)
        return harness.out

    def commit(self, out: Collector, end: int) -> None:
        self.changelog.update(out.changelog)
        self.committed.extend(out.outputs)
        self.partition.flush(end)
        self.position = end

    def abort(self) -> None:
        self.partition.abort()
        self.processor.restored()


def _projector(limits: GuardLimits) -> ProjectorProcessor:
    return ProjectorProcessor(project_typed, "out", limits, check_keys=True)


def _contents(processor: ProjectorProcessor) -> tuple[Any, ...]:
    """The stores, and what the guard derives from them (each run's held events, the
    counts, the runs in the bytes bound's order)."""
    guard = processor.guard
    held = {run_id: sorted(events) for run_id, events in guard.held.items()}
    return (store_contents(processor), held, guard.buffered, guard.buffered_bytes,
            list(guard.held))


@settings(max_examples=150, deadline=None)
@given(damaged_delivery(), st.data())
def test_aborts_anywhere_leave_what_the_changelog_restores_and_the_kernels_order(
    case: tuple[list[list[dict[str, Any]]], list[dict[str, Any]]], data: st.DataObject
) -> None:
    runs, delivered = case
    limits = GuardLimits(run_buffer_max=1000)
    task = _Task(limits)
    aborts = 0
    done = 0  # processed up to here (past the position while a window is uncommitted)
    carried: list[OutputRecord] = []  # processed, not yet taken
    while task.position < len(delivered):
        # A transaction takes what was processed; the next records are processed meanwhile.
        end = data.draw(st.integers(done + 1, len(delivered))) if done < len(delivered) else done
        taken = task.process(delivered, done, end)
        taken.outputs[:0] = carried
        task.partition.prepare(taken.changelog)  # commit step 2
        done = data.draw(st.integers(end, len(delivered)))
        carried = task.process(delivered, end, done).outputs
        if aborts < 3 and data.draw(st.booleans()):
            aborts += 1  # it aborts: everything since the last commit goes
        else:
            task.commit(taken, end)
            if data.draw(st.booleans()):
                continue  # what was processed meanwhile goes into the next transaction
        # Rolled back (to the position: both windows, or what followed a commit).
        task.abort()
        done, carried = task.position, []
        rebuilt = _projector(limits)
        restore_from(rebuilt, task.changelog)
        assert _contents(task.processor) == _contents(rebuilt)
    harness = Harness(limits)
    harness.out.outputs.extend(task.committed)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in harness.records():
        by_run.setdefault(record["run_id"], []).append(record)
    for run in runs:
        assert by_run.get(run[0]["run_id"], []) == expected_records(run)


def test_partitions_of_names_each_partition_once() -> None:
    stores = _stores()
    assert partitions_of(stores) == [s.partition for s in stores]  # each its own
    shared = StorePartition(stores)
    assert partitions_of([*stores, stores[0]]) == [shared]




def test_decoded_values_outlive_a_commit_up_to_the_hot_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("symfonic_stream.state.store.HOT_KEYS", 4)
    decoded: list[bytes] = []
    counting: Codec[list[str]] = Codec(LIST.encode, lambda b: decoded.append(b) or LIST.decode(b))
    runs = StateStore("run", counting)
    partition = StorePartition([runs])
    for n in range(8):
        runs.put(f"k{n}", [str(n)])
    partition.prepare({})
    partition.flush(1)
    value = runs.get("k7")  # among the latest four: still decoded, nothing read back
    assert value == ["7"] and decoded == []
    value.append("x")  # changed in place after the commit: the next prepare writes it
    assert runs.get("k0") == ["0"] and decoded == [b"0"]  # beyond the bound: read back
    changes: dict[bytes, bytes | None] = {}
    partition.prepare(changes)
    assert changes == {b"run/k7": b"7,x"}
    partition.abort()  # and an abort drops every decoded value with the transactions
    assert runs.get("k7") == ["7"] and decoded[-1] == b"7"
