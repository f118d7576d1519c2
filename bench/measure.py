"""How the benchmarks measure: a row's throughput and its latency against the broker, CPU,
memory and the collector's pauses, and where a run ran.

**Throughput** (:func:`throughput_round`): a fresh prefix gets the stream published
*before* timing; then each row consumes it in turn, in its own consumer group with its own
output topics (and changelog), one row at a time (a row whose groups are another's gets a
prefix of its own, the stream published again). Time runs from the first committed offset
the benchmark sees (polling the groups' committed offsets every 50 ms) to the committed
offsets reaching the end of the topic; the records of that first commit are not counted.
For two processes at once the slower one's rate counts (the pipeline delivers both outputs
at that pace). CPU seconds per million events (all processes of the row summed) and peak
RSS (VmHWM at the end, summed) come from the same window.

**Latency** (:func:`measure_latency`): on a fresh prefix the row's processes start and are
ready first, then the stream is produced at the offered rate with a fresh kernel
``timestamp`` (= send time) in every event. The outputs are read ``read_committed``;
latency = read time - the source event's timestamp (the envelope's ``ts``, the copy's
``timestamp``, a ticket's source offset mapped back to its send time). Samples of the
first second are dropped (warm-up).

**The harness's own pauses**: a full collection of CPython's cyclic collector walks every
tracked object; the benchmark holds its whole workload (a million events as dicts) in the
process that publishes and reads, where each full collection took about a second and the
reader read nothing meanwhile, a stall counted to whichever row ran (docs/benchmarks.md).
So a measurement freezes what it holds before its load, with the engine's own
``symfonic_stream.engine.heap.settle``, and records the collector's pauses during it
(:class:`CollectorPauses`).
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import psutil

from bench.kafka_io import POLL_S, OffsetWatcher, OutputReader, Session, publish_at_rate
from bench.processes import ROOT, Row
from bench.report import say
from bench.workload import Workload, with_timestamp
from symfonic_stream.config import Settings
from symfonic_stream.engine.heap import settle
from symfonic_stream.models.names import TopicNames

T = TypeVar("T")


def started(prog: str, argv: list[str] | None = None) -> dict[str, Any]:
    """A result's first fields: its command line, when, and on what machine."""
    return {"command": f"python -m {prog} " + " ".join(sys.argv[1:] if argv is None else argv),
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine()}


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def broker_version(bootstrap: str) -> str:
    """From ``scripts/kafka.sh status`` about the port of ``bootstrap`` (``host:port``)
    when the project's broker runs, else unknown."""
    env = dict(os.environ)
    port = bootstrap.split(",")[0].rpartition(":")[2]
    if port.isdigit() and "SYMFONIC_KAFKA_PORT" not in env:
        env["SYMFONIC_KAFKA_PORT"] = port
    try:
        done = subprocess.run([str(ROOT / "scripts" / "kafka.sh"), "status"],
                              capture_output=True, text=True, timeout=30, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    said = done.stdout + done.stderr
    return next((word for word in said.replace(",", " ").split()
                 if word[:1].isdigit() and word.count(".") == 2 and "Kafka" in said),
                "unknown")


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process) since boot."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def own_cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


class BrokerCpu:
    """CPU seconds of the broker process serving ``bootstrap``, when it runs on this machine
    (the broker shares the cores with the consumers: its share is part of every result)."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self._process: psutil.Process | None = None
        if host not in ("127.0.0.1", "localhost", "::1", "") or not port.isdigit():
            return
        try:
            self._process = next((psutil.Process(c.pid) for c in psutil.net_connections("tcp")
                                  if c.status == psutil.CONN_LISTEN and c.laddr
                                  and c.laddr.port == int(port) and c.pid is not None), None)
        except (psutil.Error, OSError):  # not allowed to see other processes' sockets
            self._process = None

    def seconds(self) -> float | None:
        """The broker's user + system CPU seconds so far; None when it is not found here."""
        try:
            times = self._process.cpu_times() if self._process is not None else None
        except psutil.Error:
            return None
        return None if times is None else float(times.user + times.system)


class CollectorPauses:
    """The collector's pauses in this process while recording (``gc.callbacks``): their
    total, the longest of any generation and the longest full one. :meth:`close` stops."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.longest_ms = 0.0
        self.longest_full_ms = 0.0
        self._started = 0.0
        gc.callbacks.append(self._observe)

    def close(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took_ms = (time.perf_counter() - self._started) * 1000
        self.total_s += took_ms / 1000
        self.longest_ms = max(self.longest_ms, took_ms)
        if info["generation"] == 2:
            self.longest_full_ms = max(self.longest_full_ms, took_ms)


def nearest_rank(ordered: list[float], share: float) -> float:
    """Nearest-rank percentile of an ascending list (0 when empty)."""
    if not ordered:
        return 0.0
    return ordered[max(1, min(len(ordered), round(share * len(ordered) + 0.5))) - 1]


def at_share(ordered: list[float], share: float) -> float:
    """The value at index ``share`` times the length of an ascending list (0 when empty)."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


def best_of(repeat: int, work: Callable[[], T],
            clock: Callable[[], float] = time.process_time) -> tuple[float, T]:
    """The least CPU time (of ``clock``) of ``repeat`` runs of ``work``, and what that run
    returned: on a shared machine the wall clock also counts other processes' time."""
    best: tuple[float, T] | None = None
    for _ in range(repeat):
        start = clock()
        got = work()
        took = clock() - start
        if best is None or took < best[0]:
            best = (took, got)
    assert best is not None
    return best


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
    """Every row of ``rows``, in turn, on ``records`` published on ``partitions``
    partitions before timing."""
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
    workload once), on a prefix of its own."""
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
    by_second: dict[int, list[float]] = {}
    for at, latency in timed:
        by_second.setdefault(int(at), []).append(latency)
    return Latency(
        offered_per_s=rate, achieved_per_s=achieved, events=count, samples=len(latencies),
        p50_ms=nearest_rank(latencies, 0.50), p99_ms=nearest_rank(latencies, 0.99),
        p999_ms=nearest_rank(latencies, 0.999), max_ms=latencies[-1] if latencies else 0.0,
        engine_histograms=histograms,
        consumer_cores=(sum(after[0]) - sum(before[0])) / load_s,
        bench_cores=(after[1] - before[1]) / load_s,
        machine_busy_cores=(after[3] - before[3]) / load_s,
        broker_cores=(None if before[4] is None or after[4] is None
                      else (after[4] - before[4]) / load_s),
        bench_gc_longest_ms=pauses.longest_ms if pauses is not None else 0.0,
        p99_by_second_ms=[round(nearest_rank(sorted(by_second[s]), 0.99), 1)
                          for s in sorted(by_second)],
    )
