"""The typed projector against its peers, side by side in one run (issue 18's table).

    python -m bench.compare [--events 1000000] [--rounds 3] [--rows ...]

Rows (all exactly-once, 4 partitions, the same input, each in its own consumer group):
``naive-copier`` and ``naive-typed`` (:mod:`bench.peers.naive`; ``naive-typed-1p``, its one
producer for all partitions, when ``--rows`` names it), ``quix`` and ``quix-0.1s``
(Quix Streams at its default 5 s and at a 0.1 s commit interval, :mod:`bench.peers.quix_app`),
``rdkafka-copier`` and ``rdkafka-typed`` when named (the naive loop on librdkafka, throughput
only: what the client costs, :mod:`bench.peers.rdkafka_peer`), and the project's
``copier``, ``typed`` and ``typed-w2`` (``run typed --workers 2``, on a second prefix with the
same stream: it is the typed group again). Per round:

1. **throughput**: a fresh prefix with the stream published before timing; every row
   consumes all of it in turn (:func:`bench.throughput.timed_consumption`). *events/s*
   counts from the first commit; *steady* is the rate between 10 % and 90 % of the input
   committed (a peer's start-up left out); *steady out/s* multiplies it by the row's output
   records per input event, counted offline on the same stream (the guard's end and gap
   records and dropped duplicates make it differ per row);
2. **latency** (:func:`bench.latency.measure_latency`): each latency row on a fresh
   prefix at 200 ev/s, 5,000 ev/s and at 50 % of this round's ``copier`` throughput
   for ``--latency-seconds``; send time to the output read back read_committed. These
   runs publish the same stream **in kernel order** (re-sent duplicates kept): the peers
   order nothing, and the ordering guard holds an event delivered early until the one
   before it comes; with 200 runs interleaved at 200 ev/s that wait is seconds (a hole
   of up to 5 events of a run), and it would be measured as the engine's latency.

It prints the tables with the goals' ratios per round and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import shutil
import statistics
import sys
import tempfile
import uuid
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from bench.consumers import Consumer
from bench.kafka_io import cleanup, create_topics, end_offsets, prefix_settings, publish
from bench.latency import measure_latency
from bench.machine import broker_version, machine
from bench.peers.environment import QUIX_VERSION
from bench.peers.process import PEERS, PeerConsumer
from bench.peers.projection import Projection
from bench.progress import say
from bench.throughput import Throughput, timed_consumption
from bench.workload import make_workload
from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.engine.records import Collector, InputRecord
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames

ROWS = ("copier", "naive-copier", "naive-typed", "quix", "quix-0.1s", "typed", "typed-w2")
#: Rows run only when ``--rows`` names them: ``naive-typed`` with one producer (KIP-447),
#: and the naive loop on librdkafka (:mod:`bench.peers.rdkafka_peer`, throughput only).
OPTIONAL_ROWS = ("naive-typed-1p", "rdkafka-copier", "rdkafka-typed")
#: Every row ``--rows`` knows, in the order they run.
ALL_ROWS = ROWS + OPTIONAL_ROWS
#: ``run typed --workers 2``: the typed group again, so on a second prefix of the same stream.
WORKERS_ROW = "typed-w2"
LATENCY_ROWS = ("copier", "naive-typed", "naive-typed-1p", "quix-0.1s", "quix", "typed",
                "typed-w2")
#: ``quix`` (5 s commits) only at the fixed rates: its latency is its commit interval.
FIXED_RATES = (200.0, 5000.0)
PARTITIONS = 4


def _projection_of(row: str) -> str:
    """What ``row`` writes per event: ``copy``, the peers' ``peer`` projection, ``typed``."""
    if row == "copier" or "--copy" in PEERS.get(row, ("", ()))[1]:
        return "copy"
    return "typed" if row in ("typed", WORKERS_ROW) else "peer"


def outputs_per_event(kind: str, records: list[tuple[bytes, bytes]]) -> float:
    """Output records per input event of a ``kind`` (:func:`_projection_of`) on this
    stream, counted offline."""
    if kind == "copy":
        return 1.0
    if kind == "peer":
        project = Projection()
        return sum(len(project(value)) for _, value in records) / len(records)
    settings = Settings(topic_prefix="count", partitions=PARTITIONS)
    factory = projector_topology("typed", settings).processor_factory
    processors = {p: factory(p) for p in range(PARTITIONS)}
    offsets: dict[int, int] = defaultdict(int)
    count = 0
    for key, value in records:
        partition = partition_for_key(key, PARTITIONS)
        out = Collector()
        processors[partition].process(
            InputRecord("in", partition, offsets[partition], key, value), 0.0, out)
        offsets[partition] += 1
        count += len(out.outputs)
    return count / len(records)


