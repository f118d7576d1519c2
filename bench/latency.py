"""Latency of the consumers at a fixed offered load, from send time to a committed output.

For each row, a fresh prefix, the consumer(s) started and ready first, then the stream
produced at the offered rate with a fresh kernel ``timestamp`` (= send time) in every event.
The outputs are read ``read_committed`` by the benchmark; latency = read time - the source
event's timestamp (the envelope's ``ts``, the copy's ``timestamp``, a ticket's source offset
mapped back to its send time). Samples of the first second are dropped (warm-up).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

from bench.consumers import Consumer
from bench.kafka_io import (
    POLL_S,
    OffsetWatcher,
    OutputReader,
    create_topics,
    prefix_settings,
    publish_at_rate,
)
from bench.machine import BrokerCpu, machine_busy_seconds
from bench.pauses import CollectorPauses
from bench.rows import ROWS
from bench.workload import Workload, with_timestamp
from symfonic_stream.config import Settings
from symfonic_stream.engine.heap import settle
from symfonic_stream.models.names import TopicNames

#: Latency samples whose source was sent in this first part of the load are dropped.
_WARMUP_S = 1.0
#: Offered load of the latency runs, as a share of the copier's 4-partition throughput.
LOAD_SHARE = 0.5


@dataclass(slots=True)
class Latency:
    offered_per_s: float
    achieved_per_s: float
    events: int
    samples: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    #: p99 of the samples per second of load (by source timestamp): a rising series means
    #: the consumer fell behind the offered load, a flat one that it kept up.
    p99_by_second_ms: list[float] = field(default_factory=list)
    #: The consumers' own histograms (kernel timestamp → commit, and transaction time):
    #: count, sum and cumulative buckets, summed over the row's processes.
    engine_histograms: dict[str, dict[str, float]] = field(default_factory=dict)
    #: CPU cores used during the load by the consumer process(es) and by the benchmark
    #: itself (producer + reader), from psutil.
    consumer_cores: float = 0.0
    bench_cores: float = 0.0
    #: CPU cores busy on the whole machine during the load (everything: the broker too).
    machine_busy_cores: float = 0.0
    #: CPU cores the broker used during the load (None: it does not run on this machine).
    #: At a trickle every transaction is a handful of requests and marker writes to it.
    broker_cores: float | None = None
    #: The longest pause of the benchmark's own garbage collector during the load, ms: the
    #: reader reads nothing meanwhile, so a stall of this length is the harness's.
    bench_gc_longest_ms: float = 0.0


def _output_topics(names: TopicNames, consumer: str) -> list[str]:
    if consumer == "copier":
        return [names.copier_output]
    if consumer == "typed":
        return [names.stream_events]
    if consumer == "chunks":
        return [names.stream_chunks]
    if consumer == "pauses":
        return [names.human_queue("default"), names.expired_queue]
    raise ValueError(consumer)


def _own_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _percentile(ordered: list[float], share: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return 0.0
    rank = max(1, min(len(ordered), round(share * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def measure_latency(
    base: Settings,
    prefix: str,
    row: str,
    workload: Workload,
    rate: float,
    seconds: float,
    log_dir: Path,
    settle_s: float = 1.0,
    factory: Callable[[Settings, Path], Consumer] | None = None,
    groups: tuple[str, ...] | None = None,
) -> Latency:
    """One latency run of ``row`` at ``rate`` events/s for ``seconds`` (0: the whole
    workload once). ``factory`` builds the process of a row that ``symfonic-stream run``
    does not know (a peer, or ``run typed --workers 2``: one process, writing to the
    stream-events topic); ``groups``, the consumers it commits as (default: the row's)."""
    partitions = 4
    settings = prefix_settings(base, prefix, partitions)
    names = TopicNames(prefix)
    await create_topics(settings)
    consumers = groups or ROWS.get(row, (row,))
    procs = [
        (factory(settings, log_dir) if factory is not None else Consumer(name, settings, log_dir))
        .start()
        for name in consumers
    ]
    samples: list[tuple[float, float]] = []
    pauses: CollectorPauses | None = None
    tickets: list[tuple[float, int, int]] = []

    def on_batch(records: list[Any], read_at: float) -> None:
        for record in records:
            value = orjson.loads(record.value)
            if "ts" in value:
                samples.append((read_at, value["ts"]))
            elif "timestamp" in value:
                samples.append((read_at, value["timestamp"]))
            elif "source" in value:
                _, partition, offset = value["source"].rsplit("/", 2)
                tickets.append((read_at, int(partition), int(offset)))

    count = len(workload) if seconds <= 0 else min(len(workload), max(1, int(rate * seconds)))
    events = workload.events[:count]
    keys = [e["run_id"].encode() for e in events]

    def encode(i: int, now: float) -> tuple[bytes, bytes]:
        return keys[i], with_timestamp(events[i], now)

    topics = ([names.stream_events] if factory is not None
              else [t for name in consumers for t in _output_topics(names, name)])
    reader = OutputReader(settings, topics, partitions, on_batch)
    try:
        for proc in procs:
            await proc.wait_ready()
        await reader.start()
        await asyncio.sleep(settle_s)  # every consumer idle and polling
        settle()  # the workload frozen out of this process's collections (bench/pauses.py)
        pauses = CollectorPauses()
        me = psutil.Process()
        broker = BrokerCpu(settings.bootstrap_servers)
        broker_before = broker.seconds()
        busy_before = machine_busy_seconds()
        cpu_before = [p.cpu_seconds() for p in procs], _own_cpu(me), time.monotonic()
        sent_at, achieved = await publish_at_rate(settings, count, encode, rate)
        cpu_after = [p.cpu_seconds() for p in procs], _own_cpu(me), time.monotonic()
        load_seconds = cpu_after[2] - cpu_before[2]
        consumer_cores = (sum(cpu_after[0]) - sum(cpu_before[0])) / load_seconds
        bench_cores = (cpu_after[1] - cpu_before[1]) / load_seconds
        machine_busy_cores = (machine_busy_seconds() - busy_before) / load_seconds
        broker_after = broker.seconds()
        broker_cores = (None if broker_before is None or broker_after is None
                        else (broker_after - broker_before) / load_seconds)
        async with OffsetWatcher(settings, names.agent_events) as watcher:
            deadline = time.monotonic() + max(120.0, count / 200)
            for name in consumers:
                while await watcher.committed(names.group(name)) < count:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{name} did not catch up during the latency run")
                    await asyncio.sleep(POLL_S)
        await reader.wait_caught_up()
        pauses.close()  # the load's last record read
        histograms: dict[str, dict[str, float]] = {}
        for proc in procs:
            for family, values in proc.histograms().items():
                into = histograms.setdefault(family, {})
                for name, value in values.items():
                    into[name] = into.get(name, 0.0) + value
    finally:
        if pauses is not None:
            pauses.close()
        await reader.stop()
        for proc in procs:
            proc.stop()
    load_start = min(sent_at.values())
    for read_at, partition, offset in tickets:
        samples.append((read_at, sent_at[(partition, offset)]))
    kept = [(ts, read_at) for read_at, ts in samples if ts >= load_start + _WARMUP_S]
    if not kept:
        kept = [(ts, read_at) for read_at, ts in samples]
    latencies = sorted((read_at - ts) * 1000 for ts, read_at in kept)
    by_second: dict[int, list[float]] = {}
    for ts, read_at in kept:
        by_second.setdefault(int(ts - load_start), []).append((read_at - ts) * 1000)
    return Latency(
        offered_per_s=rate,
        achieved_per_s=achieved,
        events=count,
        samples=len(latencies),
        p50_ms=_percentile(latencies, 0.50),
        p99_ms=_percentile(latencies, 0.99),
        p999_ms=_percentile(latencies, 0.999),
        max_ms=latencies[-1] if latencies else 0.0,
        engine_histograms=histograms,
        consumer_cores=consumer_cores,
        bench_cores=bench_cores,
        machine_busy_cores=machine_busy_cores,
        broker_cores=broker_cores,
        bench_gc_longest_ms=pauses.longest_ms if pauses is not None else 0.0,
        p99_by_second_ms=[
            round(_percentile(sorted(by_second[second]), 0.99), 1)
            for second in sorted(by_second)
        ],
    )
