"""Latency at the same *relative* load: each consumer offered 50 % of its own throughput.

    python -m bench.relative_load [--rows copier,typed] [--events 200000] [--rounds 3]
                                  [--latency-seconds 20]

The main benchmark offers every consumer 50 % of the *copier's* throughput, as the goal is
written. A consumer with less capacity then runs closer to its own limit, and on a shared
machine latency grows steeply near the limit (queueing). This experiment separates the two
causes: per round it measures each row's 4-partition throughput, then offers each row 50 %
of its own. If the typed projector's p99 at its own 50 % is close to the copier's at the
copier's 50 %, its latency gap at a shared offered load is its throughput gap, not
something the engine adds per record.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import tempfile
import uuid
from collections import defaultdict
from pathlib import Path

from bench.kafka_io import cleanup
from bench.latency import LOAD_SHARE, measure_latency
from bench.progress import say
from bench.rows import BASELINE, ROWS
from bench.throughput import measure_throughput_round
from bench.workload import make_workload
from symfonic_stream.config import load_settings

PARTITIONS = 4


async def run(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Per row: its throughputs, offered rates and p50/p99 latencies, one value per round."""
    base = load_settings()
    rows = [r for r in ROWS if r in {BASELINE, *args.rows.split(",")}]
    run_id = f"bench-rel-{uuid.uuid4().hex[:8]}"
    log_dir = Path(tempfile.mkdtemp(prefix="symfonic-rel-"))
    prefixes: list[str] = []
    workload = make_workload(args.events)
    records = workload.encoded()
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        for round_no in range(args.rounds):
            got = await measure_throughput_round(
                base, run_id, round_no, PARTITIONS, records, rows, log_dir, prefixes
            )
            for row in rows:
                rate = LOAD_SHARE * got[row].events_per_s
                prefix = f"{run_id}-lat{round_no}-{row.replace('+', '-')}"
                prefixes.append(prefix)
                lat = await measure_latency(
                    base, prefix, row, workload, rate, args.latency_seconds, log_dir,
                    settle_s=1.0,
                )
                for name, value in (
                    ("events_per_s", got[row].events_per_s), ("offered_per_s", rate),
                    ("p50_ms", lat.p50_ms), ("p99_ms", lat.p99_ms),
                ):
                    found[row][name].append(value)
                say(f"  {row:<13} {got[row].events_per_s:>9,.0f} ev/s, offered "
                    f"{rate:>7,.0f}/s: p50 {lat.p50_ms:7.1f} ms  p99 {lat.p99_ms:7.1f} ms")
    finally:
        await cleanup(base, prefixes)
        shutil.rmtree(log_dir, ignore_errors=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="copier,typed")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    found = asyncio.run(run(args))
    base_p99 = statistics.median(found[BASELINE]["p99_ms"])
    print(f"{'consumer':<14} {'ev/s 4p':>9} {'offered/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p99 x copier':>13}")
    for row, values in found.items():
        med = {name: statistics.median(series) for name, series in values.items()}
        print(f"{row:<14} {med['events_per_s']:>9,.0f} {med['offered_per_s']:>10,.0f} "
              f"{med['p50_ms']:>8.1f} {med['p99_ms']:>8.1f} {med['p99_ms'] / base_p99:>13.2f}")


if __name__ == "__main__":
    main()
