"""What the ordering guard's state costs: bytes per open run, and the restore after a restart.

1. 100,000 open runs (by default) are built as the guard holds them mid-stream: next index
   somewhere in a 20-400 event run, next seq ahead of it as the typed projection numbers
   it, 3 % paused, 1 % with one event buffered behind a hole (the reordering the synthetic
   stream has). Their changelog records are
   :func:`~symfonic_stream.processors.ordering.run_state.encode_run` values keyed by run
   id (and each buffered event under its own ``buf/`` key), exactly what
   :class:`OrderingGuard`'s stores write.
2. Memory: the records are restored into a fresh ``ProjectorProcessor`` (the engine's
   restore path, ``processor.restore(key, value)``) under ``tracemalloc``, and separately
   without it, reading the process RSS before and after.
3. Restore time: the records are written to partition 0 of the typed projector's changelog
   topic through the engine's own :class:`ProcessProducer` (transactions of 10,000 state
   records, as commits write them), then
   :func:`~symfonic_stream.state.restore.restore_stores` replays them into a fresh
   processor, timed. Finally ``symfonic-stream run typed`` is started on that prefix and
   timed from spawn to ``/readyz``; its own ``state_restore_duration_seconds`` is scraped.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil
from aiokafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from bench.consumers import Consumer
from bench.kafka_io import create_topics
from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings
from symfonic_stream.engine.assign import start_producer
from symfonic_stream.engine.records import InputRecord
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.processors.ordering.run_state import (
    Pending,
    RunState,
    RunStatus,
    encode_pending,
    encode_run,
    pending_key,
)
from symfonic_stream.processors.projector import ProjectorProcessor
from symfonic_stream.state.restore import restore_stores
from symfonic_stream.state.store import restore_record
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
    """``runs`` open runs' changelog records (key = run id, value = ``encode_run``)."""
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


def rss_probe(runs: int) -> int:
    """In a fresh process: RSS growth from restoring ``runs`` open runs (bytes)."""
    settings = Settings(topic_prefix="probe", partitions=1)
    state = open_run_states(runs, "probe.agent-events")
    gc.collect()
    before = psutil.Process().memory_info().rss
    processor = _restored(settings, state)
    gc.collect()
    grown = psutil.Process().memory_info().rss - before
    del processor
    return int(grown)


def memory_per_run(settings: Settings, state: StateRecords) -> dict[str, Any]:
    """In-memory bytes per restored run: tracemalloc here, and the RSS growth measured in
    a fresh interpreter (this process's freed memory would hide part of it)."""
    runs = state.runs
    probe = subprocess.run(
        [sys.executable, "-m", "bench.state_cost", "--rss-probe", str(runs)],
        capture_output=True, text=True, check=True, timeout=600,
    )
    rss_grown = int(probe.stdout.strip().splitlines()[-1])
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


def _restore_seconds_from_metrics(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "symfonic_stream_state_restore_duration_seconds_sum":
                return float(sample.value)
    return 0.0


async def start_to_ready(settings: Settings, log_dir: Path) -> tuple[float, float]:
    """Spawn ``run typed`` on the prefix; seconds to ``/readyz`` and its own restore time."""
    consumer = Consumer("typed", settings, log_dir)
    started = time.monotonic()
    consumer.start()
    try:
        ready_at = await consumer.wait_ready(within=300)
        status, body = consumer._get("/metrics")
        restore = _restore_seconds_from_metrics(body.decode()) if status == 200 else 0.0
    finally:
        consumer.stop()
    return ready_at - started, restore


async def measure_state(
    base: Settings, prefix: str, runs: int, log_dir: Path, repeat: int = 3
) -> dict[str, Any]:
    """Every state figure for ``runs`` open runs under topic prefix ``prefix``."""
    settings = base.model_copy(update={"topic_prefix": prefix, "partitions": 1})
    state = open_run_states(runs, f"{prefix}.agent-events")
    figures = memory_per_run(settings, state)
    await create_topics(settings)
    figures["changelog_write_s"] = await write_changelog(settings, state)
    restores = [await time_restore(settings, runs, len(state.records)) for _ in range(repeat)]
    figures["restore_s"] = statistics.median(restores)
    figures["restore_s_all"] = restores
    ready, consumer_restore = await start_to_ready(settings, log_dir)
    figures["typed_start_to_ready_s"] = ready
    figures["typed_restore_metric_s"] = consumer_restore
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="guard-state memory probe")
    parser.add_argument("--rss-probe", type=int, required=True, metavar="RUNS")
    args = parser.parse_args()
    print(rss_probe(args.rss_probe))


if __name__ == "__main__":
    main()
