"""What the engine costs around the pure path (docs/benchmarks.md, "Why the throughput goal
cannot be met", "Where the time goes"): the typed projector if its pure path cost nothing
(``python -m bench zero_cost``), back-to-back transactions against aiokafka's retry delays
(``python -m bench txn_probe``), one consumer profiled (``python -m bench profile``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import pickle
import signal
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.producer import sender as aiokafka_sender

from bench.harness import at_share, call_command, options, say, table
from bench.kafka_io import OffsetWatcher, Session
from bench.measure import Throughput, throughput_round
from bench.processes import BASELINE, Process, Row, bench_consumers
from bench.workload import make_workload
from symfonic_stream.app.topologies import copier_topology, topologies
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transaction import transact
from symfonic_stream.kafka import producer as producer_module
from symfonic_stream.kafka.clients import TRANSACTIONAL_RETRY_BACKOFF_MS
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.models.decoding import DecodeLimits, decode_record
from symfonic_stream.models.names import TopicNames
from symfonic_stream.state.store import Codec, StateStore

#: The replaying rows, and what each does per record besides emitting the planned outputs.
FLOORS = {"typed-replay": "", "typed-json-floor": "json", "typed-decode-floor": "decode"}
#: What the state store writes per touched run at a commit: a ``RUN_CODEC`` value of
#: typical size.
_STATE_VALUE = b"[123,154,0,0.0]"

#: (partition, offset) -> the typed projector's outputs for that input record.
Plan = dict[tuple[int, int], tuple[OutputRecord, ...]]


def plan_outputs(records: list[tuple[bytes, bytes]], settings: Settings,
                 consumer: str = "typed") -> Plan:
    """Run ``consumer``'s real processor over each partition's records, in offset order."""
    names = TopicNames(settings.topic_prefix)
    factory = topologies(consumer, settings)[0].processor_factory
    processors = {p: factory(p) for p in range(settings.partitions)}
    offsets: dict[int, int] = defaultdict(int)
    plan: Plan = {}
    now = time.time()
    for key, value in records:
        partition = partition_for_key(key, settings.partitions)
        offset = offsets[partition]
        offsets[partition] += 1
        out = Collector()
        processors[partition].process(
            InputRecord(names.agent_events, partition, offset, key, value), now, out)
        plan[(partition, offset)] = tuple(out.outputs)
    return plan


class ReplayProcessor:
    """Emits the planned outputs of each record; one state record per run per batch.

    ``floor``: also parse (``json``) or decode and validate (``decode``) each input, and
    serialize each output's value from ``bodies`` (the planned values, parsed).
    """

    def __init__(self, plan: Plan, bodies: dict[tuple[int, int], tuple[object, ...]],
                 floor: str = "") -> None:
        self._plan = plan
        self._bodies = bodies
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


def serve_replay(plan_file: str, name: str) -> int:
    """(The replaying row's process.) The engine serving a :class:`ReplayProcessor`."""
    from symfonic_stream.observability.logs import configure_logging
    from symfonic_stream.runtime.service import serve

    settings = load_settings()
    configure_logging(name, settings.log_level)
    plan: Plan = pickle.loads(Path(plan_file).read_bytes())
    floor = FLOORS[name]
    bodies = ({where: tuple(orjson.loads(o.value or b"null") for o in outs)
               for where, outs in plan.items()} if floor else {})
    names = TopicNames(settings.topic_prefix)
    return asyncio.run(serve((Topology(
        consumer=name,
        group_id=names.group(name),
        source_topic=names.agent_events,
        output_topics=(names.stream_events,),
        dead_letter_topic=names.dead_letter,
        # Co-partitioned and compacted like the typed changelog: the pauses changelog of
        # this prefix is never used by anything else here.
        changelog_topic=names.changelog("pauses"),
        processor_factory=lambda partition: ReplayProcessor(plan, bodies, floor),
    ),), settings))


def _replay(name: str, records: list[tuple[bytes, bytes]]) -> Row:
    def start(settings: Settings, log_dir: Path) -> list[Process]:
        plan_file = log_dir / f"{settings.topic_prefix}.plan"
        if not plan_file.exists():  # one plan per prefix, for every replaying row
            plan_file.write_bytes(pickle.dumps(plan_outputs(records, settings)))
        return [Process(name, settings, log_dir,
                        call_command(serve_replay, str(plan_file), name))]

    return Row(name, (name,), start=start)


async def zero_cost_rounds(args: argparse.Namespace) -> dict[str, list[Throughput]]:
    records = make_workload(args.events).encoded()
    rows = [Row(BASELINE, (BASELINE,)), Row("typed", ("typed",)),
            *(_replay(name, records) for name in FLOORS)]
    results: dict[str, list[Throughput]] = defaultdict(list)
    async with Session("bench-zero") as session:
        for round_no in range(args.rounds):
            got = await throughput_round(session, rows, records, args.partitions, f"r{round_no}")
            for name, result in got.items():
                results[name].append(result)
    return results


def zero_cost(argv: list[str] | None = None) -> int:
    """The typed projector does two things the copier does not: the pure work (decode,
    guard, projection, encoding) and more Kafka writes (1.24 outputs per event, and its
    changelog). One stream consumed by ``copier``, ``typed``, ``typed-replay`` (the engine
    emitting the typed projector's exact outputs and one state record per run and batch,
    computed beforehand: the pure path free), ``typed-json-floor`` (that, plus ``orjson``
    loads of each input and dumps of each output), ``typed-decode-floor`` (the JSON floor
    with the projector's own ``decode_record``: validation, no guard, no projection)."""
    args = options("bench zero_cost", argv, zero_cost.__doc__, events=200_000, partitions=4,
                   rounds=3)
    logging.basicConfig(level=logging.ERROR)
    results = asyncio.run(zero_cost_rounds(args))
    base_rate = statistics.median(t.events_per_s for t in results[BASELINE])
    base_cpu = statistics.median(t.cpu_s_per_million for t in results[BASELINE])
    lines = [["consumer", "ev/s", "x copier", "CPU s/M", "x copier"]]
    for name, runs in results.items():
        rate = statistics.median(t.events_per_s for t in runs)
        cpu = statistics.median(t.cpu_s_per_million for t in runs)
        lines.append([name, f"{rate:,.0f}", f"{rate / base_rate:.2f}", f"{cpu:.1f}",
                      f"{cpu / base_cpu if base_cpu else 0.0:.2f}"])
    print(table(lines))
    return 0


VALUE = b"x" * 343
#: (AddPartitionsToTxn retry delay, other retries' delay) in seconds, per configuration.
DELAYS = {
    "aiokafka": (0.02, 0.1),
    "engine": (producer_module.ADD_PARTITIONS_RETRY_S, TRANSACTIONAL_RETRY_BACKOFF_MS / 1000),
}


class _RefusalCounter:
    """Counts the answers of one request type that make aiokafka retry."""

    def __init__(self, handler_name: str) -> None:
        self.count = 0
        self._handler: Any = getattr(aiokafka_sender, handler_name)
        self._original: Callable[..., Any] = self._handler.handle_response
        counter = self

        def handle_response(self: Any, response: Any) -> Any:
            backoff = counter._original(self, response)
            if backoff is not None:
                counter.count += 1
            return backoff

        self._handler.handle_response = handle_response

    def close(self) -> None:
        self._handler.handle_response = self._original


async def _transactions(settings: Settings, delays: tuple[float, float], count: int,
                        records: int) -> tuple[list[float], int, int]:
    topology = copier_topology(settings)
    producer = ProcessProducer(settings, topology.transactional_id(0))  # the engine's delays
    aiokafka_sender.BACKOFF_OVERRIDE = delays[0]
    producer._producer._sender._retry_backoff = delays[1]  # what retry_backoff_ms sets
    add_partitions = _RefusalCounter("AddPartitionsToTxnHandler")
    offset_commits = _RefusalCounter("TxnOffsetCommitHandler")
    source = TopicPartition(topology.source_topic, 0)
    output = topology.output_topics[0]
    await producer.start()
    seconds: list[float] = []
    try:
        for n in range(count):
            out = Collector()
            for _ in range(records):
                out.emit(OutputRecord(output, b"run-1", VALUE, "copy"))
            began = time.perf_counter()
            await transact(producer, topology, [(0, out)], {source: n + 1})
            seconds.append(time.perf_counter() - began)
    finally:
        add_partitions.close()
        offset_commits.close()
        await producer.close()
    return seconds, add_partitions.count, offset_commits.count


async def txn_rounds(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    found: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in DELAYS}
    async with Session("bench-txn") as session:
        try:
            for round_no in range(args.rounds):
                for name, delays in DELAYS.items():
                    settings = await session.topics(f"r{round_no}-{name}", 1)
                    seconds, add_refused, commit_refused = await _transactions(
                        settings, delays, args.transactions, args.records)
                    seconds = seconds[args.transactions // 10:]  # first: connections warm up
                    ordered = sorted(seconds)
                    figures = {
                        "median_ms": statistics.median(seconds) * 1000,
                        "mean_ms": statistics.fmean(seconds) * 1000,
                        "p90_ms": at_share(ordered, 0.9) * 1000,
                        "p99_ms": at_share(ordered, 0.99) * 1000,
                        "add_partitions_refusals": add_refused / args.transactions,
                        "offset_commit_refusals": commit_refused / args.transactions,
                    }
                    for key, value in figures.items():
                        found[name][key].append(value)
                    say(f"round {round_no + 1}: {name:<15} " + "  ".join(
                        f"{key} {value:.2f}" for key, value in figures.items()))
        finally:
            aiokafka_sender.BACKOFF_OVERRIDE = producer_module.ADD_PARTITIONS_RETRY_S
    return found


def txn_probe(argv: list[str] | None = None) -> int:
    """Right after a commit the broker refuses the next transaction's AddPartitionsToTxn
    (CONCURRENT_TRANSACTIONS until the markers are written, KAFKA-5477) and TxnOffsetCommit
    (COORDINATOR_NOT_AVAILABLE until the offsets marker is applied) for a few ms; aiokafka
    retries them after 20 and 100 ms, the engine after 2 and 20. The same transactions
    (``--records`` of 343 bytes and an input offset) with each, alternating per round."""
    args = options("bench txn_probe", argv, txn_probe.__doc__, transactions=400, records=250,
                   rounds=3)
    found = asyncio.run(txn_rounds(args))
    baseline = statistics.median(found["aiokafka"]["mean_ms"])
    print(f"medians of {args.rounds} round(s), {args.transactions} transactions of "
          f"{args.records} records each; retry delays in ms, refusals per transaction")
    lines = [["delays", "add retry", "retry", "median ms", "mean ms", "p90 ms", "p99 ms",
              "add refused", "commit refused", "mean x aiokafka"]]
    for name, values in found.items():
        med = {key: statistics.median(series) for key, series in values.items()}
        add_s, other_s = DELAYS[name]
        lines.append([name, f"{add_s * 1000:g}", f"{other_s * 1000:g}",
                      f"{med['median_ms']:.2f}", f"{med['mean_ms']:.2f}", f"{med['p90_ms']:.2f}",
                      f"{med['p99_ms']:.2f}", f"{med['add_partitions_refusals']:.2f}",
                      f"{med['offset_commit_refusals']:.3f}",
                      f"{med['mean_ms'] / baseline:.2f}"])
    print(table(lines))
    return 0


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
