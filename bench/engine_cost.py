"""Where a consumer's CPU goes (bench/results/HISTORY.md, "Where the time goes"): the
consumer profiled by py-spy and its samples summed per layer and function (``python -m
bench profile``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import signal
import sys
import time
from pathlib import Path

from bench.harness import options
from bench.kafka_io import OffsetWatcher, Session
from bench.processes import Process, bench_consumers
from bench.workload import make_workload
from symfonic_stream.models.names import TopicNames

#: (layer, substrings of a frame's ``function (file:line)`` that put it there), in order.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pure: decode (orjson + pydantic)", ("decoding.py", "pydantic", "agent_event.py")),
    ("pure: guard + projection + encode", ("ordering/", "projections/", "projector.py",
                                           "passthrough.py", "pauses/")),
    ("engine", ("symfonic_stream/engine/",)),
    ("aiokafka producer", ("aiokafka/producer/",)),
    ("aiokafka consumer", ("aiokafka/consumer/",)),
    ("aiokafka other (protocol, conn, records)", ("aiokafka/",)),
    ("asyncio event loop", ("asyncio/",)),
)


def layer_of(stack: list[str]) -> str:
    """The layer of the innermost project or library frame that claims the sample."""
    for frame in reversed(stack):
        for layer, needles in LAYERS:
            if any(needle in frame for needle in needles):
                return layer
    return "other"


def summarise(collapsed: str, top: int = 30) -> str:
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    layers: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.splitlines():
        if not line.strip():
            continue
        stack_text, _, count_text = line.rpartition(" ")
        count = int(count_text)
        stack = stack_text.split(";")
        samples += count
        own[stack[-1]] += count
        for frame in set(stack):
            total[frame] += count
        layers[layer_of(stack)] += count
    if not samples:
        return "no samples\n"
    out = [f"{samples} samples", "", "layer (own samples)"]
    out += [f"  {n / samples:6.1%}  {name}" for name, n in layers.most_common()]
    out += ["", f"top {top} functions by own samples"]
    out += [f"  {n / samples:6.1%}  {name}" for name, n in own.most_common(top)]
    out += ["", f"top {top} functions by inclusive samples"]
    out += [f"  {n / samples:6.1%}  {name}" for name, n in total.most_common(top)]
    return "\n".join(out) + "\n"


async def profiled(args: argparse.Namespace) -> str:
    records = make_workload(args.events).encoded()
    async with Session("bench-prof") as session:
        settings, _ = await session.published("p", records, args.partitions)
        names = TopicNames(settings.topic_prefix)
        consumer = Process(args.consumer, settings, session.log_dir).start()
        raw = session.log_dir / "stacks.txt"
        spy: asyncio.subprocess.Process | None = None
        try:
            async with OffsetWatcher(settings, names.agent_events) as watcher:
                group = names.group(args.consumer)
                await watcher.wait(group, 1, 3600, every=0.02, alive=consumer.check_alive)
                # 100 Hz, raw collapsed stacks, by function, until SIGINT.
                spy = await asyncio.create_subprocess_exec(
                    args.py_spy, "record", "--pid", str(consumer.pid), "--rate", "100",
                    "--format", "raw", "--function", "--output", str(raw), "--nonblocking",
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
                began = time.monotonic()
                await watcher.wait(group, len(records), 3600, alive=consumer.check_alive)
                seconds = time.monotonic() - began
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                await asyncio.wait_for(spy.wait(), 30)
            consumer.stop()
        text = raw.read_text() if raw.exists() else ""
    return (f"{args.consumer} on {args.partitions} partition(s), {len(records):,} events, "
            f"{seconds:.1f} s profiled ({len(records) / seconds:,.0f} events/s under py-spy)\n"
            + summarise(text))


def profile(argv: list[str] | None = None) -> int:
    """The stream published, then the consumer started as in the benchmark and ``py-spy
    record`` sampling it (100 Hz, idle frames left out) from its first commit to its last;
    the stacks summarised per function and per layer of the stack."""
    args = options("bench profile", argv, profile.__doc__,
                   consumer=("typed", f"one of {', '.join(bench_consumers())}"),
                   events=200_000, partitions=4, out=Path,
                   py_spy=str(Path(sys.executable).parent / "py-spy"))
    if args.consumer not in bench_consumers():
        raise SystemExit(f"--consumer: one of {', '.join(bench_consumers())}")
    logging.basicConfig(level=logging.ERROR)
    report = asyncio.run(profiled(args))
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0
