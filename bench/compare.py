"""The typed projector against its peers, side by side in one run (issue 18's table; the
rows and the method: docs/benchmarks.md, "Against its peers").

    python -m bench compare [--events 1000000] [--rounds 3] [--rows ...]

All exactly-once, 4 partitions, the same input, each in its own consumer group: the
project's ``copier``, ``typed`` and ``typed-w2`` (``run typed --workers 2``), and the peers
(:data:`PEERS`, ``bench/peers/``). Per round: throughput (:func:`bench.measure.throughput_round`;
*steady out/s* is the steady rate times the row's outputs per event, counted offline on the
same stream), then latency at 200 ev/s, 5,000 ev/s and half this round's copier throughput,
on the same stream **in kernel order**: the peers order nothing, and an event the ordering
guard holds for seconds until the one before it comes would count as the engine's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import broker_version, options, say, started, write_json
from bench.kafka_io import Session
from bench.measure import Throughput, measure_latency, throughput_round
from bench.peers.projection import Projection, copy_value
from bench.processes import BASELINE, QUIX_VERSION, PeerProcess, Process, Row
from bench.workload import make_workload
from symfonic_stream.app.topologies import topologies
from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames

#: Peer rows: name → (program, its extra arguments). The name is the group's suffix.
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "naive-copier": ("naive", ("--copy",)),
    "naive-typed": ("naive", ()),
    "naive-typed-1p": ("naive", ("--one-producer",)),
    "quix": ("quix", ("--commit-interval", "5")),
    "quix-0.1s": ("quix", ("--commit-interval", "0.1")),
    "rdkafka-copier": ("rdkafka", ("--copy",)),
    "rdkafka-typed": ("rdkafka", ()),
}
#: ``run typed --workers 2``: the typed group again, so on a second prefix of the same stream.
WORKERS_ROW = "typed-w2"
ROWS = (BASELINE, "naive-copier", "naive-typed", "quix", "quix-0.1s", "typed", WORKERS_ROW)
#: Rows run only when ``--rows`` names them: ``naive-typed`` with one producer (KIP-447),
#: and the naive loop on librdkafka (``bench/peers/peer_env.py``, throughput only).
OPTIONAL_ROWS = ("naive-typed-1p", "rdkafka-copier", "rdkafka-typed")
ALL_ROWS = ROWS + OPTIONAL_ROWS
LATENCY_ROWS = (BASELINE, "naive-typed", "naive-typed-1p", "quix-0.1s", "quix", "typed",
                WORKERS_ROW)
#: ``quix`` (5 s commits) only at the fixed rates: its latency is its commit interval.
FIXED_RATES = (200.0, 5000.0)
PARTITIONS = 4


def row(name: str) -> Row:
    if name in PEERS:
        program, extra = PEERS[name]
        return Row(name, (name,), start=lambda settings, log_dir: [
            PeerProcess(name, settings, log_dir, program, extra)],
            outputs=lambda settings: [TopicNames(settings.topic_prefix).stream_events])
    if name == WORKERS_ROW:
        return Row(name, ("typed",), own_input=True, start=lambda settings, log_dir: [
            Process("typed", settings, log_dir, [sys.executable, "-m", "symfonic_stream",
                                                 "run", "typed", "--workers", "2"])])
    return Row(name, (name,))


def outputs_per_event(chosen: Row, records: list[tuple[bytes, bytes]]) -> float:
    """Output records per input event of ``chosen`` on this stream, counted offline: a
    peer's projection, or the processors of the consumer it runs."""
    if chosen.name in PEERS:
        project = copy_value if "--copy" in PEERS[chosen.name][1] else Projection()
        return sum(len(project(value)) for _, value in records) / len(records)
    settings = Settings(topic_prefix="count", partitions=PARTITIONS)
    factory = topologies(chosen.groups[0], settings)[0].processor_factory
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


async def latency_round(session: Session, round_no: int, rates: dict[str, float],
                        rows: list[str], workload: Any, seconds: float
                        ) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = defaultdict(dict)
    for label, rate in rates.items():
        for name in rows:
            if name == "quix" and label == "half":
                continue
            lat = await measure_latency(session, row(name), workload, rate, seconds,
                                        f"lat{round_no}-{label}")
            got[label][name] = asdict(lat)
            broker = "?" if lat.broker_cores is None else f"{lat.broker_cores:.2f}"
            say(f"  {label:>5} {rate:>8,.0f}/s {name:<13} p50 {lat.p50_ms:7.1f}  p99 "
                f"{lat.p99_ms:7.1f}  max {lat.max_ms:7.1f} ms  ({lat.samples:,} samples, "
                f"cores: consumer {lat.consumer_cores:.2f}, broker {broker}, "
                f"machine {lat.machine_busy_cores:.2f}; the bench's longest collector pause "
                f"{lat.bench_gc_longest_ms:.0f} ms)")
    return got


def verdicts(tp: dict[str, Throughput], out_per_ev: dict[str, float],
             lat: dict[str, dict[str, Any]]) -> dict[str, float]:
    """This round's goal ratios (issue 18), each named with the side it must be on."""
    def out_s(name: str) -> float:
        return tp[name].steady_events_per_s * out_per_ev[name]

    def out_per_cpu_s(name: str) -> float:
        return 1e6 / tp[name].steady_cpu_s_per_million * out_per_ev[name]

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
    for name in ("typed", WORKERS_ROW):
        if name in half and BASELINE in half:
            ratios[f"p99_half_{name.replace('-', '_')}_x_copier (<= 1.3)"] = (
                half[name]["p99_ms"] / half[BASELINE]["p99_ms"])
    return {k: round(v, 3) for k, v in ratios.items()}


