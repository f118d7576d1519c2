"""Values on disk (``state/cached.py``): a store whose values live in its partition's
RocksDB database, with a cache of a few, behaves as the in-memory store does.

The oracle is the in-memory :class:`StateStore` driven through the same operations and the
same commit cycle (step 2, more work while the transaction is out, then it commits or
aborts), with the engine's order at step 8: the database written, the stores told, the
checkpoint, the eviction (``engine/task.py``, ``StreamTask.committed``)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.engine.records import Collector, InputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors import expiring
from symfonic_stream.processors.ordering import expiry
from symfonic_stream.processors.ordering.guard import GuardLimits
from symfonic_stream.processors.ordering.run_state import (
    Pending,
    RunState,
    RunStatus,
    encode_pending,
    encode_run,
    pending_key,
)
from symfonic_stream.processors.projector import PROJECTIONS, ProjectorProcessor
from symfonic_stream.state.disk import DiskState
from symfonic_stream.state.store import Codec, StateStore, restore_record

Value = dict[str, int]
JSON: Codec[Value] = Codec(orjson.dumps, orjson.loads)
KEPT: Codec[Value] = Codec(orjson.dumps, orjson.loads, keep=lambda value: value["n"] < 0)
KEYS = [f"run-{i}" for i in range(40)]
NAMES = TopicNames("symfonic")


class Pair:
    """The same store twice: in memory (the oracle) and on disk with a cache of ``limit``."""

    def __init__(self, folder: Path, limit: int, codec: Codec[Value] = JSON) -> None:
        self.memory = StateStore("run", codec)
        self.memory.track_uncommitted()
        self.disk = DiskState(folder / "0")
        self.store = StateStore("run", codec)
        self.disk.attach([self.store], limit)
        self.offset = 0
        self._changes: dict[bytes, bytes | None] | None = None

    def both(self, op: str, key: str, n: int = 0) -> None:
        for store in (self.memory, self.store):
            if op == "put":
                store.put(key, {"n": n})
            elif op == "delete":
                store.delete(key)
            elif op == "bump":  # a value changed in place, as processors do
                value = store.get(key)
                if value is not None:
                    value["n"] += 1
                    store.touch(key)
            else:
                store.get(key)

    def take(self) -> None:
        """Commit step 2 of both."""
        self._changes, oracle = {}, {}
        self.store.write_changes(self._changes)
        self.memory.write_changes(oracle)
        assert self._changes == oracle

    def end(self, committed: bool) -> None:
        """Step 8, or the abort's roll back."""
        assert self._changes is not None
        if not committed:
            assert self.store.roll_back() == self.memory.roll_back()
        else:
            self.offset += len(self._changes) + 1
            self.disk.records(self._changes)
            self.store.committed()
            self.memory.committed()
            self.disk.mark(self.offset)
            self.store.evict()
        self._changes = None

    def agree(self) -> None:
        assert dict(self.store.items()) == dict(self.memory.items())
        assert [self.store.get(key) for key in KEYS] == [self.memory.get(key) for key in KEYS]


def test_random_work_commits_and_aborts_agree_with_the_in_memory_store(tmp_path: Path) -> None:
    rng = random.Random(36)
    pair = Pair(tmp_path, limit=5)
    for round_ in range(300):
        for _ in range(rng.randint(0, 12)):
            pair.both(rng.choice(["put", "delete", "bump", "get"]), rng.choice(KEYS), round_)
        pair.take()
        for _ in range(rng.randint(0, 6)):  # while the transaction is out
            pair.both(rng.choice(["put", "delete", "bump", "get"]), rng.choice(KEYS), -round_)
        pair.agree()
        pair.end(committed=rng.random() > 0.2)
        pair.agree()
    for _ in range(2):  # nothing read or written since: every value is clean
        pair.take()
        pair.end(committed=True)
    assert len(pair.store) == len(pair.memory)  # counted from the commits' images
    assert pair.store.on_disk is not None and pair.store.on_disk.cached <= 5
    assert not pair.store.on_disk.deleted  # every tombstone reached the database


def test_a_restart_reads_values_from_disk_and_loads_none(tmp_path: Path) -> None:
    pair = Pair(tmp_path, limit=3)
    for i, key in enumerate(KEYS[:20]):
        pair.both("put", key, i)
    pair.take()
    pair.end(committed=True)
    pair.both("delete", KEYS[0])
    pair.take()
    pair.end(committed=True)
    pair.disk.close()

    disk = DiskState(tmp_path / "0")
    assert disk.checkpoint() == pair.offset
    store = StateStore("run", JSON)
    disk.attach([store], 3)
    assert store.on_disk is not None and store.on_disk.cached == 0
    assert len(store) == 19  # from the checkpoint, not counted
    assert store.get(KEYS[0]) is None and store.get(KEYS[7]) == {"n": 7}
    assert dict(store.items()) == dict(pair.memory.items())


