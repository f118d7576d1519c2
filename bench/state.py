"""What the projectors' state costs: the guard's state and its restore (part of ``python -m
bench``), and values on disk against in memory (``python -m bench disk_values``,
docs/benchmarks.md "Values on disk"). A million runs that never end: :mod:`bench.soak`.
"""

from __future__ import annotations

import gc
import random
import statistics
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import TopicPartition

from bench.harness import fresh_interpreter, markdown, options, rss_bytes, write_json
from bench.kafka_io import Session
from bench.processes import Process
from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.engine.setup import start_producer
from symfonic_stream.kafka.producer import PartitionWrites, ProcessProducer
from symfonic_stream.processors.projector import (
    RUN_CODEC,
    Buffered,
    ProjectorProcessor,
    RunState,
    RunStatus,
    buffered_key,
    encode_buffered,
)
from symfonic_stream.state.disk import DiskBackend
from symfonic_stream.state.restore import restore_stores
from symfonic_stream.state.store import StorePartition, restore_records
from symfonic_stream.tools.synthetic import generate_run

#: State records per transaction when filling the changelog.
_PER_TRANSACTION = 10_000


@dataclass(frozen=True, slots=True)
class StateRecords:
    records: list[tuple[bytes, bytes]]
    buffered_runs: int
    paused_runs: int

    @property
    def runs(self) -> int:
        return sum(1 for key, _ in self.records if key.startswith(b"run/"))


def open_run_states(runs: int, topic: str, seed: int = 11) -> StateRecords:
    """``runs`` open runs' changelog records as the guard holds them mid-stream: next index
    somewhere in a 20-400 event run, next seq ahead of it as the typed projection numbers
    it, 3 % paused, 1 % with one event buffered behind a hole (under its own ``buf/`` key)."""
    rng = random.Random(seed)
    # A pool of real raw events for the runs that hold one buffered event.
    pool = generate_run(rng, "pool", start_ts=time.time())
    records: list[tuple[bytes, bytes]] = []
    buffered = paused = 0
    for n in range(runs):
        run_id = f"run-{seed}-{n:06d}"
        length = rng.randint(20, 400)
        next_index = rng.randint(1, length - 1)
        now = time.time()
        state = RunState(next_index=next_index, next_seq=next_index + next_index // 4,
                         touched_at=now, last_ts=now)
        if rng.random() < 0.03:
            state.status = RunStatus.PAUSED
            state.pause_expires_at = now + 3600
            paused += 1
        if rng.random() < 0.01:
            raw: dict[str, Any] = dict(rng.choice(pool[1:-1]))
            raw["run_id"] = run_id
            raw["index"] = next_index + rng.randint(1, 5)
            value = orjson.dumps(raw)
            record = InputRecord(topic, 0, n, run_id.encode(), value, (), int(time.time() * 1000))
            pending = Buffered(record, now, float(raw["timestamp"]))
            records.append((b"buf/" + buffered_key(run_id, raw["index"]).encode(),
                            encode_buffered(pending)))
            buffered += 1
        records.append((b"run/" + run_id.encode(), RUN_CODEC.encode(state)))
    return StateRecords(records, buffered, paused)


def _fresh_processor(settings: Settings) -> ProjectorProcessor:
    processor = projector_topology("typed", settings).processor_factory(0)
    assert isinstance(processor, ProjectorProcessor)
    return processor


def _restored(settings: Settings, state: StateRecords) -> ProjectorProcessor:
    processor = _fresh_processor(settings)
    restore_records(processor.stores, state.records)
    processor.restored()
    if processor.active_runs != state.runs:
        raise RuntimeError(f"restored {processor.active_runs} runs of {state.runs}")
    return processor


def rss_probe(runs: str) -> int:
    """(In a fresh interpreter.) The RSS growth from restoring ``runs`` open runs, bytes."""
    state = open_run_states(int(runs), "probe.agent-events")
    gc.collect()
    before = rss_bytes()
    processor = _restored(Settings(topic_prefix="probe", partitions=1), state)
    gc.collect()
    grown = rss_bytes() - before
    del processor
    return grown


def memory_per_run(settings: Settings, state: StateRecords) -> dict[str, Any]:
    """In-memory bytes per restored run: tracemalloc here, and the RSS growth measured in
    a fresh interpreter (this process's freed memory would hide part of it)."""
    runs = state.runs
    rss_grown: int = fresh_interpreter(rss_probe, str(runs))
    gc.collect()
    tracemalloc.start()
    try:
        processor = _restored(settings, state)
        traced, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del processor
    gc.collect()
    encoded = sum(len(value) for _, value in state.records)
    keys = sum(len(key) for key, _ in state.records)
    return {
        "runs": runs,
        "buffered_runs": state.buffered_runs,
        "paused_runs": state.paused_runs,
        "encoded_value_bytes_per_run": encoded / runs,
        "encoded_record_bytes_per_run": (encoded + keys) / runs,
        "changelog_bytes": encoded + keys,
        "memory_bytes_per_run_tracemalloc": traced / runs,
        "memory_bytes_per_run_rss": max(rss_grown, 0) / runs,
    }


async def write_changelog(settings: Settings, state: StateRecords) -> float:
    """The state records into changelog partition 0, the engine's way; returns seconds."""
    topology = projector_topology("typed", settings)
    assert topology.changelog_topic is not None
    producer = ProcessProducer(settings, topology.transactional_id(0))
    await producer.start()
    started = time.monotonic()
    try:
        for start in range(0, len(state.records), _PER_TRANSACTION):
            changes: dict[bytes, bytes | None] = dict(
                state.records[start : start + _PER_TRANSACTION])
            await producer.transact([PartitionWrites(0, [], [], None, changes, (
                topology.changelog_topic, 0, b""))], None, topology.group_id)
    finally:
        await producer.close()
    took = time.monotonic() - started
    # Step 1 of an assignment, as the engine takes it before it restores: a producer of the
    # same transactional id starts only once the last transaction's markers are written.
    # Without it a restore right after can find the changelog's read_committed end (its
    # last stable offset) still before those records, and restore none of them.
    source = TopicPartition(topology.source_topic, 0)
    await (await start_producer(settings, topology, {}, source)).close()
    return took


