"""The SSE gateway against issue 19's two goals, on the real broker.

    python -m bench.gateway [--earlier 1000000] [--clients 1000 --runs 100] [--quick]

1. **Time to first event** of a run whose partition holds ``--earlier`` records of other
   runs (goal: < 100 ms), :mod:`bench.gateway_ttfe`: the gateway's start-up over that
   window, then request → first SSE message with the run's records held in memory and with
   them read back from Kafka (a 1 KiB cache), against the baseline measured in the same
   run, the project's ``RunReader`` reading the partition from offset 0.
2. **Fan-out** (goal: ``--clients`` SSE clients on one gateway process, p99 delivery lag
   < 250 ms after the commit), :mod:`bench.gateway_fanout`: ``symfonic-stream gateway`` as
   a process, ``--runs`` runs written transactionally at ``--rate`` records/s, every
   viewer checked to get every seq once and in order, against a plain read_committed
   consumer's lag measured in the same run.

Clients, gateway, producer and broker share this machine's cores: the output says how many.
Prints the tables (stdout; progress on stderr), writes ``--out`` (JSON), deletes its topics.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson

from bench import gateway_fanout, gateway_ttfe
from bench.gateway_clients import raise_fd_limit
from bench.kafka_io import cleanup
from bench.machine import broker_version, machine
from bench.progress import say
from symfonic_stream.config import load_settings

FIRST_EVENT_GOAL_MS = 100.0
LAG_GOAL_MS = 250.0
QUICK = {"earlier": 20_000, "repeats": 2, "requests": 5, "clients": 50, "runs": 10,
         "rate": [200.0], "seconds": 3.0}


def code_state() -> dict[str, Any]:
    """The commit measured, and the files of the package that differ from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {"commit": git("rev-parse", "--short", "HEAD"),
            "changed": git("status", "--porcelain", "--", "symfonic_stream").splitlines()}


def verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each goal: the figure it is judged by, and whether it was met."""
    found: dict[str, dict[str, Any]] = {}
    first = result.get("first_event")
    if first:
        for name in ("held", "read_back"):
            figure = first[f"{name}_ms"]
            found[f"first_event_{name} < {FIRST_EVENT_GOAL_MS:g} ms"] = {
                "median_ms": round(figure["median"], 1), "max_ms": round(figure["max"], 1),
                "met": figure["max"] < FIRST_EVENT_GOAL_MS}
    for fan in result.get("fanout", []):
        complete = (fan["failures"] == 0
                    and fan["delivered_messages"] == fan["expected_messages"])
        found[f"p99 lag of {fan['clients']:,} clients at {fan['offered_per_s']:,.0f} "
              f"records/s < {LAG_GOAL_MS:g} ms"] = {
            "p99_ms": round(fan["lag"].get("p99_ms", float("nan")), 1),
            "complete": complete,
            "met": complete and fan["lag"].get("p99_ms", 1e9) < LAG_GOAL_MS}
    return found


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def render(result: dict[str, Any]) -> str:
    code = result.get("code", {})
    out = [f"bench.gateway {result['started_at']} at {code.get('commit', '?')}"
           + (f" (changed: {', '.join(code['changed'])})" if code.get("changed") else "")
           + f": {result['machine']['cpus']} cores "
           f"({result['machine']['cpu_model']}) shared by the broker (Kafka "
           f"{result['broker']}), the gateway, the clients and the producer; load average "
           f"{result['machine']['load_average_at_start']} at the start"]
    first = result.get("first_event")
    if first:
        out += ["", f"first event of a run behind {first['earlier_records']:,} earlier "
                f"records on its partition ({first['repeats']} start-ups and readers, "
                f"{first['requests']} requests each):"]
        widths = [40, 10, 10, 12, 12, 10]
        out.append(_row(["figure", "median", "max", "whole run", "whole max", "x reader"],
                        widths))
        startup = first["startup_s"]
        out.append(_row(["gateway start-up to caught up (s)", f"{startup['median']:.2f}",
                         f"{startup['max']:.2f}", "-", "-", "-"], widths))
        reader = first["reader_ms"]["median"]
        for label, key in (("first event, held in memory (ms)", "held_ms"),
                           ("first event, read back from Kafka (ms)", "read_back_ms"),
                           ("baseline: RunReader from offset 0 (ms)", "reader_ms")):
            s = first[key]
            out.append(_row([label, f"{s['median']:.1f}", f"{s['max']:.1f}",
                             f"{s['whole_median']:.1f}", f"{s['whole_max']:.1f}",
                             f"{s['median'] / reader:.4f}"], widths))
        out.append(f"  the reader takes {1 / first['held_x_reader']:,.0f}x the held and "
                   f"{1 / first['read_back_x_reader']:,.0f}x the read-back first event")
        out.append(f"  start-up: {first['startup_records_per_s']:,.0f} records/s; "
                   f"{first['store']['runs']:,} runs indexed, "
                   f"{first['store']['held_bytes'] / 2**20:.0f} MiB held; with a 1 KiB "
                   f"cache {first['startup_tiny_cache_s']:.2f} s")
    for fan in result.get("fanout", []):
        lag, floor = fan["lag"], fan["baseline_reader_lag"]
        out += ["", f"fan-out: {fan['clients']:,} SSE clients ({fan['runs']} runs x "
                f"{fan['viewers_per_run']} viewers) on one gateway process, "
                f"{fan['records_per_run']} records per run, {fan['achieved_per_s']:,.0f} "
                f"records/s ({fan['transactions']} transactions, "
                f"{fan['transaction_ms_mean']:.1f} ms each), {fan['partitions']} partitions:"]
        widths = [40, 10, 10, 10, 10, 10]
        out.append(_row(["lag after commit (ms)", "p50", "p99", "p999", "max", "samples"],
                        widths))
        for label, s in (("gateway -> SSE client", lag),
                         ("baseline: read_committed consumer", floor)):
            out.append(_row([label, *(f"{s.get(k, 0):.1f}" for k in
                                      ("p50_ms", "p99_ms", "p999_ms", "max_ms")),
                             f"{s['samples']:,}"], widths))
        ratio = fan["lag_p99_x_baseline"]
        out.append(f"  p99 x baseline: {ratio:.2f}" if ratio else "  p99 x baseline: -")
        rss = fan["gateway_rss_mb"]
        out.append(f"  delivered {fan['delivered_messages']:,} of {fan['expected_messages']:,}"
                   f" messages ({fan['messages_per_s']:,.0f}/s), failures: {fan['failures']}")
        out.extend(f"    FAILURE {f}" for f in fan["failure_examples"])
        out.append(f"  gateway process: {fan['gateway_cores']:.2f} cores; RSS {rss['ready']:.0f}"
                   f" MiB ready, {rss['connected']:.0f} MiB with the clients connected "
                   f"({fan['gateway_kib_per_client']:.0f} KiB each), peak "
                   f"{rss['peak_vmhwm']:.0f} MiB")
        late = fan["clients_loop_lateness_ms"]
        out.append(f"  clients process {fan['clients_process_cpu_s'] / fan['load_s']:.2f} "
                   f"cores (its loop late by p99 {late['p99']:.1f} ms, max {late['max']:.1f})"
                   f"; whole machine {fan['machine_busy_cores']:.2f} of "
                   f"{result['machine']['cpus']} cores busy during the load")
        out.append("  p99 lag per second of load (ms): "
                   + " ".join(f"{v:.0f}" for v in lag.get("p99_by_second_ms", [])))
    out += ["", "goals:"]
    for goal, verdict in result["verdicts"].items():
        figures = ", ".join(f"{k} {v}" for k, v in verdict.items() if k != "met")
        out.append(f"  {goal}: {figures} -> {'met' if verdict['met'] else 'NOT met'}")
    return "\n".join(out)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = load_settings()
    run_id = f"bench-gw-{uuid.uuid4().hex[:6]}"
    result: dict[str, Any] = {
        "command": "python -m bench.gateway " + " ".join(sys.argv[1:]),
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick, "machine": machine(), "broker": broker_version(base.bootstrap_servers),
        "fd_limit": raise_fd_limit(65536), "code": code_state(),
    }
    prefixes: list[str] = []
    try:
        if "first-event" in args.parts:
            prefixes.append(f"{run_id}-ttfe")
            result["first_event"] = await gateway_ttfe.measure(
                base, prefixes[-1], args.earlier, args.repeats, args.requests)
        if "fanout" in args.parts:
            result["fanout"] = []
            for n, rate in enumerate(args.rate):
                prefixes.append(f"{run_id}-fan{n}")
                say(f"fan-out: {args.clients:,} clients, {rate:,.0f} records/s")
                result["fanout"].append(await gateway_fanout.measure(
                    base, prefixes[-1], runs=args.runs, viewers=args.clients // args.runs,
                    rate=rate, seconds=args.seconds, txn_ms=args.txn_ms,
                    partitions=args.partitions))
    finally:
        say(f"deleted {await cleanup(base, prefixes)} benchmark topics")
    result["verdicts"] = verdicts(result)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--earlier", type=int, default=1_000_000,
                        help="records of other runs before the target run")
    parser.add_argument("--repeats", type=int, default=5, help="start-ups and reader runs")
    parser.add_argument("--requests", type=int, default=20, help="requests per gateway")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rate", type=_rates, default=_rates("200,500,1000"),
                        help="records per second over all runs; several: one run each")
    parser.add_argument("--seconds", type=float, default=20.0, help="of load")
    parser.add_argument("--txn-ms", type=float, default=25.0, help="one transaction per")
    parser.add_argument("--partitions", type=int, default=4, help="of the fan-out topics")
    parser.add_argument("--parts", default="first-event,fanout")
    parser.add_argument("--quick", action="store_true",
                        help="tiny run: " + ", ".join(f"--{k} {v}" for k, v in QUICK.items()))
    parser.add_argument("--out", type=Path, default=Path("bench/results/gateway.json"))
    args = parser.parse_args(argv)
    if args.quick:  # the quick sizes, unless given
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    if args.clients % args.runs:
        parser.error("--clients must be a multiple of --runs")
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(render(result))
    say(f"wrote {args.out}")
    failed = sum(fan["failures"] for fan in result.get("fanout", []))
    return 1 if failed else 0


def _rates(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


if __name__ == "__main__":
    sys.exit(main())