def test_a_value_the_codec_keeps_is_never_evicted(tmp_path: Path) -> None:
    pair = Pair(tmp_path, limit=2, codec=KEPT)
    pair.both("put", "held", -1)  # (kept while n < 0: as a run with events buffered)
    held = pair.store.get("held")
    for i, key in enumerate(KEYS[:10]):
        pair.both("put", key, i)
    for _ in range(3):  # its image and dirtiness gone: only the codec keeps it
        pair.take()
        pair.end(committed=True)
    assert pair.store.get("held") is held
    pair.agree()


def test_restored_records_go_to_disk_and_the_count_is_taken_at_the_checkpoint(
        tmp_path: Path) -> None:
    disk = DiskState(tmp_path / "0")
    store = StateStore("run", JSON)
    disk.attach([store], 2)
    records: list[tuple[bytes, bytes | None]] = [
        (f"run/{key}".encode(), orjson.dumps({"n": i})) for i, key in enumerate(KEYS[:6])]
    records.append((b"run/run-1", None))
    for key, value in records:  # as state/restore.py hands them: the mirror, then the store
        disk.record(key, value)
        store.restore(key, value)
    disk.mark(len(records))
    assert len(store) == 5
    assert store.get("run-1") is None and store.get("run-5") == {"n": 5}
    assert sorted(key for key, _ in store.items()) == sorted(KEYS[:6][:1] + KEYS[2:6])
    saved: Any = orjson.loads(disk.get(b"\x00checkpoint") or b"{}")
    assert saved["counts"] == {"run": 5}


# -- the ordering guard's restore with its runs on disk -------------------------------------

def _guard_records() -> list[tuple[bytes, bytes]]:
    """Open, paused and closed runs, and one event buffered behind a hole, as the guard's
    stores write them."""
    records: list[tuple[bytes, bytes]] = []
    for n in range(3000):
        state = RunState(next_index=3, next_seq=4, touched_at=1000.0 + n, last_ts=5.0)
        if n % 7 == 0:
            state.status, state.pause_expires_at = RunStatus.PAUSED, 9000.0 + n
        if n % 11 == 0:
            state.status, state.closed_at = RunStatus.CLOSED, 2000.0 + n
        records.append((f"run/run-{n:05d}".encode(), encode_run(state)))
    value = orjson.dumps({"run_id": "run-00001", "index": 5, "kind": "text_delta",
                          "timestamp": 1.0})
    pending = Pending(InputRecord(NAMES.agent_events, 0, 9, b"run-00001", value), 1500.0, 1.0)
    records.append((b"buf/" + pending_key("run-00001", 5).encode(), encode_pending(pending)))
    return records


def _projector(**limits: float) -> ProjectorProcessor:
    return ProjectorProcessor(PROJECTIONS["typed"], NAMES.stream_events,
                              GuardLimits(punctuate_budget_s=0.002, **limits))  # type: ignore[arg-type]


def _on_disk(folder: Path, records: list[tuple[bytes, bytes]], **limits: float
             ) -> tuple[ProjectorProcessor, DiskState]:
    disk = DiskState(folder)
    for key, value in records:
        disk.record(key, value)
    disk.mark(len(records))
    processor = _projector(**limits)
    disk.attach(processor.stores, 100)
    processor.restored()
    return processor, disk


def test_a_restore_on_disk_keeps_in_memory_only_the_deadlines_within_the_horizon(
        tmp_path: Path) -> None:
    records = _guard_records()
    oracle = _projector()  # in memory: every deadline scheduled at restored()
    for key, value in records:
        restore_record(oracle.stores, key, value)
    oracle.restored()
    processor, _ = _on_disk(tmp_path / "0", records, deadline_horizon_s=2000.0)
    guard, runs = processor.guard, processor.guard.runs
    assert guard.buffered == oracle.guard.buffered == 1
    assert runs.deadline("run-00001") == oracle.guard.runs.deadline("run-00001")
    assert runs.deadline("run-00002") is None  # left for the sweep
    now = 1500.0  # (before every deadline: closed runs' graces 2600-5600, idle ones 4600-7600)
    event = orjson.dumps({"run_id": "run-00002", "index": 3, "kind": "text_delta",
                          "timestamp": 1.0})
    processor.process(InputRecord(NAMES.agent_events, 0, 10, b"run-00002", event), now,
                      Collector())  # an event meanwhile: the sweep reads the run as it is now
    processor.punctuate(now, Collector())
    assert guard.sweeping and guard.horizon == now + 2000.0
    punctuations = 1
    while guard.sweeping:
        processor.punctuate(now, Collector())
        punctuations += 1
    assert punctuations > 2  # a slice at a time
    keys = [key.decode()[4:] for key, _ in records if key.startswith(b"run/")]
    keys.remove("run-00002")  # (touched at 1500: idle until 5100, beyond the horizon)
    assert runs.deadline("run-00002") is None
    within = [oracle.guard.runs.deadline(k) for k in keys]
    assert [runs.deadline(k) for k in keys] == [
        due if due is not None and due <= guard.horizon else None for due in within]
    assert sum(due is not None and due <= guard.horizon for due in within) > 50
    assert processor.active_runs == oracle.active_runs == 3000


