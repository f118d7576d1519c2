"""What the typed projector would do if its pure hot path cost nothing.

    python -m bench.zero_cost [--events 200000] [--partitions 4] [--rounds 3]

The typed projector does two things the copier does not: the pure work (decode, ordering
guard, projection, envelope encoding, state encoding) and *more Kafka writes* (1.24 output
records per input event instead of 1, plus changelog records). This experiment separates
the two. On one fresh prefix it publishes the benchmark's stream, then consumes it, each
in its own consumer group and one at a time, with:

* ``copier``: the baseline;
* ``typed``: the real typed projector;
* ``typed-replay``: the engine running a processor that emits, for every input record, the
  exact output records (topic, key, value, record type, timestamp) and, per batch, one state
  record per run touched — all computed *before* the consumer starts by running the real
  ``ProjectorProcessor`` offline over each partition. Its cost is the engine's cost for the
  typed projector's output volume: the ceiling any optimisation of the pure path can reach;
* ``typed-json-floor``: the same, plus the least work any JSON-to-JSON projection must do:
  parse each input value (``orjson.loads``) and serialize each output record's value from
  an object (``orjson.dumps`` of the output parsed beforehand), no validation, no guard,
  no projection. The ceiling of a typed projector whose own code cost nothing beyond
  reading and writing JSON;
* ``typed-decode-floor``: the JSON floor with the contract's validation: the projector's own
  ``decode_record`` (``orjson.loads`` and pydantic-core validation into an ``AgentEvent``,
  key check) instead of ``orjson.loads``. Still no guard, no projection, no envelope: the
  ceiling of a typed projector whose guard and projection cost nothing.

Each runs in its own process (``python -m bench.zero_cost --serve`` for the replay, through
:func:`symfonic_stream.runtime.service.serve`), timed like the main benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pickle
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

import orjson

from bench.consumers import Consumer
from bench.kafka_io import create_topics, delete_prefix_topics, end_offsets, publish
from bench.throughput import Throughput, timed_consumption
from bench.workload import make_workload
from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.engine.records import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.decoding import DecodeLimits, decode_record
from symfonic_stream.models.names import TopicNames
from symfonic_stream.state.store import Codec, StateStore

REPLAY = "typed-replay"
JSON_FLOOR = "typed-json-floor"
DECODE_FLOOR = "typed-decode-floor"
FLOORS = (JSON_FLOOR, DECODE_FLOOR)
#: What the state store writes per touched run at a commit: an ``encode_run`` value of typical size.
_STATE_VALUE = b"[123,154,0,0.0]"

#: (partition, offset) -> the typed projector's outputs for that input record.
Plan = dict[tuple[int, int], tuple[OutputRecord, ...]]


def plan_outputs(records: list[tuple[bytes, bytes]], partitions: int, topic: str) -> Plan:
    """Run the real typed projector over each partition's records, in offset order."""
    settings = Settings(topic_prefix="plan", partitions=partitions)
    output = TopicNames(topic.removesuffix(".agent-events")).stream_events
    factory = projector_topology("typed", settings).processor_factory
    processors = {p: factory(p) for p in range(partitions)}
    offsets: dict[int, int] = defaultdict(int)
    plan: Plan = {}
    now = time.time()
    for key, value in records:
        partition = partition_for_key(key, partitions)
        offset = offsets[partition]
        offsets[partition] += 1
        out = Collector()
        processors[partition].process(InputRecord(topic, partition, offset, key, value), now, out)
        plan[(partition, offset)] = tuple(o._replace(topic=output) for o in out.outputs)
    return plan


#: (partition, offset) -> each planned output's value, parsed (what a floor serializes).
Bodies = dict[tuple[int, int], tuple[object, ...]]


def parse_outputs(plan: Plan) -> Bodies:
    return {where: tuple(orjson.loads(o.value or b"null") for o in outs)
            for where, outs in plan.items()}


class ReplayProcessor:
    """Emits the planned outputs of each record; one state record per run per batch.

    ``floor``: also parse (``json``) or decode and validate (``decode``) each input, and
    serialize each output's value from ``bodies``.
    """

    def __init__(self, plan: Plan, bodies: Bodies | None = None, floor: str = "") -> None:
        self._plan = plan
        self._bodies = bodies or {}
        self._floor = floor
        # One state record per run per batch, as the guard writes: a store of fixed values.
        self.touched: StateStore[bytes] = StateStore("run", Codec(lambda v: v, lambda v: v))

    @property
    def stores(self) -> tuple[StateStore[bytes]]:
        return (self.touched,)

    def restored(self) -> None:
        """Nothing derived to rebuild."""

    def end_of_input(self, out: Collector) -> None:
        """Nothing held back."""

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        where = (record.partition, record.offset)
        if self._floor == "json":
            orjson.loads(record.value or b"null")
        elif self._floor == "decode":
            decode_record(record.value, record.key, True, DecodeLimits())
        if self._floor:
            for body in self._bodies.get(where, ()):
                orjson.dumps(body)
        for output in self._plan.get(where, ()):
            out.emit(output)
        if record.key is not None:
            self.touched.put(record.key.decode(), _STATE_VALUE)

    def punctuate(self, now: float, out: Collector) -> None:
        """No timers."""

    @property
    def buffered_events(self) -> int:
        return 0

    @property
    def active_runs(self) -> int:
        return 0