class _Workers(Consumer):
    """``run typed --workers 2`` (its group is the typed projector's)."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        super().__init__("typed", settings, log_dir)
        self.command = [*self.command, "--workers", "2"]


def _factory(row: str) -> Any:
    if row in PEERS:
        return lambda settings, log_dir: PeerConsumer(row, settings, log_dir)
    if row == WORKERS_ROW:
        return _Workers
    return lambda settings, log_dir: Consumer(row, settings, log_dir)


async def throughput_round(base: Settings, prefix: str, records: list[tuple[bytes, bytes]],
                           rows: list[str], log_dir: Path) -> dict[str, Throughput]:
    settings = prefix_settings(base, prefix, PARTITIONS)
    await create_topics(settings)
    publish_s = await publish(settings, records)
    ends = await end_offsets(settings, TopicNames(prefix).agent_events, PARTITIONS)
    total = sum(ends.values())
    say(f"  published {total:,} events in {publish_s:.1f}s ({prefix})")
    got: dict[str, Throughput] = {}
    for row in rows:
        if row == WORKERS_ROW:
            settings = prefix_settings(base, f"{prefix}-w2", PARTITIONS)
            await create_topics(settings)
            await publish(settings, records)
        result = await timed_consumption(settings, ("typed" if row == WORKERS_ROW else row,),
                                         total, log_dir, max(120.0, total / 500),
                                         factory=_factory(row))
        got[row] = result
        say(f"  {row:<13} {result.events_per_s:>9,.0f} ev/s  steady "
            f"{result.steady_events_per_s:>9,.0f} ev/s  cpu {result.cpu_s_per_million:5.1f} "
            f"s/M  cores {result.consumer_cores:.2f} (machine {result.machine_busy_cores:.2f})")
    return got


async def latency_round(base: Settings, run_id: str, round_no: int, rates: dict[str, float],
                        rows: list[str], workload: Any, seconds: float,
                        log_dir: Path, prefixes: list[str]) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = defaultdict(dict)
    for label, rate in rates.items():
        for row in rows:
            if row == "quix" and label == "half":
                continue
            prefix = f"{run_id}-lat{round_no}-{label}-{row.replace('.', '')}"
            prefixes.append(prefix)
            lat = await measure_latency(
                base, prefix, row, workload, rate, seconds, log_dir,
                factory=_factory(row) if row in PEERS or row == WORKERS_ROW else None,
                groups=("typed",) if row == WORKERS_ROW else None)
            got[label][row] = asdict(lat)
            broker = "?" if lat.broker_cores is None else f"{lat.broker_cores:.2f}"
            say(f"  {label:>5} {rate:>8,.0f}/s {row:<13} p50 {lat.p50_ms:7.1f}  p99 "
                f"{lat.p99_ms:7.1f}  max {lat.max_ms:7.1f} ms  ({lat.samples:,} samples, "
                f"cores: consumer {lat.consumer_cores:.2f}, broker {broker}, "
                f"machine {lat.machine_busy_cores:.2f}; the bench's longest collector pause "
                f"{lat.bench_gc_longest_ms:.0f} ms)")
    return got


def _verdicts(tp: dict[str, Throughput], out_per_ev: dict[str, float],
              lat: dict[str, dict[str, Any]]) -> dict[str, float]:
    """This round's goal ratios (issue 18); ``met`` when the ratio is on the right side."""
    def out_s(row: str) -> float:
        return tp[row].steady_events_per_s * out_per_ev[row]

    def out_per_cpu_s(row: str) -> float:
        return 1e6 / tp[row].steady_cpu_s_per_million * out_per_ev[row]

    ratios: dict[str, float] = {}
    if "typed" in tp and "quix" in tp:
        ratios["typed_out_s_x_quix (>= 1.0)"] = out_s("typed") / out_s("quix")
        ratios["typed_out_per_cpu_s_x_quix (>= 1.0)"] = (
            out_per_cpu_s("typed") / out_per_cpu_s("quix"))
    if "typed" in tp and "naive-typed" in tp:
        ratios["typed_out_s_x_naive_typed (>= 0.85)"] = out_s("typed") / out_s("naive-typed")
    fast, slow, half = lat.get("5000", {}), lat.get("200", {}), lat.get("half", {})
    if "typed" in fast and "quix-0.1s" in fast:
        ratios["p99_5000_typed_x_quix_0.1s (<= 1.0)"] = (
            fast["typed"]["p99_ms"] / fast["quix-0.1s"]["p99_ms"])
    if "typed" in slow:
        ratios["p99_200_typed_ms (<= 60)"] = slow["typed"]["p99_ms"]
    for row in ("typed", WORKERS_ROW):
        if row in half and "copier" in half:
            ratios[f"p99_half_{row.replace('-', '_')}_x_copier (<= 1.3)"] = (
                half[row]["p99_ms"] / half["copier"]["p99_ms"])
    return {k: round(v, 3) for k, v in ratios.items()}


def _cell(per: list[dict[str, Any]], key: str, scale: float = 1.0, fmt: str = ",.0f") -> str:
    """The median of the rounds, with their range."""
    values = sorted(r[key] * scale for r in per)
    med = statistics.median(values)
    span = f" ({values[0]:{fmt}}-{values[-1]:{fmt}})" if len(values) > 1 else ""
    return f"{med:{fmt}}{span}"


def _cores(lat: dict[str, Any]) -> str:
    """Cores busy during one latency run: the consumer's, the broker's, the machine's."""
    broker = lat.get("broker_cores")
    shown = "?" if broker is None else f"{broker:.2f}"
    return f"{lat['consumer_cores']:.2f}, {shown}, {lat['machine_busy_cores']:.2f}"


