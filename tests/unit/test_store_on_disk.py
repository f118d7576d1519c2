"""The persistent store (``state/disk.py``): a partition's committed values in its RocksDB
database, some cached, behind the same transactions as in memory (the random work of both
backends against a reference is tests/unit/test_state_transaction.py). Here: what a
restart finds there, restored records and their checkpoint, and the ordering guard with its
runs on disk against the guard in memory."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors import expiring, projector
from symfonic_stream.processors.projector import (
    RUN_CODEC,
    Buffered,
    GuardLimits,
    ProjectorProcessor,
    RunState,
    RunStatus,
    buffered_key,
    encode_buffered,
)
from symfonic_stream.projections.declared import projection
from symfonic_stream.state.disk import CHECKPOINT, DiskBackend
from symfonic_stream.state.store import Codec, StateStore, StorePartition, restore_records

Value = dict[str, int]
JSON: Codec[Value] = Codec(orjson.dumps, orjson.loads)
KEYS = [f"run-{i}" for i in range(40)]
NAMES = TopicNames("symfonic")


def test_a_restart_reads_values_from_disk_and_loads_none(tmp_path: Path) -> None:
    store = StateStore("run", JSON)
    partition = StorePartition([store], DiskBackend(tmp_path / "0", cache_keys=3))
    for i, key in enumerate(KEYS[:20]):
        store.put(key, {"n": i})
    partition.prepare({})
    partition.flush(5)
    store.delete(KEYS[0])
    partition.prepare({})
    partition.flush(6)
    committed = dict(store.items())
    partition.backend.close()

    backend = DiskBackend(tmp_path / "0", cache_keys=3)
    assert backend.checkpoint() == 6
    again = StateStore("run", JSON)
    StorePartition([again], backend)
    assert backend._cache == {}  # nothing loaded
    assert len(again) == 19  # from the checkpoint, not counted
    assert again.get(KEYS[0]) is None and again.get(KEYS[7]) == {"n": 7}
    assert dict(again.items()) == committed
    backend.close()


def test_restored_records_go_to_disk_and_the_count_is_taken_at_the_checkpoint(
        tmp_path: Path) -> None:
    store = StateStore("run", JSON)
    backend = DiskBackend(tmp_path / "0", cache_keys=2)
    partition = StorePartition([store], backend)
    records: list[tuple[bytes, bytes | None]] = [
        (f"run/{key}".encode(), orjson.dumps({"n": i})) for i, key in enumerate(KEYS[:6])]
    records.append((b"run/run-1", None))
    for key, value in records:  # as state/restore.py hands them
        assert partition.apply(key, value)
    partition.applied(len(records))
    assert len(store) == 5 and partition.offset == len(records)
    assert store.get("run-1") is None and store.get("run-5") == {"n": 5}
    assert sorted(key for key, _ in store.items()) == sorted(KEYS[:1] + KEYS[2:6])
    saved: Any = orjson.loads(backend._db.get(CHECKPOINT) or b"{}")
    assert (saved["counts"], saved["offset"]) == ({"run": 5}, len(records))
    backend.close()


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
        records.append((f"run/run-{n:05d}".encode(), RUN_CODEC.encode(state)))
    value = orjson.dumps({"run_id": "run-00001", "index": 5, "kind": "text_delta",
                          "timestamp": 1.0})
    pending = Buffered(InputRecord(NAMES.agent_events, 0, 9, b"run-00001", value), 1500.0, 1.0)
    records.append((b"buf/" + buffered_key("run-00001", 5).encode(), encode_buffered(pending)))
    return records


def _projector(**limits: float) -> ProjectorProcessor:
    return ProjectorProcessor(projection("typed").project, NAMES.stream_events,
                              GuardLimits(punctuate_budget_s=0.002, **limits))  # type: ignore[arg-type]


def _on_disk(folder: Path, records: list[tuple[bytes, bytes]], **limits: float
             ) -> tuple[ProjectorProcessor, StorePartition]:
    processor = _projector(**limits)
    partition = StorePartition(processor.stores, DiskBackend(folder, cache_keys=100))
    for key, value in records:
        partition.apply(key, value)
    partition.applied(len(records))
    processor.restored()
    return processor, partition


def test_a_restore_on_disk_keeps_in_memory_only_the_deadlines_within_the_horizon(
        tmp_path: Path) -> None:
    records = _guard_records()
    oracle = _projector()  # in memory: every deadline scheduled at restored()
    restore_records(oracle.stores, records)
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
    """The punctuations' time budget (``projector``, ``expiring``) on a clock that stands still:
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
    monkeypatch.setattr(projector, "time", _StoppedClock)
    monkeypatch.setattr(expiring, "time", _StoppedClock)
    limits = {"gap_timeout_s": 40.0, "run_idle_timeout_s": 300.0, "closed_run_grace_s": 60.0,
              "deadline_horizon_s": 50.0}
    oracle = _projector(**limits)
    processor, disk = _on_disk(tmp_path / "0", [], **limits)
    in_memory = StorePartition(oracle.stores)
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
        for partition in (disk, in_memory):
            partition.prepare({})  # commit steps 2 and 8, as the engine does them
            partition.flush(offset)
    assert seen[0] == seen[1]
    kinds = {record_type for _, _, record_type in seen[0]}
    assert {"gap", "end_abandoned"} <= kinds, kinds  # (both timeouts exercised)


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
    disk = DiskBackend(shared / "symfonic-typed" / "p-0")
    assert (shared / "symfonic-typed").stat().st_mode & 0o777 == 0o700
    disk.close()
