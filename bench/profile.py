"""Profile one consumer while it consumes a published stream (py-spy, sampling).

    python -m bench.profile [--consumer typed] [--events 200000] [--partitions 4]
                            [--out bench/results/profile-typed.txt]

A fresh topic prefix gets the benchmark's stream published first; then the consumer is
started as in the benchmark and ``py-spy record`` samples it (100 Hz, idle frames left
out) from its first committed offset until it has committed everything. The collapsed
stacks are summarised per function (own samples, and samples with the function anywhere
on the stack) and grouped into the layers of the stack: the pure hot path (decoding,
guard, projections), the engine, aiokafka's producer, aiokafka's consumer, and the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.consumers import Consumer
from bench.kafka_io import OffsetWatcher, create_topics, delete_prefix_topics, publish
from bench.workload import make_workload
from symfonic_stream.config import load_settings
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


def start_py_spy(py_spy: str, pid: int, output: Path) -> subprocess.Popen[bytes]:
    """``py-spy record`` of ``pid`` until SIGINT: 100 Hz, raw collapsed stacks, by function."""
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
         "--function", "--output", str(output), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def run(args: argparse.Namespace) -> str:
    base = load_settings()
    prefix = f"bench-prof-{uuid.uuid4().hex[:8]}"
    settings = base.model_copy(update={"topic_prefix": prefix, "partitions": args.partitions})
    names = TopicNames(prefix)
    log_dir = Path(tempfile.mkdtemp(prefix="symfonic-prof-"))
    records = make_workload(args.events).encoded()
    try:
        await create_topics(settings)
        await publish(settings, records)
        consumer = Consumer(args.consumer, settings, log_dir).start()
        raw = log_dir / "stacks.txt"
        spy: subprocess.Popen[bytes] | None = None
        try:
            async with OffsetWatcher(settings, names.agent_events) as watcher:
                group = names.group(args.consumer)
                while await watcher.committed(group) == 0:
                    if not consumer.alive():
                        raise RuntimeError(consumer.log_tail())
                    await asyncio.sleep(0.02)
                spy = start_py_spy(args.py_spy, consumer.pid, raw)
                started = time.monotonic()
                while await watcher.committed(group) < len(records):
                    if not consumer.alive():
                        raise RuntimeError(consumer.log_tail())
                    await asyncio.sleep(0.05)
                seconds = time.monotonic() - started
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            consumer.stop()
        text = raw.read_text() if raw.exists() else ""
        head = (f"{args.consumer} on {args.partitions} partition(s), {len(records):,} events, "
                f"{seconds:.1f} s profiled ({len(records) / seconds:,.0f} events/s under py-spy)\n")
        return head + summarise(text)
    finally:
        await delete_prefix_topics(base, [prefix])
        shutil.rmtree(log_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--consumer", default="typed",
                        choices=["copier", "typed", "chunks", "pauses"])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    report = asyncio.run(run(args))
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)


if __name__ == "__main__":
    main()
