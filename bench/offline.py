"""Offline hot-path benchmark: decode + guard + project + encode, against plain orjson.

    python -m bench.offline [--events 1000000] [--projection typed|chunks] [--repeat 3]

Times are CPU seconds of the process (``time.process_time``), best of ``--repeat``.

The baseline is the cheapest thing any JSON consumer must do with the same lines:
``orjson.loads`` then ``orjson.dumps``. The figure that matters is the ratio (goal: the
full path within 3x the baseline), measured in one process on the same input.

Two shapes of the full path are timed:

* ``offline``: :func:`symfonic_stream.tools.offline.project_lines`, the ``project`` command's
  loop (one collector per line, no state written) — the figure the goal is set on;
* ``engine``: what a live stream task runs per fetched batch — an ``InputRecord`` per
  Kafka record (key checked against ``run_id``), ``ProjectorProcessor.process`` into one
  collector per 1,000 records, then the stores write their changes (every run touched by
  the batch encoded for the changelog).
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from typing import Any

import orjson

from symfonic_stream.engine.records import Collector, InputRecord
from symfonic_stream.models.decoding import DecodeLimits
from symfonic_stream.models.names import ProjectionName
from symfonic_stream.processors.ordering.guard import GuardLimits
from symfonic_stream.processors.projector import PROJECTIONS, ProjectorProcessor
from symfonic_stream.state.store import write_changes
from symfonic_stream.tools.offline import project_lines
from symfonic_stream.tools.synthetic import RunShape, synthetic_stream

BATCH = 1000
#: CPU time of this process, not wall time: on a shared machine the wall clock also counts
#: the time other processes had the CPU.
_clock = time.process_time


def make_lines(events: int, seed: int = 1) -> list[bytes]:
    """About ``events`` raw lines from realistic runs (duplicates and reordering included)."""
    lines: list[bytes] = []
    batch = 0
    while len(lines) < events:
        stream = synthetic_stream(seed + batch, 500, shape=RunShape(), run_prefix=f"b{batch}")
        lines.extend(orjson.dumps(event) for event in stream)
        batch += 1
    return lines[:events]


def time_baseline(lines: list[bytes]) -> float:
    start = _clock()
    for line in lines:
        orjson.dumps(orjson.loads(line))
    return _clock() - start


def time_projection(lines: list[bytes], projection: ProjectionName) -> tuple[float, int]:
    produced = 0
    start = _clock()
    for released in project_lines(lines, projection):
        produced += len(released.outputs)
    return _clock() - start, produced


def engine_records(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` per line, as the raw topic carries them."""
    return [(orjson.loads(line)["run_id"].encode(), line) for line in lines]


def time_engine_shape(
    records: list[tuple[bytes, bytes]], projection: ProjectionName
) -> tuple[float, int]:
    processor = ProjectorProcessor(
        PROJECTIONS[projection], "bench.out", GuardLimits(), decode=DecodeLimits(1_048_576)
    )
    produced = 0
    now = time.time()
    start = _clock()
    for first in range(0, len(records), BATCH):
        out = Collector()
        for offset, (key, value) in enumerate(records[first : first + BATCH], start=first):
            item = InputRecord("bench.in", 0, offset, key, value, (), 0)
            processor.process(item, now, out)
        write_changes(processor.stores, out.state)
        produced += len(out.outputs)
    return _clock() - start, produced


def measure(events: int, projection: ProjectionName = "typed", repeat: int = 3) -> dict[str, Any]:
    """Best-of-``repeat`` timings per event and the ratios to the baseline."""
    lines = make_lines(events)
    records = engine_records(lines)
    gc.collect()
    baseline = min(time_baseline(lines) for _ in range(repeat))
    full, produced = min(
        (time_projection(lines, projection) for _ in range(repeat)), key=lambda r: r[0]
    )
    engine, _ = min(
        (time_engine_shape(records, projection) for _ in range(repeat)), key=lambda r: r[0]
    )
    per_event = 1e6 / len(lines)
    return {
        "events": len(lines),
        "projection": projection,
        "mean_line_bytes": sum(map(len, lines)) / len(lines),
        "records_out": produced,
        "baseline_us_per_event": baseline * per_event,
        "offline_us_per_event": full * per_event,
        "engine_shape_us_per_event": engine * per_event,
        "ratio": full / baseline,
        "engine_shape_ratio": engine / baseline,
        "repeat": repeat,
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--projection", choices=["typed", "chunks"], default="typed")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()

    r = measure(args.events, args.projection, args.repeat)
    name = args.projection
    print(f"machine      {platform.processor() or platform.machine()}, python {r['python']}")
    print(f"events       {r['events']:,} lines, {r['mean_line_bytes']:.0f} bytes average, "
          f"{r['records_out']:,} records out")
    print(f"baseline     {r['baseline_us_per_event']:6.2f} us/event  (orjson.loads + orjson.dumps)")
    print(f"{name:<12} {r['offline_us_per_event']:6.2f} us/event  "
          "(decode + guard + project + encode, the project command's loop)")
    print(f"{name + ' live':<12} {r['engine_shape_us_per_event']:6.2f} us/event  "
          f"(the same per {BATCH}-record batch as a stream task: key check, state written)")
    print(f"ratio        {r['ratio']:6.2f}x the baseline (goal <= 3x); "
          f"live shape {r['engine_shape_ratio']:.2f}x")


if __name__ == "__main__":
    main()