async def time_restore(settings: Settings, runs: int, records: int) -> float:
    """``restore_stores`` of changelog partition 0 into a fresh processor; seconds."""
    topology = projector_topology("typed", settings)
    assert topology.changelog_topic is not None
    processor = _fresh_processor(settings)
    gc.collect()
    started = time.monotonic()
    partition = StorePartition(processor.stores)
    counts = (await restore_stores(settings, topology.changelog_topic,
                                   {0: [(b"", partition)]})).records
    processor.restored()
    elapsed = time.monotonic() - started
    if counts[0] != records or processor.active_runs != runs:
        raise RuntimeError(f"restored {counts[0]} records / {processor.active_runs} runs, "
                           f"expected {records} / {runs}")
    return elapsed


async def measure_state(session: Session, runs: int, repeat: int = 3) -> dict[str, Any]:
    """The guard's state for ``runs`` open runs (:func:`open_run_states`), on a prefix of
    its own: bytes per run in the changelog; in memory, restored into a fresh projector
    under tracemalloc, and the RSS growth in a fresh interpreter; the restore of changelog
    partition 0 (written by the engine's producer, 10,000 records a transaction) into a
    fresh processor, timed; and ``run typed`` on it, spawn to ``/readyz``."""
    settings = await session.topics("state", 1)
    state = open_run_states(runs, f"{settings.topic_prefix}.agent-events")
    figures = memory_per_run(settings, state)
    figures["changelog_write_s"] = await write_changelog(settings, state)
    restores = [await time_restore(settings, runs, len(state.records)) for _ in range(repeat)]
    figures["restore_s"] = statistics.median(restores)
    figures["restore_s_all"] = restores
    typed = Process("typed", settings, session.log_dir)
    started = time.monotonic()
    typed.start()
    try:
        figures["typed_start_to_ready_s"] = await typed.wait_ready(within=300) - started
        figures["typed_restore_metric_s"] = typed.metric(
            "symfonic_stream_state_restore_duration_seconds_sum")
    finally:
        typed.stop()
    return figures


def disk_probe(path: str, cache_keys: str) -> dict[str, float]:
    """(In a fresh interpreter.) Open ``path`` for a fresh processor, ``restored``, the
    sweep to its end."""
    processor = _fresh_processor(Settings(topic_prefix="probe", partitions=1))
    gc.collect()
    before = rss_bytes()
    started = time.perf_counter()
    disk = DiskBackend(Path(path), int(cache_keys))
    disk.checkpoint()  # (with a cache of 0: every value loaded)
    StorePartition(processor.stores, disk)
    opened = time.perf_counter()
    processor.restored()
    restored = time.perf_counter()
    guard, now = processor.guard, time.time()
    processor.punctuate(now, Collector())  # on disk: the first sweep begins
    while guard.sweeping:  # ... and goes on, a slice at each punctuation, until done
        processor.punctuate(now, Collector())
    done = time.perf_counter()
    gc.collect()
    grown = rss_bytes() - before
    disk.close()
    return {"rss_grown_mib": grown / 2**20, "bytes_per_run": grown / processor.active_runs,
            "open_s": opened - started, "restored_s": restored - opened,
            "scheduled_later_s": done - restored, "active_runs": processor.active_runs}


def disk_values(argv: list[str] | None = None) -> int:
    """``--runs`` open runs written to one partition's RocksDB database with a checkpoint;
    then for each mode, in a fresh interpreter (:func:`disk_probe`): opened for a fresh typed
    projector (values on disk, a cache of ``--cache-keys``; or loaded), ``restored``, the
    sweep run to its end; the RSS grown and the seconds each took."""
    args = options("bench disk_values", argv, disk_values.__doc__, runs=300_000,
                   cache_keys=10_000, json=(Path, "also write the figures here"))
    modes = {"values on disk": args.cache_keys, "in memory": 0}
    with tempfile.TemporaryDirectory(prefix="bench-disk-values-") as folder:
        path = Path(folder) / "0"
        state = open_run_states(args.runs, "probe.agent-events")
        writer = _fresh_processor(Settings(topic_prefix="probe", partitions=1))
        partition = StorePartition(writer.stores, DiskBackend(path))
        for key, value in state.records:
            partition.apply(key, value)
        partition.applied(len(state.records))
        partition.backend.close()
        rows: dict[str, Any] = {"runs": args.runs, "records": len(state.records)}
        for label, keys in modes.items():
            rows[label] = fresh_interpreter(disk_probe, str(path), str(keys))
    print(f"{args.runs:,} open runs in one partition's database ({rows['records']:,} records)\n")
    print(markdown([["mode", "RSS grown (MiB)", "bytes per run", "open (s)", "restored (s)",
                     "scheduled later (s)"],
                    *([f"{label} (`SYMFONIC_STATE_CACHE_KEYS={keys}`)",
                       f"{row['rss_grown_mib']:.0f}", f"{row['bytes_per_run']:.0f}",
                       f"{row['open_s']:.2f}", f"{row['restored_s']:.2f}",
                       f"{row['scheduled_later_s']:.2f}"]
                      for label, keys in modes.items() for row in [rows[label]])]))
    if args.json:
        write_json(args.json, rows)
    return 0