class _StoppedClock:
    """The punctuations' time budget (``expiry``, ``expiring``) on a clock that stands still:
    no punctuation is cut short, however slow the machine (issue 45: under mutmut's
    trampolines, or a loaded machine, 2 ms cut the guard on disk and the oracle at different
    places, and their outputs differed)."""

    @staticmethod
    def monotonic() -> float:
        return 0.0

    perf_counter = monotonic


def test_runs_on_disk_time_out_and_fill_gaps_exactly_as_in_memory_over_many_horizons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same events at the same clock into a guard in memory (the oracle) and one on disk
    with a horizon far shorter than its timeouts, committed after every step: the same
    outputs, gaps and abandoned runs included."""
    monkeypatch.setattr(expiry, "time", _StoppedClock)
    monkeypatch.setattr(expiring, "time", _StoppedClock)
    limits = {"gap_timeout_s": 40.0, "run_idle_timeout_s": 300.0, "closed_run_grace_s": 60.0,
              "deadline_horizon_s": 50.0}
    oracle = _projector(**limits)
    processor, disk = _on_disk(tmp_path / "0", [], **limits)
    rng = random.Random(3636)
    next_index = {f"r{n:03d}": 0 for n in range(120)}
    seen: tuple[list[Any], list[Any]] = ([], [])
    offset = 0
    for step in range(900):
        now = 1000.0 + 5.0 * step
        outs = (Collector(), Collector())
        for _ in range(rng.randint(0, 3)):
            run_id = rng.choice(list(next_index))
            if rng.random() < 0.02 and step < 700:  # a run that goes quiet for good
                next_index[run_id] = -10**6
            index = next_index[run_id]
            if index < 0:
                continue
            index += 1 if rng.random() < 0.1 else 0  # a hole, filled later or gapped
            next_index[run_id] = index + 1
            value = orjson.dumps({"run_id": run_id, "index": index, "kind": "text_delta",
                                  "timestamp": now})
            offset += 1
            for each, out in zip((oracle, processor), outs, strict=True):
                each.process(InputRecord(NAMES.agent_events, 0, offset, run_id.encode(),
                                         value), now, out)
        for each, out in zip((oracle, processor), outs, strict=True):
            each.punctuate(now, out)
        for out, kept in zip(outs, seen, strict=True):
            kept.extend((o.key, o.value, o.record_type) for o in out.outputs)
        _commit(processor, disk, offset)
        _commit(oracle, None, offset)
    assert seen[0] == seen[1]
    kinds = {record_type for _, _, record_type in seen[0]}
    assert {"gap", "end_abandoned"} <= kinds, kinds  # (both timeouts exercised)


def _commit(processor: ProjectorProcessor, disk: DiskState | None, offset: int) -> None:
    """Commit steps 2 and 8 as the engine orders them (``StreamTask.committed``)."""
    changes: dict[bytes, bytes | None] = {}
    for store in processor.stores:
        store.write_changes(changes)
    if disk is not None:
        disk.records(changes)
    for store in processor.stores:
        store.committed()
    if disk is not None:
        disk.mark(offset)
    for store in processor.stores:
        store.evict()


def test_the_state_folders_are_this_users_alone(tmp_path: Path) -> None:
    """Issue 43: the state directory (RocksDB, holding ticket tokens) was made with the
    default umask, readable by every user of the node."""
    from symfonic_stream.state.disk import check_state_dir

    fresh, shared = tmp_path / "fresh" / "state", tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    for folder in (fresh, shared):
        check_state_dir(folder)
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    disk = DiskState(shared / "symfonic-typed" / "p-0")
    assert (shared / "symfonic-typed").stat().st_mode & 0o777 == 0o700
    disk.close()
