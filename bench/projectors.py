"""The project's consumers against the limit of the stack: ``python -m bench`` (one table,
one JSON file), ``python -m bench relative_load`` (docs/benchmarks.md, "Method, in detail")
and against their peers, ``python -m bench compare`` (:func:`compare`).

    python -m bench [--events 200000] [--rounds 1] [--quick] [--out bench/results/latest.json]

On a realistic raw stream (:mod:`bench.workload`), every row (:func:`rows`): throughput on
1 and 4 partitions with CPU seconds per million events and peak RSS
(:func:`bench.measure.throughput_round`), latency at 50 % of the copier's 4-partition
throughput (:func:`bench.measure.measure_latency`); then the guard's state
(:func:`bench.state.measure_state`) and the offline hot path
(:func:`bench.hot_path.offline_figures`).
One table with ratios to the copier; everything as JSON; every topic made is deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import broker_version, options, say, started, table, write_json
from bench.hot_path import offline_figures
from bench.kafka_io import Session
from bench.measure import Latency, Throughput, measure_latency, throughput_round
from bench.peers.projection import Projection, copy_value
from bench.processes import BASELINE, QUIX_VERSION, PeerProcess, Process, Row, bench_consumers
from bench.state import measure_state
from bench.workload import make_workload
from symfonic_stream.app.topologies import topologies
from symfonic_stream.config import Settings
from symfonic_stream.consumers import registered
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames
from symfonic_stream.projections.declared import PROJECTIONS

#: Offered load of the latency runs, as a share of the copier's 4-partition throughput.
LOAD_SHARE = 0.5
GOALS = {
    "typed_throughput_ratio_min": 0.85,
    "typed_p99_ratio_max": 1.3,
    "restore_100k_max_s": 10.0,
    "offline_ratio_max": 3.0,
}
#: (column title, key in a row summary, format)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ev/s 1p", "throughput_1p_events_per_s", "{:,.0f}"),
    ("ev/s 4p", "throughput_4p_events_per_s", "{:,.0f}"),
    ("p50 ms", "latency_p50_ms", "{:.1f}"),
    ("p99 ms", "latency_p99_ms", "{:.1f}"),
    ("p999 ms", "latency_p999_ms", "{:.1f}"),
    ("CPU s/M ev", "cpu_s_per_million", "{:.1f}"),
    ("peak RSS MB", "peak_rss_mb", "{:.1f}"),
)


def rows() -> dict[str, Row]:
    """Every consumer of the raw topic alone, the copier first; then the projectors of the
    run streams at once (a deployment's two outputs of one input, two processes)."""
    found = {name: Row(name, (name,)) for name in bench_consumers()}
    both = tuple(c.name for c in registered() if c.name in PROJECTIONS)
    found["+".join(both)] = Row("+".join(both), both, own_input=True)
    return found


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def summarise(throughput: dict[str, dict[int, list[Throughput]]],
              latency: dict[str, list[Latency]], partitions: list[int]) -> dict[str, Any]:
    """Medians per row, and the ratios to the copier."""
    summary: dict[str, Any] = {}
    for row in throughput:
        entry: dict[str, Any] = {"consumers": list(rows()[row].groups)}
        for p in partitions:
            entry[f"throughput_{p}p_events_per_s"] = median(
                [t.events_per_s for t in throughput[row].get(p, [])])
        four = throughput[row].get(max(partitions), [])
        entry["cpu_s_per_million"] = median([t.cpu_s_per_million for t in four])
        entry["peak_rss_mb"] = median([t.peak_rss_bytes / 2**20 for t in four])
        lat = latency.get(row, [])
        entry["latency_samples"] = int(median([float(x.samples) for x in lat]))
        for name in ("p50_ms", "p99_ms", "p999_ms"):
            entry[f"latency_{name}"] = median([getattr(x, name) for x in lat])
        summary[row] = entry
    base = summary[BASELINE]
    for entry in summary.values():
        entry["ratio_to_copier"] = {
            key: entry[key] / base[key] if base[key] else 0.0
            for key in (*(f"throughput_{p}p_events_per_s" for p in partitions),
                        "latency_p50_ms", "latency_p99_ms", "latency_p999_ms",
                        "cpu_s_per_million", "peak_rss_mb")}
    return summary


def goals(summary: dict[str, Any], state: dict[str, Any] | None,
          offline: dict[str, Any] | None, partitions: int) -> dict[str, Any]:
    verdicts: dict[str, Any] = {}
    typed = summary.get("typed", {}).get("ratio_to_copier")
    if typed:
        ratio = typed[f"throughput_{partitions}p_events_per_s"]
        verdicts["typed_throughput_ratio"] = {
            "value": ratio, "goal": f">= {GOALS['typed_throughput_ratio_min']}",
            "met": ratio >= GOALS["typed_throughput_ratio_min"]}
        ratio = typed["latency_p99_ms"]
        verdicts["typed_p99_latency_ratio"] = {
            "value": ratio, "goal": f"<= {GOALS['typed_p99_ratio_max']}",
            "met": ratio <= GOALS["typed_p99_ratio_max"]}
    if state is not None:
        verdicts["restore_seconds"] = {
            "value": state["restore_s"], "runs": state["runs"],
            "goal": f"< {GOALS['restore_100k_max_s']} s for 100,000 runs",
            # The goal is set for 100,000 runs; a smaller state says nothing about it.
            "met": (state["restore_s"] < GOALS["restore_100k_max_s"])
            if state["runs"] >= 100_000 else None}
    if offline is not None:
        verdicts["offline_ratio"] = {
            "value": offline["ratio"], "goal": f"<= {GOALS['offline_ratio_max']}",
            "met": offline["ratio"] <= GOALS["offline_ratio_max"]}
    return verdicts


def render(result: dict[str, Any]) -> str:
    """One line per row, ratios to the copier in brackets; then the state, the offline
    path and the goals."""
    columns = [c for c in COLUMNS if any(c[1] in e for e in result["rows"].values())]

    def cell(entry: dict[str, Any], key: str, fmt: str) -> str:
        ratio = entry["ratio_to_copier"].get(key)
        return fmt.format(entry[key]) + (f" ({ratio:.2f}x)" if ratio is not None else "")

    text = [table([["consumer", *(title for title, _, _ in columns)],
                   *([name, *(cell(entry, key, fmt) for _, key, fmt in columns)]
                     for name, entry in result["rows"].items())])]
    load = result.get("latency_offered_load_per_s")
    if load:
        text.append(f"latency at {load:,.0f} events/s offered ({LOAD_SHARE:.0%} of the "
                    "copier's 4-partition throughput), read_committed, read time - event "
                    "timestamp; CPU and RSS from the 4-partition run; ratios to the copier "
                    "in brackets")
    state = result.get("state")
    if state:
        text.append(
            f"guard state, {state['runs']:,} open runs: "
            f"{state['encoded_record_bytes_per_run']:.1f} B/run in the changelog "
            f"(value {state['encoded_value_bytes_per_run']:.1f} B), "
            f"{state['memory_bytes_per_run_tracemalloc']:.0f} B/run in memory (tracemalloc; "
            f"RSS delta {state['memory_bytes_per_run_rss']:.0f} B/run); restore "
            f"{state['restore_s']:.2f} s; typed start->ready "
            f"{state['typed_start_to_ready_s']:.2f} s")
    off = result.get("offline")
    if off:
        text.append(
            f"offline hot path ({off['events']:,} events): baseline "
            f"{off['baseline_us_per_event']:.2f} us/ev, typed {off['offline_us_per_event']:.2f} "
            f"us/ev = {off['ratio']:.2f}x; live batch shape "
            f"{off['engine_shape_us_per_event']:.2f} us/ev = {off['engine_shape_ratio']:.2f}x")
    for name, verdict in result["verdicts"].items():
        met = verdict["met"]
        shown = ("n/a (not measured at the goal's size)" if met is None
                 else "MET" if met else "NOT MET")
        text.append(f"goal {name}: {verdict['value']:.2f} (goal {verdict['goal']}) {shown}")
    return "\n".join(text)


def _chosen(names: str) -> list[Row]:
    return [row for name, row in rows().items() if name in {BASELINE, *names.split(",")}]


async def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    partitions = sorted({int(p) for p in args.partitions.split(",")})
    chosen = _chosen(args.rows)
    throughput: dict[str, dict[int, list[Throughput]]] = defaultdict(lambda: defaultdict(list))
    latency: dict[str, list[Latency]] = defaultdict(list)
    state: dict[str, Any] | None = None
    async with Session("bench", keep_topics=args.keep_topics, log_dir=args.log_dir) as session:
        base = session.base
        result: dict[str, Any] = {
            **started(argv),
            "broker": {"bootstrap_servers": base.bootstrap_servers,
                       "version": broker_version(base.bootstrap_servers)},
            "settings": {"batch_max_records": base.batch_max_records,
                         "batch_max_latency_ms": base.batch_max_latency_ms,
                         "compression": base.compression},
            "goals": GOALS,
        }
        say(f"bench {session.run_id}: generating {args.events:,} events")
        workload = make_workload(args.events, seed=args.seed, pause_share=args.pause_share)
        result["workload"] = workload.describe()
        records = workload.encoded()
        for round_no in range(args.rounds):
            for p in partitions:
                say(f"round {round_no + 1}/{args.rounds}: throughput on {p} partition(s)")
                got = await throughput_round(session, chosen, records, p, f"r{round_no}-p{p}")
                for name, value in got.items():
                    throughput[name][p].append(value)
        rate = LOAD_SHARE * median([t.events_per_s for t in throughput[BASELINE][max(partitions)]])
        result["latency_offered_load_per_s"] = rate
        for round_no in range(args.rounds):
            say(f"round {round_no + 1}/{args.rounds}: latency at {rate:,.0f} events/s")
            for row in chosen:
                lat = await measure_latency(session, row, workload, rate, args.latency_seconds,
                                            f"lat{round_no}", settle_s=0.2 if args.quick else 1.0)
                latency[row.name].append(lat)
                say(f"  {row.name:<13} {lat.said()}")
        if args.restore_runs > 0:
            say(f"guard state: {args.restore_runs:,} open runs")
            state = await measure_state(session, args.restore_runs, 1 if args.quick else 3)
            say(f"  {state['encoded_record_bytes_per_run']:.0f} B/run encoded, "
                f"{state['memory_bytes_per_run_tracemalloc']:.0f} B/run in memory, "
                f"restore {state['restore_s']:.2f}s, start->ready "
                f"{state['typed_start_to_ready_s']:.2f}s")
    offline: dict[str, Any] | None = None
    if args.offline_events > 0:
        say(f"offline hot path: {args.offline_events:,} events")
        offline = offline_figures(args.offline_events, "typed", repeat=3)
        say(f"  ratio {offline['ratio']:.2f}x orjson loads+dumps")
    summary = summarise(throughput, latency, partitions)
    result.update(
        offered_load_share=LOAD_SHARE, rows=summary,
        raw={"throughput": {row: {str(p): [asdict(t) for t in ts] for p, ts in by_p.items()}
                            for row, by_p in throughput.items()},
             "latency": {row: [asdict(x) for x in ls] for row, ls in latency.items()}},
        state=state, offline=offline,
        verdicts=goals(summary, state, offline, max(partitions)),
        partitions=partitions, rounds=args.rounds, quick=bool(args.quick))
    result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    every = ",".join(rows())
    args = options(
        "bench", argv, __doc__,
        events=(200_000, "raw events"), rounds=(1, "repeat; medians are reported"),
        partitions=("1,4", "partition counts"),
        latency_seconds=(20.0, "length of each offered-load run (0: the whole stream once)"),
        restore_runs=(100_000, "open runs in the state benchmark"),
        offline_events=(200_000, "events of the offline hot-path benchmark (0 skips it)"),
        rows=(every, f"rows to run ({every}); the copier always runs"),
        quick=(False, "a tiny run (seconds, for smoke tests): the figures mean nothing"),
        seed=7, pause_share=(float, "share of runs ending in a pause (0.03; --quick: 0.5, so "
                                    "the pause router's latency row has samples)"),
        out=Path("bench/results/latest.json"), keep_topics=False,
        log_dir=(Path, "consumer logs (default: a temporary directory, removed)"))
    if args.quick:
        args.events = min(args.events, 3_000)
        args.latency_seconds = 0.0
        args.restore_runs = min(args.restore_runs, 2_000)
        args.offline_events = min(args.offline_events, 5_000)
    if args.pause_share is None:
        args.pause_share = 0.5 if args.quick else 0.03
    # aiokafka warns about every retried produce right after a topic was created.
    logging.basicConfig(level=logging.ERROR)
    result = asyncio.run(run(args, sys.argv[1:] if argv is None else argv))
    print(render(result))
    write_json(args.out, result)
    return 0


async def relative(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Per row: its throughputs, offered rates and p50/p99 latencies, one value per round."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    workload = make_workload(args.events)
    records = workload.encoded()
    async with Session("bench-rel") as session:
        for round_no in range(args.rounds):
            got = await throughput_round(session, _chosen(args.rows), records, 4, f"r{round_no}")
            for row in _chosen(args.rows):
                rate = LOAD_SHARE * got[row.name].events_per_s
                lat = await measure_latency(session, row, workload, rate, args.latency_seconds,
                                            f"lat{round_no}")
                for name, value in (("events_per_s", got[row.name].events_per_s),
                                    ("offered_per_s", rate), ("p50_ms", lat.p50_ms),
                                    ("p99_ms", lat.p99_ms)):
                    found[row.name][name].append(value)
                say(f"  {row.name:<13} {got[row.name].events_per_s:>9,.0f} ev/s, offered "
                    f"{rate:>7,.0f}/s: p50 {lat.p50_ms:7.1f} ms  p99 {lat.p99_ms:7.1f} ms")
    return found


def relative_load(argv: list[str] | None = None) -> int:
    """Latency at the same *relative* load: ``python -m bench`` offers every consumer 50 %
    of the copier's throughput, as the goal is written, so a consumer of less capacity runs
    closer to its own limit, where latency grows steeply. Per round each row's 4-partition
    throughput, then each row offered 50 % of its own: if the typed projector's p99 is then
    close to the copier's, its gap at a shared load is its throughput gap, not something the
    engine adds per record."""
    args = options("bench relative_load", argv, relative_load.__doc__,
                   rows=f"{BASELINE},typed", events=200_000, rounds=3, latency_seconds=20.0)
    logging.basicConfig(level=logging.ERROR)
    found = asyncio.run(relative(args))
    base_p99 = statistics.median(found[BASELINE]["p99_ms"])
    lines = [["consumer", "ev/s 4p", "offered/s", "p50 ms", "p99 ms", "p99 x copier"]]
    for row, values in found.items():
        med = {name: statistics.median(series) for name, series in values.items()}
        lines.append([row, f"{med['events_per_s']:,.0f}", f"{med['offered_per_s']:,.0f}",
                      f"{med['p50_ms']:.1f}", f"{med['p99_ms']:.1f}",
                      f"{med['p99_ms'] / base_p99:.2f}"])
    print(table(lines))
    return 0


#: Peer rows: name → (program, its extra arguments). The name is the group's suffix.
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "naive-copier": ("naive", ("--copy",)),
    "naive-typed": ("naive", ()),
    "quix": ("quix", ("--commit-interval", "5")),
    "quix-0.1s": ("quix", ("--commit-interval", "0.1")),
    "rdkafka-copier": ("rdkafka", ("--copy",)),
    "rdkafka-typed": ("rdkafka", ()),
}
#: ``run typed --workers 2``: the typed group again, so on a second prefix of the same stream.
WORKERS_ROW = "typed-w2"
COMPARED_ROWS = (BASELINE, "naive-copier", "naive-typed", "quix", "quix-0.1s", "typed", WORKERS_ROW)
#: Rows run only when ``--rows`` names them: the naive loop on librdkafka
#: (``bench/peers/peer_env.py``, throughput only).
OPTIONAL_ROWS = ("rdkafka-copier", "rdkafka-typed")
ALL_COMPARED = COMPARED_ROWS + OPTIONAL_ROWS
LATENCY_ROWS = (BASELINE, "naive-typed", "quix-0.1s", "quix", "typed", WORKERS_ROW)
#: ``quix`` (5 s commits) only at the fixed rates: its latency is its commit interval.
FIXED_RATES = (200.0, 5000.0)
PARTITIONS = 4


def compared_row(name: str) -> Row:
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
    peer's projection, or the real processor of the consumer it runs over each partition's
    records, in offset order."""
    if chosen.name in PEERS:
        project = copy_value if "--copy" in PEERS[chosen.name][1] else Projection()
        return sum(len(project(value)) for _, value in records) / len(records)
    settings = Settings(topic_prefix="count", partitions=PARTITIONS)
    factory = topologies(chosen.groups[0], settings)[0].processor_factory
    processors = {p: factory(p) for p in range(PARTITIONS)}
    offsets: dict[int, int] = defaultdict(int)
    topic, out, now = TopicNames(settings.topic_prefix).agent_events, Collector(), time.time()
    for key, value in records:
        partition = partition_for_key(key, PARTITIONS)
        record = InputRecord(topic, partition, offsets[partition], key, value)
        processors[partition].process(record, now, out)
        offsets[partition] += 1
    return len(out.outputs) / len(records)


async def latency_round(session: Session, round_no: int, rates: dict[str, float],
                        rows: list[str], workload: Any, seconds: float
                        ) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = defaultdict(dict)
    for label, rate in rates.items():
        for name in rows:
            if name == "quix" and label == "half":
                continue
            lat = await measure_latency(session, compared_row(name), workload, rate, seconds,
                                        f"lat{round_no}-{label}")
            got[label][name] = asdict(lat)
            say(f"  {label:>5} {rate:>8,.0f}/s {name:<13} {lat.said()}")
    return got


def compared_goals(tp: dict[str, Throughput], out_per_ev: dict[str, float],
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


def render_comparison(result: dict[str, Any]) -> str:
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


async def comparison(args: argparse.Namespace) -> dict[str, Any]:
    names = [name for name in ALL_COMPARED if name in args.rows.split(",")]
    rows = [compared_row(name) for name in names]
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
            result["verdicts"].append(compared_goals(tp, out_per_ev, lat))
            say(f"  goals: {result['verdicts'][-1]}")
    return result


def compare(argv: list[str] | None = None) -> int:
    """The typed projector against its peers, side by side in one run (issue 18's table;
    docs/benchmarks.md, "Against its peers"). All exactly-once, 4 partitions, the same
    input, each in its own consumer group: ``copier``, ``typed``, ``typed-w2`` (``run typed
    --workers 2``) and the peers (:data:`PEERS`, ``bench/peers/``). Per round: throughput
    (*steady out/s*: the steady rate times the row's outputs per event, counted offline),
    then latency at 200 ev/s, 5,000 ev/s and half this round's copier throughput, on the
    stream **in kernel order** (the peers order nothing: an event the guard holds until the
    one before it comes would count as the engine's latency)."""
    args = options("bench compare", argv, compare.__doc__, events=1_000_000, rounds=3,
                   rows=(",".join(COMPARED_ROWS), f"of {', '.join(ALL_COMPARED)}"),
                   latency_seconds=(15.0, "0: no latency"), seed=7,
                   out=Path("bench/results/compare.json"))
    unknown = set(args.rows.split(",")) - set(ALL_COMPARED)
    if unknown:
        raise SystemExit(f"--rows: unknown {', '.join(sorted(unknown))} (rows: "
                         f"{', '.join(ALL_COMPARED)})")
    result = asyncio.run(comparison(args))
    print(render_comparison(result))
    write_json(args.out, result)
    return 0

