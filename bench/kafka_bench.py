"""The projectors against the limit of the stack: one command, one table, one JSON file.

    python -m bench [--events 200000] [--rounds 1] [--quick] [--out bench/results/latest.json]

Against the broker of ``SYMFONIC_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``) it:

1. generates a realistic raw stream (:mod:`bench.workload`), in memory;
2. **throughput** (:mod:`bench.throughput`), on 1 and on 4 partitions, one instance each:
   every row consumes the stream, published before timing, in its own consumer group, timed
   by the group's committed offsets;
3. **latency** (:mod:`bench.latency`) at a fixed offered load of 50 % of the copier's
   4-partition throughput: the time from an event's send to its output being readable;
4. **CPU seconds per million events** and **peak RSS** of each row over its 4-partition
   throughput run (:mod:`bench.throughput`);
5. **guard-state cost** (:mod:`bench.state_cost`): bytes per open run and the restore of
   100,000 open runs from the changelog.
6. the offline hot path (:mod:`bench.offline`: decode + guard + project + encode against
   ``orjson.loads`` + ``orjson.dumps``).

It prints one table with absolute figures and ratios to the copier (:mod:`bench.summary`,
:mod:`bench.report`) and writes everything as JSON. Topics it created are deleted at the end
(``--keep-topics`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import shutil
import sys
import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from bench import offline
from bench.kafka_io import cleanup
from bench.latency import LOAD_SHARE, measure_latency
from bench.machine import broker_version, machine
from bench.progress import say
from bench.report import render_table
from bench.rows import BASELINE, ROWS
from bench.state_cost import measure_state
from bench.summary import GOALS, Run, goals, median, summarise
from bench.throughput import measure_throughput_round
from bench.workload import make_workload
from symfonic_stream.config import load_settings


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
        "broker": {"bootstrap_servers": base.bootstrap_servers, "version": broker_version()},
        "settings": {
            "batch_max_records": base.batch_max_records,
            "batch_max_latency_ms": base.batch_max_latency_ms,
            "compression": base.compression,
        },
        "goals": GOALS,
    }
    say(f"bench {run_id}: generating {args.events:,} events")
    workload = make_workload(args.events, seed=args.seed, pause_share=args.pause_share)
    result["workload"] = workload.describe()
    records = workload.encoded()
    measured = Run()
    try:
        for round_no in range(args.rounds):
            for p in partitions:
                say(f"round {round_no + 1}/{args.rounds}: throughput on {p} partition(s)")
                got = await measure_throughput_round(
                    base, run_id, round_no, p, records, rows, log_dir, prefixes
                )
                for row, value in got.items():
                    measured.throughput.setdefault(row, {}).setdefault(p, []).append(value)
        top = max(partitions)
        base_rate = median([t.events_per_s for t in measured.throughput[BASELINE][top]])
        rate = LOAD_SHARE * base_rate
        result["latency_offered_load_per_s"] = rate
        for round_no in range(args.rounds):
            say(f"round {round_no + 1}/{args.rounds}: latency at {rate:,.0f} events/s")
            for row in rows:
                prefix = f"{run_id}-lat{round_no}-{row.replace('+', '-')}"
                prefixes.append(prefix)
                lat = await measure_latency(
                    base, prefix, row, workload, rate, args.latency_seconds, log_dir,
                    settle_s=0.2 if args.quick else 1.0,
                )
                measured.latency.setdefault(row, []).append(lat)
                say(
                    f"  {row:<13} p50 {lat.p50_ms:7.1f} ms  p99 {lat.p99_ms:7.1f} ms  "
                    f"p999 {lat.p999_ms:7.1f} ms  ({lat.samples:,} samples, "
                    f"{lat.achieved_per_s:,.0f}/s offered; cores: consumer "
                    f"{lat.consumer_cores:.2f}, bench {lat.bench_cores:.2f}, machine "
                    f"{lat.machine_busy_cores:.2f})"
                )
        state: dict[str, Any] | None = None
        if args.restore_runs > 0:
            say(f"guard state: {args.restore_runs:,} open runs")
            prefix = f"{run_id}-state"
            prefixes.append(prefix)
            state = await measure_state(
                base, prefix, args.restore_runs, log_dir, repeat=1 if args.quick else 3
            )
            say(
                f"  {state['encoded_record_bytes_per_run']:.0f} B/run encoded, "
                f"{state['memory_bytes_per_run_tracemalloc']:.0f} B/run in memory, "
                f"restore {state['restore_s']:.2f}s, start->ready "
                f"{state['typed_start_to_ready_s']:.2f}s"
            )
    finally:
        if not args.keep_topics and prefixes:
            with_suppressed = await cleanup(base, prefixes)
            say(f"deleted {with_suppressed} benchmark topics")
        if args.log_dir is None:
            shutil.rmtree(log_dir, ignore_errors=True)
    offline_result: dict[str, Any] | None = None
    if args.offline_events > 0:
        say(f"offline hot path: {args.offline_events:,} events")
        offline_result = offline.measure(args.offline_events, "typed", repeat=3)
        say(f"  ratio {offline_result['ratio']:.2f}x orjson loads+dumps")
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
    say(f"wrote {out}")
    return 0