def _cell(per: list[dict[str, Any]], key: str, scale: float = 1.0, fmt: str = ",.0f") -> str:
    """The median of the rounds, with their range."""
    values = sorted(r[key] * scale for r in per)
    span = f" ({values[0]:{fmt}}-{values[-1]:{fmt}})" if len(values) > 1 else ""
    return f"{statistics.median(values):{fmt}}{span}"


def render(result: dict[str, Any]) -> str:
    """The throughput table (medians, with each round's range) and the goals per round."""
    lines = ["| row | events/s | steady events/s | steady out/s | CPU s/M ev | cores |",
             "|---|---|---|---|---|---|"]
    for name, per in result["throughput"].items():
        lines.append(f"| {name} | {_cell(per, 'events_per_s')} | "
                     f"{_cell(per, 'steady_events_per_s')} | "
                     f"{_cell(per, 'steady_events_per_s', result['outputs_per_event'][name])} | "
                     f"{_cell(per, 'steady_cpu_s_per_million', fmt='.1f')} | "
                     f"{_cell(per, 'consumer_cores', fmt='.2f')} |")
    lines += ["", "| rate | row | p50 ms per round | p99 ms per round "
              "| cores per round: consumer, broker, machine |", "|---|---|---|---|---|"]
    by_rate: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for one in result["latency"]:
        for label, rows in one.items():
            for name, lat in rows.items():
                by_rate[(label, name)].append(lat)
    for (label, name), lats in by_rate.items():
        offered = [f"{x['offered_per_s']:,.0f}" for x in lats]  # "half" differs per round
        rate = (offered[0] if len(set(offered)) == 1 else " / ".join(offered)) + "/s"
        p50s = " / ".join(f"{x['p50_ms']:.0f}" for x in lats)
        p99s = " / ".join(f"{x['p99_ms']:.0f}" for x in lats)
        # The cores busy: the consumer's, the broker's ("?" elsewhere), the machine's.
        cores = " / ".join(f"{x['consumer_cores']:.2f}, " + (
            "?" if x.get("broker_cores") is None else f"{x['broker_cores']:.2f}")
            + f", {x['machine_busy_cores']:.2f}" for x in lats)
        lines.append(f"| {label} {rate} | {name} | {p50s} | {p99s} | {cores} |")
    lines += ["", f"goals per round ({result['rounds']} rounds):"]
    for i, verdict in enumerate(result["verdicts"]):
        lines.append(f"  round {i + 1}: " + ", ".join(f"{k} = {v}" for k, v in verdict.items()))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    names = [name for name in ALL_ROWS if name in args.rows.split(",")]
    rows = [row(name) for name in names]
    workload = make_workload(args.events, seed=args.seed)
    records = workload.encoded()
    in_order = (make_workload(args.events, seed=args.seed, reorder=False)
                if args.latency_seconds > 0 else workload)
    counted: dict[str, float] = {}  # the peers of one kind share a count, typed-w2 is typed
    out_per_ev: dict[str, float] = {}
    for chosen in rows:
        kind = "copy" if "--copy" in PEERS.get(chosen.name, ("", ()))[1] else (
            "peer" if chosen.name in PEERS else chosen.groups[0])
        if kind not in counted:
            counted[kind] = outputs_per_event(chosen, records)
        out_per_ev[chosen.name] = counted[kind]
    say("  outputs per event: " + ", ".join(f"{r} {v:.3f}" for r, v in out_per_ev.items()))
    async with Session("cmp") as session:
        result: dict[str, Any] = {
            **started(), "broker": broker_version(session.base.bootstrap_servers),
            "quixstreams": QUIX_VERSION, "events": len(records), "rounds": args.rounds,
            "outputs_per_event": out_per_ev, "throughput": defaultdict(list), "latency": [],
            "verdicts": [],
        }
        for round_no in range(args.rounds):
            say(f"round {round_no + 1}/{args.rounds}: throughput")
            tp = await throughput_round(session, rows, records, PARTITIONS, f"r{round_no}")
            for name, value in tp.items():
                result["throughput"][name].append(asdict(value))
            rates = {f"{r:.0f}": r for r in FIXED_RATES}
            if BASELINE in tp:
                rates["half"] = tp[BASELINE].events_per_s / 2
            lat: dict[str, dict[str, Any]] = {}
            if args.latency_seconds > 0:
                say(f"round {round_no + 1}/{args.rounds}: latency")
                lat = await latency_round(session, round_no, rates,
                                          [r for r in LATENCY_ROWS if r in names], in_order,
                                          args.latency_seconds)
                result["latency"].append(lat)
            result["verdicts"].append(verdicts(tp, out_per_ev, lat))
            say(f"  goals: {result['verdicts'][-1]}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = options("bench compare", argv, __doc__, events=1_000_000, rounds=3,
                   rows=(",".join(ROWS), f"of {', '.join(ALL_ROWS)}"),
                   latency_seconds=(15.0, "0: no latency"), seed=7,
                   out=Path("bench/results/compare.json"))
    unknown = set(args.rows.split(",")) - set(ALL_ROWS)
    if unknown:
        raise SystemExit(f"--rows: unknown {', '.join(sorted(unknown))} (rows: "
                         f"{', '.join(ALL_ROWS)})")
    result = asyncio.run(run(args))
    print(render(result))
    write_json(args.out, result)
    return 0

