"""The projectors against the limit of the stack: one command, one table, one JSON file.

    python -m bench [--events 200000] [--rounds 1] [--quick] [--out bench/results/latest.json]

Against the broker of ``SYMFONIC_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``) it:

1. generates a realistic raw stream (:mod:`bench.workload`), in memory;
2. **throughput**, on 1 and on 4 partitions, one instance each: per round and partition
   count, a fresh topic prefix gets the stream published *before* timing; then the copier,
   the typed projector, the chunk projector and the pause router each consume it in turn,
   every one in its own consumer group with its own output topics (and changelog), one
   process at a time. "typed+chunks" (two processes at once) needs the typed and chunks
   groups fresh again, so it gets a second prefix with the same stream published again.
   Time runs from the first committed offset the benchmark sees (polling the group's
   committed offsets every 50 ms) to the committed offsets reaching the end of the topic;
   the records of that first commit are not counted. For two processes at once the slower
   one's rate counts (the pipeline delivers both outputs at that pace).
3. **latency** at a fixed offered load of 50 % of the copier's 4-partition throughput: a
   fresh prefix per consumer, the consumer(s) started and ready first, then the same stream
   produced at that rate with a fresh kernel ``timestamp`` (= send time) in every event. The
   outputs are read ``read_committed`` by the benchmark; latency = read time - the source
   event's timestamp (the envelope's ``ts``, the copy's ``timestamp``, a ticket's source
   offset mapped back to its send time). Samples of the first second are dropped (warm-up).
4. **CPU seconds per million events** (psutil, user + system, over the timed window of the
   4-partition throughput run, all processes of the row summed) and **peak RSS** (VmHWM at
   the end of that run, summed).
5. **guard-state cost** (:mod:`bench.state_cost`): bytes per open run and the restore of
   100,000 open runs from the changelog.
6. the offline hot path (:mod:`bench.offline`: decode + guard + project + encode against
   ``orjson.loads`` + ``orjson.dumps``).

It prints one table with absolute figures and ratios to the copier and writes everything
as JSON. Topics it created are deleted at the end (``--keep-topics`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

from bench import offline
from bench.consumers import Consumer
from bench.kafka_io import (
    OffsetWatcher,
    OutputReader,
    create_topics,
    delete_prefix_topics,
    end_offsets,
    publish,
    publish_at_rate,
)
from bench.report import render_table
from bench.state_cost import measure_state
from bench.workload import Workload, make_workload, with_timestamp
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.kafka.topics import copier_output_topic
from symfonic_stream.topics import TopicNames

#: Rows of the report: name → the consumers run at once.
ROWS: dict[str, tuple[str, ...]] = {
    "copier": ("copier",),
    "typed": ("typed",),
    "chunks": ("chunks",),
    "typed+chunks": ("typed", "chunks"),
    "pauses": ("pauses",),
}
BASELINE = "copier"
#: The rows consumed one after the other from one published input (one group each).
_SHARED_INPUT_ROWS = ("copier", "typed", "chunks", "pauses")
_POLL_S = 0.05
#: Latency samples whose source was sent in this first part of the load are dropped.
_WARMUP_S = 1.0
#: Offered load of the latency runs, as a share of the copier's 4-partition throughput.
LOAD_SHARE = 0.5

GOALS = {
    "typed_throughput_ratio_min": 0.85,
    "typed_p99_ratio_max": 1.3,
    "restore_100k_max_s": 10.0,
    "offline_ratio_max": 3.0,
}


@dataclass(slots=True)
class Throughput:
    events: int
    seconds: float
    events_per_s: float
    cpu_s_per_million: float
    peak_rss_bytes: int
    publish_s: float = 0.0


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


@dataclass(slots=True)
class Run:
    """Everything measured, per row and round (the summary takes the medians)."""

    throughput: dict[str, dict[int, list[Throughput]]] = field(default_factory=dict)
    latency: dict[str, list[Latency]] = field(default_factory=dict)


# --------------------------------------------------------------------------- throughput


def _settings(base: Settings, prefix: str, partitions: int) -> Settings:
    return base.model_copy(update={"topic_prefix": prefix, "partitions": partitions})


async def _timed_consumption(
    settings: Settings,
    consumers: tuple[str, ...],
    total: int,
    log_dir: Path,
    within: float,
    factory: Callable[[Settings, Path], Consumer] | None = None,
) -> Throughput:
    """Start ``consumers`` on a prefix whose raw topic holds ``total`` events; time them.

    ``factory`` builds the process of a consumer that ``symfonic-stream run`` does not
    know (its ``name`` is still its group's suffix).
    """
    names = TopicNames(settings.topic_prefix)
    procs = [
        (factory(settings, log_dir) if factory is not None else Consumer(name, settings, log_dir))
        .start()
        for name in consumers
    ]
    groups = [names.group(name) for name in consumers]
    # Per process: (time, committed, cpu) at the last poll that saw nothing committed,
    # at the first that saw something, and when everything was committed.
    last_zero: list[tuple[float, int, float]] = [(time.monotonic(), 0, 0.0) for _ in procs]
    first: list[tuple[float, int, float] | None] = [None] * len(procs)
    done: list[tuple[float, int, float] | None] = [None] * len(procs)
    deadline = time.monotonic() + within
    try:
        async with OffsetWatcher(settings, names.agent_events) as watcher:
            while not all(done):
                for i, (proc, group) in enumerate(zip(procs, groups, strict=True)):
                    if done[i] is not None:
                        continue
                    if not proc.alive():
                        raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
                    committed = await watcher.committed(group)
                    point = (time.monotonic(), committed, proc.cpu_seconds())
                    if committed == 0:
                        last_zero[i] = point
                    elif first[i] is None:
                        first[i] = point
                    if committed >= total:
                        done[i] = point
                        proc.sample_rss()
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{consumers} did not finish {total} events within {within:.0f}s"
                    )
                await asyncio.sleep(_POLL_S)
    finally:
        for proc in procs:
            proc.stop()
    rates: list[float] = []
    cpu = 0.0
    timed = 0
    seconds = 0.0
    for i in range(len(procs)):
        end = done[i]
        start = first[i]
        assert end is not None and start is not None
        if end[0] - start[0] < 4 * _POLL_S:
            # Everything committed between two polls (a tiny input): time it from the
            # last poll that saw nothing, counting every event.
            start = last_zero[i]
            start = (start[0], 0, start[2])
        n = total - start[1]
        elapsed = end[0] - start[0]
        rates.append(n / elapsed)
        cpu += (end[2] - start[2]) / n * 1e6
        timed = max(timed, n)
        seconds = max(seconds, elapsed)
    return Throughput(
        events=timed,
        seconds=seconds,
        events_per_s=min(rates),
        cpu_s_per_million=cpu,
        peak_rss_bytes=sum(proc.peak_rss for proc in procs),
    )


async def measure_throughput_round(
    base: Settings,
    run_id: str,
    round_no: int,
    partitions: int,
    records: list[tuple[bytes, bytes]],
    rows: list[str],
    log_dir: Path,
    prefixes: list[str],
) -> dict[str, Throughput]:
    """One round of every row on ``partitions`` partitions."""
    results: dict[str, Throughput] = {}
    within = max(120.0, len(records) / 500)
    groups_of_inputs: list[tuple[str, list[str]]] = [
        (f"{run_id}-r{round_no}-p{partitions}", [r for r in rows if r in _SHARED_INPUT_ROWS]),
        *(
            (f"{run_id}-r{round_no}-p{partitions}-{r.replace('+', '-')}", [r])
            for r in rows
            if r not in _SHARED_INPUT_ROWS
        ),
    ]
    for prefix, members in groups_of_inputs:
        if not members:
            continue
        settings = _settings(base, prefix, partitions)
        prefixes.append(prefix)
        await create_topics(settings)
        publish_s = await publish(settings, records)
        ends = await end_offsets(settings, TopicNames(prefix).agent_events, partitions)
        total = sum(ends.values())
        if total != len(records):
            raise RuntimeError(f"published {len(records)} events, the topic holds {total}")
        _say(f"  {partitions}p  published {total:,} events in {publish_s:.1f}s ({prefix})")
        for row in members:
            result = await _timed_consumption(settings, ROWS[row], total, log_dir, within)
            result.publish_s = publish_s
            results[row] = result
            _say(
                f"  {partitions}p  {row:<13} {result.events_per_s:>9,.0f} ev/s  "
                f"cpu {result.cpu_s_per_million:6.1f} s/M  "
                f"rss {result.peak_rss_bytes / 2**20:6.1f} MB"
            )
    return results


# --------------------------------------------------------------------------- latency


def _output_topics(names: TopicNames, consumer: str) -> list[str]:
    if consumer == "copier":
        return [copier_output_topic(names)]
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
) -> Latency:
    """One latency run of ``row`` at ``rate`` events/s for ``seconds`` (0: the whole
    workload once)."""
    partitions = 4
    settings = _settings(base, prefix, partitions)
    names = TopicNames(prefix)
    await create_topics(settings)
    consumers = ROWS[row]
    procs = [Consumer(name, settings, log_dir).start() for name in consumers]
    samples: list[tuple[float, float]] = []
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

    topics = [t for name in consumers for t in _output_topics(names, name)]
    reader = OutputReader(settings, topics, partitions, on_batch)
    try:
        for proc in procs:
            await proc.wait_ready()
        await reader.start()
        await asyncio.sleep(settle_s)  # every consumer idle and polling
        me = psutil.Process()
        cpu_before = [p.cpu_seconds() for p in procs], _own_cpu(me), time.monotonic()
        sent_at, achieved = await publish_at_rate(settings, count, encode, rate)
        cpu_after = [p.cpu_seconds() for p in procs], _own_cpu(me), time.monotonic()
        load_seconds = cpu_after[2] - cpu_before[2]
        consumer_cores = (sum(cpu_after[0]) - sum(cpu_before[0])) / load_seconds
        bench_cores = (cpu_after[1] - cpu_before[1]) / load_seconds
        async with OffsetWatcher(settings, names.agent_events) as watcher:
            deadline = time.monotonic() + max(120.0, count / 200)
            for name in consumers:
                while await watcher.committed(names.group(name)) < count:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{name} did not catch up during the latency run")
                    await asyncio.sleep(_POLL_S)
        await reader.wait_caught_up()
        histograms: dict[str, dict[str, float]] = {}
        for proc in procs:
            for family, values in proc.histograms().items():
                into = histograms.setdefault(family, {})
                for name, value in values.items():
                    into[name] = into.get(name, 0.0) + value
    finally:
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
        p99_by_second_ms=[
            round(_percentile(sorted(by_second[second]), 0.99), 1)
            for second in sorted(by_second)
        ],
    )


# --------------------------------------------------------------------------- the run


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _broker_version() -> str:
    """From ``scripts/kafka.sh status`` when the project's broker runs, else unknown."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "kafka.sh"
    if not script.exists():
        return "unknown"
    try:
        done = subprocess.run(
            [str(script), "status"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for word in (done.stdout + done.stderr).replace(",", " ").split():
        if word[:1].isdigit() and word.count(".") == 2 and "Kafka" in done.stdout + done.stderr:
            return word
    return "unknown"


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def summarise(run: Run, rows: list[str], partitions: list[int]) -> dict[str, Any]:
    """Medians per row, and the ratios to the copier."""
    summary: dict[str, Any] = {}
    for row in rows:
        entry: dict[str, Any] = {"consumers": list(ROWS[row])}
        for p in partitions:
            rounds = run.throughput.get(row, {}).get(p, [])
            entry[f"throughput_{p}p_events_per_s"] = _median([t.events_per_s for t in rounds])
        four = run.throughput.get(row, {}).get(max(partitions), [])
        entry["cpu_s_per_million"] = _median([t.cpu_s_per_million for t in four])
        entry["peak_rss_mb"] = _median([t.peak_rss_bytes / 2**20 for t in four])
        lat = run.latency.get(row, [])
        entry["latency_samples"] = int(_median([float(x.samples) for x in lat]))
        for name in ("p50_ms", "p99_ms", "p999_ms"):
            entry[f"latency_{name}"] = _median([getattr(x, name) for x in lat])
        summary[row] = entry
    base = summary.get(BASELINE)
    if base is not None:
        for entry in summary.values():
            ratios = {}
            for key in (
                *(f"throughput_{p}p_events_per_s" for p in partitions),
                "latency_p50_ms",
                "latency_p99_ms",
                "latency_p999_ms",
                "cpu_s_per_million",
                "peak_rss_mb",
            ):
                ratios[key] = entry[key] / base[key] if base[key] else 0.0
            entry["ratio_to_copier"] = ratios
    return summary


def goals(summary: dict[str, Any], state: dict[str, Any] | None,
          offline_result: dict[str, Any] | None, partitions: int) -> dict[str, Any]:
    verdicts: dict[str, Any] = {}
    typed = summary.get("typed", {}).get("ratio_to_copier")
    if typed:
        ratio = typed[f"throughput_{partitions}p_events_per_s"]
        verdicts["typed_throughput_ratio"] = {
            "value": ratio, "goal": f">= {GOALS['typed_throughput_ratio_min']}",
            "met": ratio >= GOALS["typed_throughput_ratio_min"],
        }
        ratio = typed["latency_p99_ms"]
        verdicts["typed_p99_latency_ratio"] = {
            "value": ratio, "goal": f"<= {GOALS['typed_p99_ratio_max']}",
            "met": ratio <= GOALS["typed_p99_ratio_max"],
        }
    if state is not None:
        verdicts["restore_seconds"] = {
            "value": state["restore_s"], "runs": state["runs"],
            "goal": f"< {GOALS['restore_100k_max_s']} s for 100,000 runs",
            # The goal is set for 100,000 runs; a smaller state says nothing about it.
            "met": (state["restore_s"] < GOALS["restore_100k_max_s"])
            if state["runs"] >= 100_000 else None,
        }
    if offline_result is not None:
        verdicts["offline_ratio"] = {
            "value": offline_result["ratio"], "goal": f"<= {GOALS['offline_ratio_max']}",
            "met": offline_result["ratio"] <= GOALS["offline_ratio_max"],
        }
    return verdicts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--events", type=int, default=200_000, help="raw events (200,000)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; medians are reported")
    parser.add_argument("--partitions", default="1,4", help="partition counts (1,4)")
    parser.add_argument("--latency-seconds", type=float, default=20.0,
                        help="length of each offered-load run (20; 0: the whole stream once)")
    parser.add_argument("--restore-runs", type=int, default=100_000,
                        help="open runs in the state benchmark (100,000)")
    parser.add_argument("--offline-events", type=int, default=200_000,
                        help="events of the offline hot-path benchmark (200,000; 0 skips it)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"rows to run ({','.join(ROWS)}); the copier always runs")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (seconds, for smoke tests): the figures mean nothing")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pause-share", type=float, default=None,
                        help="share of runs ending in a pause (0.03; --quick: 0.5, so the "
                             "pause router's latency row has samples)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/latest.json"))
    parser.add_argument("--keep-topics", action="store_true")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="consumer logs (default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    if args.quick:
        args.events = min(args.events, 3_000)
        args.latency_seconds = 0.0
        args.restore_runs = min(args.restore_runs, 2_000)
        args.offline_events = min(args.offline_events, 5_000)
    if args.pause_share is None:
        args.pause_share = 0.5 if args.quick else 0.03
    return args


async def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    base = load_settings()
    partitions = sorted({int(p) for p in args.partitions.split(",")})
    rows = [r for r in ROWS if r in {BASELINE, *args.rows.split(",")}]
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="symfonic-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    prefixes: list[str] = []
    result: dict[str, Any] = {
        "command": "python -m bench " + " ".join(argv),
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "broker": {"bootstrap_servers": base.bootstrap_servers, "version": _broker_version()},
        "settings": {
            "batch_max_records": base.batch_max_records,
            "batch_max_latency_ms": base.batch_max_latency_ms,
            "compression": base.compression,
        },
        "goals": GOALS,
    }
    _say(f"bench {run_id}: generating {args.events:,} events")
    workload = make_workload(args.events, seed=args.seed, pause_share=args.pause_share)
    result["workload"] = workload.describe()
    records = workload.encoded()
    measured = Run()
    try:
        for round_no in range(args.rounds):
            for p in partitions:
                _say(f"round {round_no + 1}/{args.rounds}: throughput on {p} partition(s)")
                got = await measure_throughput_round(
                    base, run_id, round_no, p, records, rows, log_dir, prefixes
                )
                for row, value in got.items():
                    measured.throughput.setdefault(row, {}).setdefault(p, []).append(value)
        top = max(partitions)
        base_rate = _median([t.events_per_s for t in measured.throughput[BASELINE][top]])
        rate = LOAD_SHARE * base_rate
        result["latency_offered_load_per_s"] = rate
        for round_no in range(args.rounds):
            _say(f"round {round_no + 1}/{args.rounds}: latency at {rate:,.0f} events/s")
            for row in rows:
                prefix = f"{run_id}-lat{round_no}-{row.replace('+', '-')}"
                prefixes.append(prefix)
                lat = await measure_latency(
                    base, prefix, row, workload, rate, args.latency_seconds, log_dir,
                    settle_s=0.2 if args.quick else 1.0,
                )
                measured.latency.setdefault(row, []).append(lat)
                _say(
                    f"  {row:<13} p50 {lat.p50_ms:7.1f} ms  p99 {lat.p99_ms:7.1f} ms  "
                    f"p999 {lat.p999_ms:7.1f} ms  ({lat.samples:,} samples, "
                    f"{lat.achieved_per_s:,.0f}/s offered)"
                )
        state: dict[str, Any] | None = None
        if args.restore_runs > 0:
            _say(f"guard state: {args.restore_runs:,} open runs")
            prefix = f"{run_id}-state"
            prefixes.append(prefix)
            state = await measure_state(
                base, prefix, args.restore_runs, log_dir, repeat=1 if args.quick else 3
            )
            _say(
                f"  {state['encoded_record_bytes_per_run']:.0f} B/run encoded, "
                f"{state['memory_bytes_per_run_tracemalloc']:.0f} B/run in memory, "
                f"restore {state['restore_s']:.2f}s, start->ready "
                f"{state['typed_start_to_ready_s']:.2f}s"
            )
    finally:
        if not args.keep_topics and prefixes:
            with_suppressed = await _cleanup(base, prefixes)
            _say(f"deleted {with_suppressed} benchmark topics")
        if args.log_dir is None:
            shutil.rmtree(log_dir, ignore_errors=True)
    offline_result: dict[str, Any] | None = None
    if args.offline_events > 0:
        _say(f"offline hot path: {args.offline_events:,} events")
        offline_result = offline.measure(args.offline_events, "typed", repeat=3)
        _say(f"  ratio {offline_result['ratio']:.2f}x orjson loads+dumps")
    summary = summarise(measured, rows, partitions)
    result["offered_load_share"] = LOAD_SHARE
    result["rows"] = summary
    result["raw"] = {
        "throughput": {
            row: {str(p): [asdict(t) for t in ts] for p, ts in by_p.items()}
            for row, by_p in measured.throughput.items()
        },
        "latency": {row: [asdict(x) for x in ls] for row, ls in measured.latency.items()},
    }
    result["state"] = state
    result["offline"] = offline_result
    result["verdicts"] = goals(summary, state, offline_result, max(partitions))
    result["partitions"] = partitions
    result["rounds"] = args.rounds
    result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["quick"] = bool(args.quick)
    return result


async def _cleanup(base: Settings, prefixes: list[str]) -> int:
    try:
        return await delete_prefix_topics(base, prefixes)
    except Exception as exc:  # clean-up must not hide the result
        _say(f"could not delete the benchmark topics: {exc!r}")
        return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # aiokafka warns about every retried produce right after a topic was created.
    logging.basicConfig(level=logging.ERROR)
    args = parse_args(argv)
    result = asyncio.run(run(args, argv))
    print(render_table(result))
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    tmp.replace(out)
    _say(f"wrote {out}")
    return 0
