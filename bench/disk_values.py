"""``python -m bench.disk_values``: what one partition of open runs costs in memory and at a
start, with its values on disk (``SYMFONIC_STATE_CACHE_KEYS`` > 0) or loaded into memory
(``0``), from the same persistent store (issue 36).

1. ``--runs`` open runs (300,000 by default), built as the ordering guard holds them
   mid-stream (``bench.state_cost.open_run_states``: 3 % paused, 1 % with an event
   buffered), are written to one partition's RocksDB database with a checkpoint, as
   ``state/disk.py`` writes them.
2. For each mode, in a fresh interpreter: the database is opened for a fresh typed
   projector (values on disk: attached with a cache of ``--cache-keys``; in memory: loaded),
   the processor's ``restored`` runs (the buffered events, and every run's deadline in
   memory; on disk the deadlines are left to the punctuations' sweep, which is then run
   to its end: it keeps those due within the horizon, ten minutes), the cache is evicted
   down to its limit, and the growth of the process's RSS over a process that only built
   the processor is read, with the seconds the open, ``restored`` and the sweep took.

No broker: this is the state layer alone. Figures in MiB, bytes per run and seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.state_cost import _fresh_processor, open_run_states
from symfonic_stream.config import Settings
from symfonic_stream.engine.records import Collector
from symfonic_stream.state.disk import DiskState


def write_database(path: Path, runs: int) -> int:
    """``runs`` open runs into a database at ``path``; how many records."""
    state = open_run_states(runs, "probe.agent-events")
    disk = DiskState(path)
    for key, value in state.records:
        disk.record(key, value)
    disk.mark(len(state.records))
    disk.close()
    return len(state.records)


def probe(path: Path, cache_keys: int) -> dict[str, float]:
    """In this (fresh) process: open ``path`` for a fresh processor, ``restored``, evict."""
    settings = Settings(topic_prefix="probe", partitions=1)
    processor = _fresh_processor(settings)
    gc.collect()
    before = psutil.Process().memory_info().rss
    started = time.perf_counter()
    disk = DiskState(path)
    disk.checkpoint()
    if cache_keys > 0:
        disk.attach(processor.stores, cache_keys)
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
    grown = psutil.Process().memory_info().rss - before
    disk.close()
    return {"rss_grown_mib": grown / 2**20, "bytes_per_run": grown / processor.active_runs,
            "open_s": opened - started, "restored_s": restored - opened,
            "scheduled_later_s": done - restored, "active_runs": processor.active_runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.disk_values", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300_000)
    parser.add_argument("--cache-keys", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)  # (the fresh process)
    args = parser.parse_args(argv)
    if args.probe is not None:
        print(json.dumps(probe(args.probe, args.cache_keys)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-disk-values-") as folder:
        path = Path(folder) / "0"
        records = write_database(path, args.runs)
        rows: dict[str, Any] = {"runs": args.runs, "records": records}
        for label, keys in (("values on disk", args.cache_keys), ("in memory", 0)):
            done = subprocess.run(
                [sys.executable, "-m", "bench.disk_values", "--probe", str(path),
                 "--cache-keys", str(keys)], capture_output=True, text=True, check=True,
                timeout=900)
            rows[label] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{args.runs:,} open runs in one partition's database ({records:,} records)\n")
    print("| mode | RSS grown (MiB) | bytes per run | open (s) | restored (s) "
          "| scheduled later (s) |")
    print("|---|---|---|---|---|---|")
    for label, keys in (("values on disk", args.cache_keys), ("in memory", 0)):
        row = rows[label]
        print(f"| {label} (`SYMFONIC_STATE_CACHE_KEYS={keys}`) | {row['rss_grown_mib']:.0f} "
              f"| {row['bytes_per_run']:.0f} | {row['open_s']:.2f} | {row['restored_s']:.2f} "
              f"| {row['scheduled_later_s']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
