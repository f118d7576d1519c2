"""Offline hot-path benchmark: decode + guard + project + encode, against plain orjson.

    python -m bench.offline [--events 1000000] [--projection typed|chunks]

The baseline is the cheapest thing any JSON consumer must do with the same lines:
``orjson.loads`` then ``orjson.dumps``. The figure that matters is the ratio (goal: the
full path within 3x the baseline), measured in one process on the same input.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from typing import Any

import orjson

from symfonic_stream.offline import project_lines
from symfonic_stream.synthetic import RunShape, synthetic_stream


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
    start = time.perf_counter()
    for line in lines:
        orjson.dumps(orjson.loads(line))
    return time.perf_counter() - start


def time_projection(lines: list[bytes], projection: Any) -> tuple[float, int]:
    produced = 0
    start = time.perf_counter()
    for released in project_lines(lines, projection):
        produced += len(released.outputs)
    return time.perf_counter() - start, produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--projection", choices=["typed", "chunks"], default="typed")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()

    lines = make_lines(args.events)
    size = sum(map(len, lines)) / len(lines)
    gc.collect()
    baseline = min(time_baseline(lines) for _ in range(args.repeat))
    full, produced = min(
        (time_projection(lines, args.projection) for _ in range(args.repeat)), key=lambda r: r[0]
    )
    per_event = 1e6 / len(lines)
    print(f"machine      {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"events       {len(lines):,} lines, {size:.0f} bytes average, {produced:,} records out")
    print(f"baseline     {baseline * per_event:6.2f} us/event  (orjson.loads + orjson.dumps)")
    print(f"{args.projection:<12} {full * per_event:6.2f} us/event  (decode + guard + project + encode)")
    print(f"ratio        {full / baseline:6.2f}x the baseline (goal <= 3x)")


if __name__ == "__main__":
    main()