def replay_topology(settings: Settings, plan: Plan, name: str = REPLAY) -> Topology:
    names = TopicNames(settings.topic_prefix)
    floor = {JSON_FLOOR: "json", DECODE_FLOOR: "decode"}.get(name, "")
    bodies = parse_outputs(plan) if floor else None
    return Topology(
        consumer=name,
        group_id=names.group(name),
        source_topic=names.agent_events,
        output_topics=(names.stream_events,),
        dead_letter_topic=names.dead_letter,
        # Co-partitioned and compacted like the typed changelog: the pauses changelog of
        # this prefix is never used by anything else here.
        changelog_topic=names.changelog("pauses"),
        processor_factory=lambda partition: ReplayProcessor(plan, bodies, floor),
    )


def serve_replay(plan_file: str, name: str) -> int:
    from symfonic_stream.observability.logs import configure_logging
    from symfonic_stream.runtime.service import serve

    settings = load_settings()
    configure_logging(name, settings.log_level)
    with open(plan_file, "rb") as handle:
        plan: Plan = pickle.load(handle)
    return asyncio.run(serve((replay_topology(settings, plan, name),), settings))


class _ReplayConsumer(Consumer):
    def __init__(self, settings: Settings, log_dir: Path, plan_file: Path, name: str) -> None:
        super().__init__(name, settings, log_dir)
        self.command = [sys.executable, "-m", "bench.zero_cost", "--serve", str(plan_file),
                        name]


async def run(args: argparse.Namespace) -> dict[str, list[Throughput]]:
    base = load_settings()
    workload = make_workload(args.events)
    records = workload.encoded()
    log_dir = Path(tempfile.mkdtemp(prefix="symfonic-zero-"))
    prefixes: list[str] = []
    results: dict[str, list[Throughput]] = defaultdict(list)
    try:
        for round_no in range(args.rounds):
            prefix = f"bench-zero-{uuid.uuid4().hex[:8]}"
            prefixes.append(prefix)
            settings = base.model_copy(update={"topic_prefix": prefix,
                                               "partitions": args.partitions})
            names = TopicNames(prefix)
            await create_topics(settings)
            await publish(settings, records)
            ends = await end_offsets(settings, names.agent_events, args.partitions)
            plan = plan_outputs(records, args.partitions, names.agent_events)
            planned = sum(ends.values())
            if planned != len(records):
                raise RuntimeError(f"the topic holds {planned} events, {len(records)} sent")
            plan_file = log_dir / f"{prefix}.plan"
            plan_file.write_bytes(pickle.dumps(plan))
            for name in ("copier", "typed", REPLAY, *FLOORS):
                factory = (
                    (lambda s, d, f=plan_file, n=name: _ReplayConsumer(s, d, f, n))
                    if name in (REPLAY, *FLOORS) else None
                )
                result = await timed_consumption(
                    settings, (name,), len(records), log_dir, 600.0, factory=factory
                )
                results[name].append(result)
                print(f"round {round_no + 1}: {name:<18} {result.events_per_s:>9,.0f} ev/s  "
                      f"cpu {result.cpu_s_per_million:6.1f} s/M", file=sys.stderr, flush=True)
    finally:
        await delete_prefix_topics(base, prefixes)
        shutil.rmtree(log_dir, ignore_errors=True)
    return results


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        sys.exit(serve_replay(sys.argv[2], sys.argv[3]))
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    results = asyncio.run(run(args))
    base_rate = statistics.median(t.events_per_s for t in results["copier"])
    base_cpu = statistics.median(t.cpu_s_per_million for t in results["copier"])
    print(f"{'consumer':<18} {'ev/s':>9} {'x copier':>9} {'CPU s/M':>8} {'x copier':>9}")
    for name, runs in results.items():
        rate = statistics.median(t.events_per_s for t in runs)
        cpu = statistics.median(t.cpu_s_per_million for t in runs)
        print(f"{name:<18} {rate:>9,.0f} {rate / base_rate:>9.2f} {cpu:>8.1f} "
              f"{cpu / base_cpu if base_cpu else 0.0:>9.2f}")


if __name__ == "__main__":
    main()
