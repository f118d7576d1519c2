"""A row's throughput and latency against the broker (the method: docs/benchmarks.md,
"Method, in detail").

A measurement freezes what the benchmark holds before its load (the engine's own
``symfonic_stream.engine.garbage.settle``) and records the collector's pauses during it
(:class:`bench.harness.CollectorPauses`): a full collection over a million events held as
dicts took about a second, during which the reader read nothing, a stall counted to
whichever row ran (docs/benchmarks.md, "The harness's own pauses").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.harness import (
    BrokerCpu,
    CollectorPauses,
    machine_busy_seconds,
    own_cpu_seconds,
    p99_by_second,
    rank,
    say,
)
from bench.kafka_io import POLL_S, OffsetWatcher, OutputReader, Session, publish_at_rate
from bench.processes import Row
from bench.workload import Workload, with_timestamp
from symfonic_stream.config import Settings
from symfonic_stream.engine.garbage import settle
from symfonic_stream.models.names import TopicNames


@dataclass(slots=True)
class Throughput:
    #: The events timed: those committed after the first commit the benchmark saw (all of
    #: them when everything landed between two polls). ``committed`` is where every
    #: process's group ended: the whole input, or the run raised.
    events: int
    seconds: float
    events_per_s: float
    cpu_s_per_million: float
    peak_rss_bytes: int
    publish_s: float = 0.0
    #: CPU cores the consumer process(es) used over the timed window (1.0 = one core
    #: saturated: a Python consumer cannot use more), and the whole machine (broker too).
    consumer_cores: float = 0.0
    machine_busy_cores: float = 0.0
    #: The rate between 10 % and 90 % of the input committed: start-up and the last
    #: stragglers left out (a peer's start-up can be seconds), and its CPU per event.
    steady_events_per_s: float = 0.0
    steady_cpu_s_per_million: float = 0.0
    #: The engine's own account at the end (seconds per commit step and loop activity,
    #: summed over the row's processes; :meth:`bench.processes.Process.engine_time`).
    engine_time: dict[str, float] = field(default_factory=dict)
    committed: int = 0


#: (time, committed, the process's CPU seconds, the machine's busy seconds) at one poll.
Point = tuple[float, int, float, float]


async def throughput_round(session: Session, rows: list[Row], records: list[tuple[bytes, bytes]],
                           partitions: int, tag: str) -> dict[str, Throughput]:
    """Each row in turn, in its own group, on ``records`` published before timing to a
    fresh prefix (a row whose groups are another's gets a prefix of its own). Timed from the
    first commit seen (its records not counted; the groups' offsets polled every 50 ms) to
    the end of the topic; for two processes the slower one's rate counts."""
    results: dict[str, Throughput] = {}
    shared: tuple[Settings, float] | None = None
    for row in rows:
        if row.own_input:
            settings, publish_s = await session.published(f"{tag}-{row.slug}", records,
                                                          partitions)
        else:
            shared = shared or await session.published(tag, records, partitions)
            settings, publish_s = shared
        result = results[row.name] = await timed_consumption(
            settings, row, len(records), session, max(120.0, len(records) / 500))
        result.publish_s = publish_s
        say(f"  {partitions}p  {row.name:<13} {result.events_per_s:>9,.0f} ev/s  steady "
            f"{result.steady_events_per_s:>9,.0f} ev/s  cpu {result.cpu_s_per_million:5.1f} "
            f"s/M  rss {result.peak_rss_bytes / 2**20:6.1f} MB  cores "
            f"{result.consumer_cores:.2f} (machine {result.machine_busy_cores:.2f})")
    return results


async def timed_consumption(settings: Settings, row: Row, total: int, session: Session,
                            within: float) -> Throughput:
    """Start ``row`` on a prefix whose raw topic holds ``total`` events; time it."""
    names = TopicNames(settings.topic_prefix)
    settle()  # no full collection of the workload while the watcher times (module doc)
    procs = [proc.start() for proc in row.processes(settings, session.log_dir)]
    # Per process: the last poll that saw nothing committed, the first that saw something,
    # and the one that saw everything.
    last_zero: list[Point] = [(time.monotonic(), 0, 0.0, 0.0) for _ in procs]
    first: list[Point | None] = [None] * len(procs)
    done: list[Point | None] = [None] * len(procs)
    traces: list[list[Point]] = [[] for _ in procs]
    engine_time: dict[str, float] = {}
    deadline = time.monotonic() + within
    try:
        async with OffsetWatcher(settings, names.agent_events) as watcher:
            while not all(done):
                for i, (proc, group) in enumerate(zip(procs, row.groups, strict=True)):
                    if done[i] is not None:
                        continue
                    proc.check_alive()
                    committed = await watcher.committed(names.group(group))
                    point = (time.monotonic(), committed, proc.cpu_seconds(),
                             machine_busy_seconds())
                    traces[i].append(point)
                    if committed == 0:
                        last_zero[i] = point
                    elif first[i] is None:
                        first[i] = point
                    if committed >= total:
                        done[i] = point
                        proc.sample_rss()
                        for name, seconds in proc.engine_time().items():
                            engine_time[name] = engine_time.get(name, 0.0) + seconds
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{row.name} did not finish {total} events within {within:.0f}s")
                await asyncio.sleep(POLL_S)
    finally:
        for proc in procs:
            proc.stop()
    result = _timed(total, first, done, last_zero)
    steady = [_steady(trace, total) for trace in traces]
    result.steady_events_per_s = min(rate for rate, _ in steady)
    result.steady_cpu_s_per_million = sum(cpu for _, cpu in steady)
    result.engine_time = {k: round(v, 3) for k, v in sorted(engine_time.items())}
    result.peak_rss_bytes = sum(proc.peak_rss for proc in procs)
    return result


def _timed(total: int, first: list[Point | None], done: list[Point | None],
           last_zero: list[Point]) -> Throughput:
    """The rate, CPU and cores of each process from its first commit seen to its last."""
    rates: list[float] = []
    cpu = cores = machine_cores = seconds = 0.0
    timed = 0
    for start, end, zero in zip(first, done, last_zero, strict=True):
        assert end is not None and start is not None
        if end[0] - start[0] < 4 * POLL_S:
            # Everything committed between two polls (a tiny input): time it from the
            # last poll that saw nothing, counting every event.
            start = (zero[0], 0, zero[2], zero[3])
        n = total - start[1]
        elapsed = end[0] - start[0]
        rates.append(n / elapsed)
        cpu += (end[2] - start[2]) / n * 1e6
        cores += (end[2] - start[2]) / elapsed
        if elapsed >= seconds:
            machine_cores = (end[3] - start[3]) / elapsed
        timed = max(timed, n)
        seconds = max(seconds, elapsed)
    return Throughput(events=timed, seconds=seconds, events_per_s=min(rates),
                      cpu_s_per_million=cpu, peak_rss_bytes=0, consumer_cores=cores,
                      machine_busy_cores=machine_cores,
                      committed=min(end[1] for end in done if end is not None))


def _steady(trace: list[Point], total: int) -> tuple[float, float]:
    """(events/s, CPU s per million) between the polls that first saw 10 % and 90 %
    of ``total`` committed."""
    low = next(p for p in trace if p[1] >= 0.1 * total)
    high = next(p for p in trace if p[1] >= 0.9 * total)
    if high[1] <= low[1]:  # one commit took it past both: nothing finer to see
        low = next(p for p in reversed(trace) if p[1] < low[1])
    n = high[1] - low[1]
    return n / (high[0] - low[0]), (high[2] - low[2]) / n * 1e6


#: Latency samples whose source was sent in this first part of the load are dropped.
_WARMUP_S = 1.0
#: The latency runs' partitions.
LATENCY_PARTITIONS = 4


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

    def said(self) -> str:
        """Its figures on one progress line."""
        broker = "?" if self.broker_cores is None else f"{self.broker_cores:.2f}"
        return (f"p50 {self.p50_ms:7.1f}  p99 {self.p99_ms:7.1f}  p999 {self.p999_ms:7.1f} ms  "
                f"({self.samples:,} samples, {self.achieved_per_s:,.0f}/s; cores: consumer "
                f"{self.consumer_cores:.2f}, bench {self.bench_cores:.2f}, broker {broker}, "
                f"machine {self.machine_busy_cores:.2f}; the bench's longest collector pause "
                f"{self.bench_gc_longest_ms:.0f} ms)")


class _Samples:
    """What the output reader saw: (read time, source timestamp) of every record that
    carries one, and (read time, partition, offset) of every ticket's source record."""

    def __init__(self) -> None:
        self.timed: list[tuple[float, float]] = []
        self.tickets: list[tuple[float, int, int]] = []

    def on_batch(self, records: list[Any], read_at: float) -> None:
        for record in records:
            value = orjson.loads(record.value)
            if "ts" in value:
                self.timed.append((read_at, value["ts"]))
            elif "timestamp" in value:
                self.timed.append((read_at, value["timestamp"]))
            elif "source" in value:
                _, partition, offset = value["source"].rsplit("/", 2)
                self.tickets.append((read_at, int(partition), int(offset)))

    def latencies(self, sent_at: dict[tuple[int, int], float]) -> list[tuple[float, float]]:
        """(source time, latency in ms) of each sample after the warm-up (all of them if
        none is after it)."""
        load_start = min(sent_at.values())
        samples = self.timed + [(read_at, sent_at[(p, o)]) for read_at, p, o in self.tickets]
        kept = [(ts, read_at) for read_at, ts in samples if ts >= load_start + _WARMUP_S]
        return [(ts - load_start, (read_at - ts) * 1000)
                for ts, read_at in kept or [(ts, read_at) for read_at, ts in samples]]


async def measure_latency(session: Session, row: Row, workload: Workload, rate: float,
                          seconds: float, tag: str, settle_s: float = 1.0) -> Latency:
    """One latency run of ``row`` at ``rate`` events/s for ``seconds`` (0: the whole
    workload once), on a prefix of its own: the row ready first, every event sent with its
    send time as kernel timestamp, each output timed as it becomes readable
    (read_committed) against its source's send time; the first second's samples dropped."""
    settings = await session.topics(f"{tag}-{row.slug}", LATENCY_PARTITIONS)
    names = TopicNames(settings.topic_prefix)
    procs = [proc.start() for proc in row.processes(settings, session.log_dir)]
    count = len(workload) if seconds <= 0 else min(len(workload), max(1, int(rate * seconds)))
    events = workload.events[:count]
    keys = [e["run_id"].encode() for e in events]

    def encode(i: int, now: float) -> tuple[bytes, bytes]:
        return keys[i], with_timestamp(events[i], now)

    seen = _Samples()
    reader = OutputReader(settings, row.topics(settings), LATENCY_PARTITIONS, seen.on_batch)
    pauses: CollectorPauses | None = None
    try:
        for proc in procs:
            await proc.wait_ready()
        await reader.start()
        await asyncio.sleep(settle_s)  # every consumer idle and polling
        settle()  # the workload frozen out of this process's collections (module doc)
        pauses = CollectorPauses()
        broker = BrokerCpu(settings.bootstrap_servers)
        before = ([p.cpu_seconds() for p in procs], own_cpu_seconds(), time.monotonic(),
                  machine_busy_seconds(), broker.seconds())
        sent_at, achieved = await publish_at_rate(settings, count, encode, rate)
        after = ([p.cpu_seconds() for p in procs], own_cpu_seconds(), time.monotonic(),
                 machine_busy_seconds(), broker.seconds())
        async with OffsetWatcher(settings, names.agent_events) as watcher:
            for group in row.groups:
                await watcher.wait(names.group(group), count, max(120.0, count / 200))
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
    load_s = after[2] - before[2]
    timed = seen.latencies(sent_at)
    latencies = sorted(latency for _, latency in timed)
    return Latency(
        offered_per_s=rate, achieved_per_s=achieved, events=count, samples=len(latencies),
        p50_ms=rank(latencies, 0.50), p99_ms=rank(latencies, 0.99),
        p999_ms=rank(latencies, 0.999), max_ms=latencies[-1] if latencies else 0.0,
        engine_histograms=histograms,
        consumer_cores=(sum(after[0]) - sum(before[0])) / load_s,
        bench_cores=(after[1] - before[1]) / load_s,
        machine_busy_cores=(after[3] - before[3]) / load_s,
        broker_cores=(None if before[4] is None or after[4] is None
                      else (after[4] - before[4]) / load_s),
        bench_gc_longest_ms=pauses.longest_ms if pauses is not None else 0.0,
        p99_by_second_ms=p99_by_second(timed),
    )
