"""What the projectors' state costs: the guard's state and its restore (part of ``python -m
bench``), values on disk against in memory (``python -m bench.disk_values``), and a million
runs that never end (``python -m bench.soak``).

**The guard's state** (:func:`measure_state`). 1. 100,000 open runs (by default) are built
as the guard holds them mid-stream (:func:`open_run_states`): their changelog records,
exactly what :class:`OrderingGuard`'s stores write. 2. Memory: the records are restored
into a fresh ``ProjectorProcessor`` (``restore_record``, then ``restored``) under
``tracemalloc``, and separately, in a fresh interpreter, without it, reading the RSS before
and after. 3. Restore time: the records are written to partition 0 of the typed
projector's changelog through the engine's own :class:`ProcessProducer` (transactions of
10,000 state records, as commits write them), then :func:`restore_stores` replays them
into a fresh processor, timed. Finally ``run typed`` is started on that prefix and timed
from spawn to ``/readyz``; its own ``state_restore_duration_seconds`` is scraped.

**Values on disk** (:func:`disk_values`): ``--runs`` open runs (300,000 by default) are
written to one partition's RocksDB database with a checkpoint, as ``state/disk.py`` writes
them. For each mode, in a fresh interpreter (:func:`disk_probe`): the database is opened
for a fresh typed projector (values on disk: attached with a cache of ``--cache-keys``; in
memory: loaded), the processor's ``restored`` runs (the buffered events, and every run's
deadline in memory; on disk the deadlines are left to the punctuations' sweep, which is
then run to its end: it keeps those due within the horizon, ten minutes), the cache is
evicted down to its limit, and the growth of the process's RSS over a process that only
built the processor is read, with the seconds the open, ``restored`` and the sweep took.
No broker: the state layer alone.

**Soak** (:func:`soak`), issue 16's worst case: every run sends one event, index 5, and
nothing else, so every run waits behind a hole that never fills and never ends. The live
processor (in process, no broker, the clock simulated) is fed them in commits of 1,000
records, then the clock moves on: 1. **feed**: peak RSS, changelog bytes written per event,
and the partition's buffered bytes, held to ``SYMFONIC_BUFFER_MAX_BYTES`` by forced gaps;
2. **gap timeout**: every hole becomes a gap, punctuation by punctuation (each at most
``SYMFONIC_PUNCTUATE_BUDGET_MS``): the longest one and how many it took; 3. **idle
timeout**: every run ends ``abandoned``; the same figures; 4. **grace**: every run is
forgotten (tombstones), the store is empty. The baseline, measured in the same run, is the
input itself: the raw values held in a list (their ``sys.getsizeof``), the least any
consumer holding them could use.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil
from aiokafka import TopicPartition

from bench.kafka_io import Session
from bench.measure import CollectorPauses
from bench.processes import Process, fresh_interpreter
from bench.report import markdown, write_json
from bench.workload import raw_event
from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings
from symfonic_stream.engine.assign import start_producer
from symfonic_stream.engine.records import Collector, InputRecord
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.processors.ordering.guard import GuardLimits
from symfonic_stream.processors.ordering.run_state import (
    Pending,
    RunState,
    RunStatus,
    encode_pending,
    encode_run,
    pending_key,
)
from symfonic_stream.processors.projector import ProjectorProcessor
from symfonic_stream.projections.typed import project_typed
from symfonic_stream.state.disk import DiskState
from symfonic_stream.state.restore import restore_stores
from symfonic_stream.state.store import restore_record, write_changes
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
            pending = Pending(record, now, float(raw["timestamp"]))
            records.append((b"buf/" + pending_key(run_id, raw["index"]).encode(),
                            encode_pending(pending)))
            buffered += 1
        records.append((b"run/" + run_id.encode(), encode_run(state)))
    return StateRecords(records, buffered, paused)


def _fresh_processor(settings: Settings) -> ProjectorProcessor:
    processor = projector_topology("typed", settings).processor_factory(0)
    assert isinstance(processor, ProjectorProcessor)
    return processor


def _restored(settings: Settings, state: StateRecords) -> ProjectorProcessor:
    processor = _fresh_processor(settings)
    for key, value in state.records:
        restore_record(processor.stores, key, value)
    processor.restored()
    if processor.active_runs != state.runs:
        raise RuntimeError(f"restored {processor.active_runs} runs of {state.runs}")
    return processor


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def rss_probe(runs: str) -> int:
    """(In a fresh interpreter.) The RSS growth from restoring ``runs`` open runs, bytes."""
    state = open_run_states(int(runs), "probe.agent-events")
    gc.collect()
    before = _rss()
    processor = _restored(Settings(topic_prefix="probe", partitions=1), state)
    gc.collect()
    grown = _rss() - before
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
            batches = await producer.begin()
            for key, value in state.records[start : start + _PER_TRANSACTION]:
                batches.append(topology.changelog_topic, 0, key, value, ())
            await batches.send_all()
            await producer.await_sends(batches.sends)
            await producer.commit()
    finally:
        await producer.close()
    took = time.monotonic() - started
    # Step 1 of an assignment, as the engine takes it before it restores: a producer of the
    # same transactional id starts only once the last transaction's markers are written.
    # Without it a restore right after can find the changelog's read_committed end (its
    # last stable offset) still before those records, and restore none of them.
    source = TopicPartition(topology.source_topic, 0)
    await (await start_producer(settings, topology, source)).close()
    return took


async def time_restore(settings: Settings, runs: int, records: int) -> float:
    """``restore_stores`` of changelog partition 0 into a fresh processor; seconds."""
    topology = projector_topology("typed", settings)
    assert topology.changelog_topic is not None
    processor = _fresh_processor(settings)
    gc.collect()
    started = time.monotonic()
    counts = (await restore_stores(settings, topology.changelog_topic,
                                   {0: [(b"", list(processor.stores))]})).records
    processor.restored()
    elapsed = time.monotonic() - started
    if counts[0] != records or processor.active_runs != runs:
        raise RuntimeError(f"restored {counts[0]} records / {processor.active_runs} runs, "
                           f"expected {records} / {runs}")
    return elapsed


async def measure_state(session: Session, runs: int, repeat: int = 3) -> dict[str, Any]:
    """Every figure of the guard's state for ``runs`` open runs, on a prefix of its own."""
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
    """(In a fresh interpreter.) Open ``path`` for a fresh processor, ``restored``, evict."""
    processor = _fresh_processor(Settings(topic_prefix="probe", partitions=1))
    gc.collect()
    before = _rss()
    started = time.perf_counter()
    disk = DiskState(Path(path))
    disk.checkpoint()
    if int(cache_keys) > 0:
        disk.attach(processor.stores, int(cache_keys))
    else:
        disk.load(processor.stores)
    opened = time.perf_counter()
    processor.restored()
    restored = time.perf_counter()
    guard, now = processor.guard, time.time()
    processor.punctuate(now, Collector())  # on disk: the first sweep begins
    while guard.sweeping:  # ... and goes on, a slice at each punctuation, until done
        processor.punctuate(now, Collector())
    for store in processor.stores:
        store.evict()
    done = time.perf_counter()
    gc.collect()
    grown = _rss() - before
    disk.close()
    return {"rss_grown_mib": grown / 2**20, "bytes_per_run": grown / processor.active_runs,
            "open_s": opened - started, "restored_s": restored - opened,
            "scheduled_later_s": done - restored, "active_runs": processor.active_runs}


