"""Throughput, CPU and peak RSS of the consumers, each on a stream published before timing.

Per round and partition count, a fresh topic prefix gets the stream published *before*
timing; then the copier, the typed projector, the chunk projector and the pause router each
consume it in turn, every one in its own consumer group with its own output topics (and
changelog), one process at a time. "typed+chunks" (two processes at once) needs the typed and
chunks groups fresh again, so it gets a second prefix with the same stream published again.
Time runs from the first committed offset the benchmark sees (polling the group's committed
offsets every 50 ms) to the committed offsets reaching the end of the topic; the records of
that first commit are not counted. For two processes at once the slower one's rate counts
(the pipeline delivers both outputs at that pace).

**CPU seconds per million events** (psutil, user + system, over the timed window, all
processes of the row summed) and **peak RSS** (VmHWM at the end of the run, summed) come from
the same run; the summary reports those of the 4-partition run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.consumers import Consumer
from bench.kafka_io import (
    POLL_S,
    OffsetWatcher,
    create_topics,
    end_offsets,
    prefix_settings,
    publish,
)
from bench.machine import machine_busy_seconds
from bench.progress import say
from bench.rows import ROWS
from symfonic_stream.config import Settings
from symfonic_stream.engine.heap import settle
from symfonic_stream.models.names import TopicNames

#: The rows consumed one after the other from one published input (one group each).
_SHARED_INPUT_ROWS = ("copier", "typed", "chunks", "pauses")


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
    #: summed over the row's processes; :meth:`bench.consumers.Consumer.engine_time`).
    engine_time: dict[str, float] = field(default_factory=dict)
    committed: int = 0


async def timed_consumption(
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
    settle()  # no full collection of the workload while the watcher times (bench/pauses.py)
    procs = [
        (factory(settings, log_dir) if factory is not None else Consumer(name, settings, log_dir))
        .start()
        for name in consumers
    ]
    groups = [names.group(name) for name in consumers]
    # Per process: (time, committed, its cpu, machine busy) at the last poll that saw
    # nothing committed, at the first that saw something, and when everything was.
    Point = tuple[float, int, float, float]
    last_zero: list[Point] = [(time.monotonic(), 0, 0.0, 0.0) for _ in procs]
    first: list[Point | None] = [None] * len(procs)
    done: list[Point | None] = [None] * len(procs)
    traces: list[list[Point]] = [[] for _ in procs]
    engine_time: dict[str, float] = {}
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
                        f"{consumers} did not finish {total} events within {within:.0f}s"
                    )
                await asyncio.sleep(POLL_S)
    finally:
        for proc in procs:
            proc.stop()
    rates: list[float] = []
    cpu = 0.0
    cores = 0.0
    machine_cores = 0.0
    timed = 0
    seconds = 0.0
    for i in range(len(procs)):
        end = done[i]
        start = first[i]
        assert end is not None and start is not None
        if end[0] - start[0] < 4 * POLL_S:
            # Everything committed between two polls (a tiny input): time it from the
            # last poll that saw nothing, counting every event.
            start = last_zero[i]
            start = (start[0], 0, start[2], start[3])
        n = total - start[1]
        elapsed = end[0] - start[0]
        rates.append(n / elapsed)
        cpu += (end[2] - start[2]) / n * 1e6
        cores += (end[2] - start[2]) / elapsed
        if elapsed >= seconds:
            machine_cores = (end[3] - start[3]) / elapsed
        timed = max(timed, n)
        seconds = max(seconds, elapsed)
    steady = [_steady(trace, total) for trace in traces]
    return Throughput(
        steady_events_per_s=min(rate for rate, _ in steady),
        steady_cpu_s_per_million=sum(cpu for _, cpu in steady),
        engine_time={k: round(v, 3) for k, v in sorted(engine_time.items())},
        committed=min(end[1] for end in done if end is not None),
        events=timed,
        seconds=seconds,
        events_per_s=min(rates),
        cpu_s_per_million=cpu,
        peak_rss_bytes=sum(proc.peak_rss for proc in procs),
        consumer_cores=cores,
        machine_busy_cores=machine_cores,
    )


def _steady(trace: list[tuple[float, int, float, float]], total: int) -> tuple[float, float]:
    """(events/s, CPU s per million) between the polls that first saw 10 % and 90 %
    of ``total`` committed."""
    low = next(p for p in trace if p[1] >= 0.1 * total)
    high = next(p for p in trace if p[1] >= 0.9 * total)
    if high[1] <= low[1]:  # one commit took it past both: nothing finer to see
        low = next(p for p in reversed(trace) if p[1] < low[1])
    n = high[1] - low[1]
    return n / (high[0] - low[0]), (high[2] - low[2]) / n * 1e6


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
        settings = prefix_settings(base, prefix, partitions)
        prefixes.append(prefix)
        await create_topics(settings)
        publish_s = await publish(settings, records)
        ends = await end_offsets(settings, TopicNames(prefix).agent_events, partitions)
        total = sum(ends.values())
        if total != len(records):
            raise RuntimeError(f"published {len(records)} events, the topic holds {total}")
        say(f"  {partitions}p  published {total:,} events in {publish_s:.1f}s ({prefix})")
        for row in members:
            result = await timed_consumption(settings, ROWS[row], total, log_dir, within)
            result.publish_s = publish_s
            results[row] = result
            say(
                f"  {partitions}p  {row:<13} {result.events_per_s:>9,.0f} ev/s  "
                f"cpu {result.cpu_s_per_million:6.1f} s/M  "
                f"rss {result.peak_rss_bytes / 2**20:6.1f} MB  "
                f"cores {result.consumer_cores:.2f} (machine {result.machine_busy_cores:.2f})"
            )
    return results