def render(result: dict[str, Any]) -> str:
    """The throughput table (medians, with each round's range) and the goals per round."""
    rounds = result["rounds"]
    lines = ["| row | events/s | steady events/s | steady out/s | CPU s/M ev | cores |",
             "|---|---|---|---|---|---|"]
    for row, per in result["throughput"].items():
        ratio = result["outputs_per_event"][row]
        lines.append(f"| {row} | {_cell(per, 'events_per_s')} | "
                     f"{_cell(per, 'steady_events_per_s')} | "
                     f"{_cell(per, 'steady_events_per_s', ratio)} | "
                     f"{_cell(per, 'steady_cpu_s_per_million', fmt='.1f')} | "
                     f"{_cell(per, 'consumer_cores', fmt='.2f')} |")
    lines += ["", "| rate | row | p50 ms per round | p99 ms per round "
              "| cores per round: consumer, broker, machine |", "|---|---|---|---|---|"]
    by_rate: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for one in result["latency"]:
        for label, rows in one.items():
            for row, lat in rows.items():
                by_rate[(label, row)].append(lat)
    for (label, row), lats in by_rate.items():
        offered = [f"{x['offered_per_s']:,.0f}" for x in lats]  # "half" differs per round
        rate = (offered[0] if len(set(offered)) == 1 else " / ".join(offered)) + "/s"
        p50s = " / ".join(f"{x['p50_ms']:.0f}" for x in lats)
        p99s = " / ".join(f"{x['p99_ms']:.0f}" for x in lats)
        cores = " / ".join(_cores(x) for x in lats)  # (a run of an older bench: no broker)
        lines.append(f"| {label} {rate} | {row} | {p50s} | {p99s} | {cores} |")
    lines += ["", f"goals per round ({rounds} rounds):"]
    for i, verdicts in enumerate(result["verdicts"]):
        lines.append(f"  round {i + 1}: " + ", ".join(f"{k} = {v}" for k, v in verdicts.items()))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = load_settings()
    rows = [r for r in ALL_ROWS if r in args.rows.split(",")]
    run_id = f"cmp-{uuid.uuid4().hex[:6]}"
    log_dir = Path(tempfile.mkdtemp(prefix="symfonic-compare-"))
    say(f"compare {run_id}: generating {args.events:,} events")
    workload = make_workload(args.events, seed=args.seed)
    records = workload.encoded()
    in_order = (make_workload(args.events, seed=args.seed, reorder=False)
                if args.latency_seconds > 0 else workload)
    counted: dict[str, float] = {}  # per projection: the peers share one, typed-w2 is typed
    for row in rows:
        kind = _projection_of(row)
        if kind not in counted:
            counted[kind] = outputs_per_event(kind, records)
    out_per_ev = {row: counted[_projection_of(row)] for row in rows}
    say("  outputs per event: " + ", ".join(f"{r} {v:.3f}" for r, v in out_per_ev.items()))
    result: dict[str, Any] = {
        "command": "python -m bench.compare " + " ".join(sys.argv[1:]),
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(), "broker": broker_version(), "quixstreams": QUIX_VERSION,
        "events": len(records), "rounds": args.rounds, "outputs_per_event": out_per_ev,
        "throughput": defaultdict(list), "latency": [], "verdicts": [],
    }
    prefixes: list[str] = []
    try:
        for round_no in range(args.rounds):
            say(f"round {round_no + 1}/{args.rounds}: throughput")
            prefix = f"{run_id}-r{round_no}"
            prefixes += [prefix, f"{prefix}-w2"]
            tp = await throughput_round(base, prefix, records, rows, log_dir)
            for row, value in tp.items():
                result["throughput"][row].append(asdict(value))
            rates = {f"{r:.0f}": r for r in FIXED_RATES}
            if "copier" in tp:
                rates["half"] = tp["copier"].events_per_s / 2
            lat: dict[str, dict[str, Any]] = {}
            if args.latency_seconds > 0:
                say(f"round {round_no + 1}/{args.rounds}: latency")
                lat = await latency_round(base, run_id, round_no, rates,
                                          [r for r in LATENCY_ROWS if r in rows], in_order,
                                          args.latency_seconds, log_dir, prefixes)
                result["latency"].append(lat)
            result["verdicts"].append(_verdicts(tp, out_per_ev, lat))
            say(f"  goals: {result['verdicts'][-1]}")
    finally:
        say(f"deleted {await cleanup(base, prefixes)} benchmark topics")
        shutil.rmtree(log_dir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"of {', '.join(ALL_ROWS)}")
    parser.add_argument("--latency-seconds", type=float, default=15.0, help="0: no latency")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("bench/results/compare.json"))
    args = parser.parse_args(argv)
    unknown = set(args.rows.split(",")) - set(ALL_ROWS)
    if unknown:
        parser.error(f"--rows: unknown {', '.join(sorted(unknown))} (rows: "
                     f"{', '.join(ALL_ROWS)})")
    result = asyncio.run(run(args))
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(render(result))
    say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