def disk_values(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.disk_values",
                                     description=(__doc__ or "").split("**Values on disk**")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300_000)
    parser.add_argument("--cache-keys", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    modes = {"values on disk": args.cache_keys, "in memory": 0}
    with tempfile.TemporaryDirectory(prefix="bench-disk-values-") as folder:
        path = Path(folder) / "0"
        state = open_run_states(args.runs, "probe.agent-events")
        disk = DiskState(path)
        for key, value in state.records:
            disk.record(key, value)
        disk.mark(len(state.records))
        disk.close()
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


#: Records per commit of the soak.
COMMIT_EVERY = 1000
#: Documented (docs/benchmarks.md, "Soak"): peak RSS for 1M open runs at default settings.
RSS_BOUND_MIB_PER_MILLION = 2048


@dataclass
class Phase:
    name: str
    punctuations: int = 0
    #: The longest punctuation's own work (its wall time less the collector's pauses in it).
    longest_ms: float = 0.0
    #: The longest punctuation's wall time, collector pauses included.
    longest_wall_ms: float = 0.0
    outputs: int = 0
    changelog_bytes: int = 0
    abandoned: int = 0

    def committed(self, processor: ProjectorProcessor, out: Collector) -> None:
        """What one commit writes counted (outputs, changelog bytes); then a fresh batch."""
        write_changes(processor.stores, out.state)
        self.changelog_bytes += sum(len(key) + len(value or b"")
                                    for key, value in out.state.items())
        self.outputs += len(out.outputs)
        out.clear()


def _soak_event(n: int) -> InputRecord:
    run_id = f"run-{n:07d}"
    value = raw_event(run_id, 5, "text_delta", 1_700_000_000.0 + n, text="only index 5")
    # A copy of its exact size, as a fetched record's value is: orjson's own bytes object
    # keeps its 4 KiB writing buffer (tracemalloc shows 4,097 bytes for a 72-byte value).
    return InputRecord("soak.agent-events", 0, n, run_id.encode(), bytes(memoryview(value)),
                       (), 0)


def _advance(processor: ProjectorProcessor, pauses: CollectorPauses, name: str, start: float,
             done: Callable[[Phase], bool]) -> Phase:
    """Punctuate once a (simulated) second from ``start`` until ``done(phase)``."""
    phase, out, now = Phase(name), Collector(), start
    while not done(phase):
        began, collecting = time.perf_counter(), pauses.total_s
        processor.punctuate(now, out)
        wall = time.perf_counter() - began
        phase.longest_wall_ms = max(phase.longest_wall_ms, wall * 1000)
        phase.longest_ms = max(phase.longest_ms, (wall - (pauses.total_s - collecting)) * 1000)
        phase.punctuations += 1
        phase.abandoned += out.counts["abandoned_runs"]
        phase.committed(processor, out)
        now += 1.0
        if phase.punctuations > 100_000:
            raise RuntimeError(f"{name}: not done after 100,000 punctuations")
    return phase


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def soak(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak",
                                     description=(__doc__ or "").split("**Soak**")[1])
    parser.add_argument("--runs", type=int, default=1_000_000)
    runs = parser.parse_args(argv).runs
    pauses, limits = CollectorPauses(), GuardLimits()
    raw = [_soak_event(n).value for n in range(runs)]
    baseline_mib = (sys.getsizeof(raw) + sum(sys.getsizeof(value) for value in raw)) / 2**20
    del raw
    gc.collect()
    start_mib = _rss() / 2**20
    processor = ProjectorProcessor(project_typed, "soak.stream-events", limits)
    guard = processor.guard
    started = time.perf_counter()
    fed, out = Phase("feed"), Collector()
    for n in range(runs):
        processor.process(_soak_event(n), float(n) / 100_000, out)  # 100k events a second
        if n % COMMIT_EVERY == COMMIT_EVERY - 1:
            fed.committed(processor, out)
    fed.committed(processor, out)
    feed_s = time.perf_counter() - started
    peak, state_mib, buffered_peak = _peak_rss_mib(), _rss() / 2**20 - start_mib, \
        guard.buffered_bytes
    idle = limits.run_idle_timeout_s + 60
    phases = [
        _advance(processor, pauses, "gap timeout", runs / 100_000 + limits.gap_timeout_s,
                 lambda _: guard.buffered == 0),
        _advance(processor, pauses, "idle timeout", runs / 100_000 + idle,
                 lambda phase: phase.abandoned == runs),
        _advance(processor, pauses, "grace",
                 runs / 100_000 + idle + limits.closed_run_grace_s + 60,
                 lambda _: len(guard.runs) == 0)]
    bound = RSS_BOUND_MIB_PER_MILLION * max(runs, 100_000) / 1e6
    print(f"soak: {runs:,} runs each sending only index 5, one partition, default bounds")
    print(f"  feed           {feed_s:8.1f} s   {runs / feed_s:10,.0f} events/s")
    print(f"  peak RSS       {peak:8.0f} MiB  (bound {bound:.0f} MiB); the state's own "
          f"{state_mib:.0f} MiB, {state_mib * 2**20 / runs:.0f} bytes per run; "
          f"the input alone {baseline_mib:.0f} MiB (state x{state_mib / max(baseline_mib, 1):.1f})")
    print(f"  buffered peak  {buffered_peak / 2**20:8.1f} MiB (bound "
          f"{limits.buffer_max_bytes / 2**20:.0f} MiB)")
    print(f"  changelog      {fed.changelog_bytes / runs:8.0f} bytes per event fed")
    for phase in phases:
        print(f"  {phase.name:14} {phase.punctuations:5d} punctuations, longest "
              f"{phase.longest_ms:6.1f} ms ({phase.longest_wall_ms:.1f} ms with the "
              f"collector's pauses), {phase.outputs:,} records out, "
              f"{phase.changelog_bytes / max(runs, 1):.0f} changelog bytes per run")
    print(f"  collector      longest full collection {pauses.longest_full_ms:.0f} ms, "
          f"{pauses.total_s:.1f} s in all (CPython's, anywhere in the process)")
    ok = peak <= bound and max(phase.longest_ms for phase in phases) < 100
    print(f"  verdict        {'within bounds' if ok else 'OUT OF BOUNDS'} "
          f"(RSS bound, a punctuation's own work < 100 ms)")
    return 0 if ok else 1
