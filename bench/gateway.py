"""The SSE gateway against issue 19's two goals, each against a baseline of the same run
(the method: docs/benchmarks.md, "The gateway").

    python -m bench gateway [--earlier 1000000] [--clients 1000 --runs 100] [--quick]

1. **Time to the first event** of a run behind ``--earlier`` records of other runs on its
   partition (goal: < 100 ms): held in memory, and read back from Kafka by a gateway whose
   cache no longer holds it, against the project's ``RunReader`` from offset 0.
2. **Fan-out**: ``--clients`` SSE clients on one gateway process (goal: p99 delivery lag
   < 250 ms after the commit), every viewer checked to get every seq once and in order,
   against a plain ``read_committed`` consumer's lag.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import statistics
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from bench.harness import (
    ROOT,
    broker_version,
    machine_busy_seconds,
    options,
    p99_by_second,
    rank,
    say,
    started,
    table,
    write_json,
)
from bench.kafka_io import OutputReader, Session, end_offsets, publish
from bench.processes import GatewayProcess, serving_gateway
from bench.sse_client import ViewersProcess, first_event, raise_fd_limit
from bench.workload import end_envelope, envelope
from symfonic_stream.config import Settings
from symfonic_stream.gateway.server import Gateway
from symfonic_stream.kafka.clients import transactional_producer_kwargs
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.reader import RunReader

FIRST_EVENT_GOAL_MS = 100.0
LAG_GOAL_MS = 250.0
QUICK = {"earlier": 20_000, "repeats": 2, "requests": 5, "clients": 50, "runs": 10,
         "rate": "200", "seconds": 3.0}
#: Records per earlier run (the last one its ``end``), and runs interleaved at a time.
RUN_LEN = 100
WIDTH = 200
TARGET_TEXTS = 5
#: The smallest ``SYMFONIC_GATEWAY_CACHE_BYTES`` allowed: the target's first records go.
TINY_CACHE_BYTES = 1024
_WORDS = ("the ", "model ", "streams ", "a ", "token ", "and ", "then ", "tool ", "result ",
          "reads ", "Kafka ", "partition ", "offset ", "quickly, ", "because ", "of ")


def earlier_records(count: int, seed: int = 19) -> Iterator[tuple[bytes, bytes]]:
    """``count`` envelopes of other runs, interleaved as a projector writes them."""
    rng = random.Random(seed)
    texts = ["".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 30)))[:200]
             for _ in range(997)]
    ts = time.time() - 3600
    made = block = 0
    while made < count:
        runs = [f"run-{block:05d}-{n:03d}-{rng.getrandbits(32):08x}" for n in range(WIDTH)]
        for seq in range(RUN_LEN):
            for run_id in runs:
                if made == count:
                    return
                ts += 0.0001
                key = run_id.encode()
                if seq == RUN_LEN - 1:
                    yield key, end_envelope(run_id, seq, ts)
                else:
                    kind = "thinking_delta" if (made * 7) % 10 < 2 else "text_delta"
                    yield key, envelope(run_id, seq, ts, kind, texts[made % len(texts)])
                made += 1
        block += 1


@dataclass
class Series:
    """One figure's repetitions, in milliseconds (start-up: seconds)."""

    values: list[float] = field(default_factory=list)
    whole: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        got: dict[str, Any] = {"median": statistics.median(self.values),
                               "max": max(self.values), "all": self.values}
        if self.whole:
            got.update(whole_median=statistics.median(self.whole), whole_max=max(self.whole))
        return got


async def _requests(gateway: Gateway, run_id: str, count: int, series: Series) -> int:
    """``count`` requests for the run, timed; where the gateway holds it from."""
    run = gateway.tails["events"].store.get(run_id)
    if run is None:
        raise RuntimeError(f"the gateway has not indexed {run_id}")
    held_from = run.held_from  # (before the requests)
    path = f"/v1/runs/{run_id}/events"
    for _ in range(count):
        first_s, seq, whole_s, seqs = await first_event("127.0.0.1", gateway.port, path)
        if seq != 0 or seqs != TARGET_TEXTS + 1:
            raise RuntimeError(f"{path}: first seq {seq}, {seqs} messages")
        series.values.append(first_s * 1000)
        series.whole.append(whole_s * 1000)
        await asyncio.sleep(0.05)
    return held_from


async def _reader(settings: Settings, run_id: str, series: Series) -> None:
    began = time.perf_counter()
    first = None
    async with RunReader(run_id, settings) as reader:
        async for record in reader:
            if first is None:
                first = time.perf_counter() - began
                if record.seq != 0:
                    raise RuntimeError(f"reader: first seq {record.seq}")
    assert first is not None
    series.values.append(first * 1000)
    series.whole.append((time.perf_counter() - began) * 1000)


async def first_event_figures(session: Session, earlier: int, repeats: int,
                              requests: int) -> dict[str, Any]:
    settings = await session.topics("ttfe", 1, gateway_port=0, gateway_host="127.0.0.1")
    topic = TopicNames(settings.topic_prefix).stream_events
    say(f"first event: writing {earlier:,} earlier records to {topic}")
    publish_s = await publish(settings, earlier_records(earlier), topic)
    target = f"target-{settings.topic_prefix}"
    now = time.time()
    await publish(settings, [*((target.encode(), envelope(target, seq, now, "text_delta",
                                                          f"part {seq} "))
                               for seq in range(TARGET_TEXTS)),
                             (target.encode(), end_envelope(target, TARGET_TEXTS, now))], topic)
    ends = await end_offsets(settings, topic, 1)
    say(f"  wrote {ends[0]:,} records in {publish_s:.1f} s")
    startup, held, read_back, reader = Series(), Series(), Series(), Series()
    store: dict[str, Any] = {}
    for n in range(repeats):
        began = time.perf_counter()
        async with serving_gateway(settings) as gateway:
            startup.values.append(time.perf_counter() - began)
            say(f"  start-up {n + 1}/{repeats}: {startup.values[-1]:.2f} s")
            if n == repeats - 1:
                tail = gateway.tails["events"]
                store = {"runs": len(tail.store), "held_bytes": tail.store.held_bytes}
                store["target_held_from"] = await _requests(gateway, target, requests, held)
    if store["target_held_from"] != 0:
        raise RuntimeError(f"the target's seqs below {store['target_held_from']} are "
                           "not held: raise SYMFONIC_GATEWAY_CACHE_BYTES")
    say(f"  held: median {statistics.median(held.values):.1f} ms")
    began = time.perf_counter()
    async with serving_gateway(settings.model_copy(
            update={"gateway_cache_bytes": TINY_CACHE_BYTES})) as gateway:
        tiny_startup = time.perf_counter() - began
        store["tiny_cache_target_held_from"] = await _requests(gateway, target, requests,
                                                               read_back)
    if store["tiny_cache_target_held_from"] == 0:
        raise RuntimeError("the 1 KiB cache still holds the target's first record")
    say(f"  read back: median {statistics.median(read_back.values):.1f} ms")
    for n in range(repeats):
        await _reader(settings, target, reader)
        say(f"  reader {n + 1}/{repeats}: {reader.values[-1]:.0f} ms")
    held_s, back_s, base_s = held.summary(), read_back.summary(), reader.summary()
    return {
        "earlier_records": earlier, "partition_records": ends[0], "publish_s": publish_s,
        "repeats": repeats, "requests": requests, "store": store,
        "startup_s": startup.summary(), "startup_tiny_cache_s": tiny_startup,
        "startup_records_per_s": ends[0] / statistics.median(startup.values),
        "held_ms": held_s, "read_back_ms": back_s, "reader_ms": base_s,
        "held_x_reader": held_s["median"] / base_s["median"],
        "read_back_x_reader": back_s["median"] / base_s["median"],
    }


def lag_figures(lags: list[tuple[float, float]], since: float) -> dict[str, Any]:
    """p50/p99/... of ``(commit time, lag)`` samples, and the p99 per second of load (by
    commit time from ``since``)."""
    ordered = sorted(lag for _, lag in lags)
    if not ordered:
        return {"samples": 0}
    return {"samples": len(ordered), "min_ms": ordered[0] * 1000,
            **{f"{name}_ms": rank(ordered, share) * 1000
               for name, share in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))},
            "max_ms": ordered[-1] * 1000,
            "p99_by_second_ms": p99_by_second((at - since, lag * 1000) for at, lag in lags)}


class Load:
    """The transactional writer of the runs' envelopes, timing every commit."""

    def __init__(self, settings: Settings, run_ids: list[str], records_per_run: int) -> None:
        self.topic = TopicNames(settings.topic_prefix).stream_events
        self.run_ids = run_ids
        self.per_run = records_per_run
        self.producer = AIOKafkaProducer(**transactional_producer_kwargs(
            settings, f"{settings.topic_prefix}-load"))
        #: (run index, seq) -> time.time() just after its transaction's commit returned.
        self.committed: dict[tuple[int, int], float] = {}
        self.transaction_s: list[float] = []
        self.load_started = 0.0

    def value(self, run: int, seq: int) -> bytes:
        run_id = self.run_ids[run]
        if seq == self.per_run - 1:
            return end_envelope(run_id, seq, time.time())
        return envelope(run_id, seq, time.time(), "text_delta", f"token {seq} of the answer ")

    async def commit(self, records: Iterable[tuple[int, int]]) -> None:
        began = time.perf_counter()
        await self.producer.begin_transaction()
        batch = list(records)
        for run, seq in batch:
            await self.producer.send(self.topic, self.value(run, seq),
                                     key=self.run_ids[run].encode())
        await self.producer.commit_transaction()
        now = time.time()
        self.transaction_s.append(time.perf_counter() - began)
        for key in batch:
            self.committed[key] = now

    async def paced(self, rate: float, txn_ms: float) -> float:
        """Every seq after 0 of every run at ``rate`` records/s; returns the achieved rate."""
        runs = len(self.run_ids)
        total = runs * (self.per_run - 1)
        self.load_started = time.time()
        began, done = time.perf_counter(), 0
        while done < total:
            due = min(total, int((time.perf_counter() - began) * rate) + 1)
            if due > done:
                await self.commit((i % runs, 1 + i // runs) for i in range(done, due))
                done = due
            await asyncio.sleep(max(0.0, began + (done / rate) - time.perf_counter(),
                                    txn_ms / 1000 - self.transaction_s[-1]))
        elapsed = time.perf_counter() - began
        return total / elapsed if elapsed > 0 else 0.0


def delivery(viewed: list[dict[str, Any]], run_index: dict[str, int], per_run: int,
             load: Load, seen: dict[tuple[int, int], float]) -> dict[str, Any]:
    """Every viewer got every seq once and in order (else a failure, described), and the
    lag after the commit of every message after seq 0: the viewers', and the plain reader's
    that ``seen`` timed."""
    failures: list[str] = []
    lags: list[tuple[float, float]] = []
    expected, committed = list(range(per_run)), load.committed
    for n, viewer in enumerate(viewed):
        seqs: list[int] = viewer["seqs"]
        if seqs != expected:
            missing = len(set(expected) - set(seqs))
            repeated = len(seqs) - len(set(seqs))
            ordered = all(a < b for a, b in itertools.pairwise(seqs))
            failures.append(f"viewer {n} of {viewer['run']}: {len(seqs)} messages, "
                            f"{missing} seqs missing, {repeated} repeated, "
                            f"{'in' if ordered else 'out of'} order {viewer['error']}".strip())
        elif viewer["error"]:
            failures.append(f"viewer {n} of {viewer['run']}: {viewer['error']}")
        run = run_index[viewer["run"]]
        for seq, at in zip(seqs, viewer["times"], strict=True):
            if seq > 0 and (run, seq) in committed:
                lags.append((committed[(run, seq)], at - committed[(run, seq)]))
    floor = lag_figures([(committed[key], at - committed[key]) for key, at in seen.items()
                         if key[1] > 0 and key in committed], load.load_started)
    gw = lag_figures(lags, load.load_started)
    return {"clients": len(viewed), "delivered_messages": sum(len(v["seqs"]) for v in viewed),
            "failures": len(failures), "failure_examples": failures[:10],
            "lag": gw, "baseline_reader_lag": floor,
            "lag_p99_x_baseline": gw["p99_ms"] / floor["p99_ms"] if floor.get("p99_ms") else None}


async def fanout_figures(session: Session, n: int, *, runs: int, per_run_viewers: int,
                         rate: float, seconds: float, txn_ms: float,
                         partitions: int) -> dict[str, Any]:
    settings = await session.topics(f"fan{n}", partitions)
    per_run = max(2, round(rate * seconds / runs) + 1)
    run_ids = [f"{settings.topic_prefix}-run-{i:04d}" for i in range(runs)]
    run_index = {run_id: i for i, run_id in enumerate(run_ids)}
    work = session.log_dir
    (work / f"runs{n}.txt").write_text("\n".join(run_ids) + "\n")
    gateway = GatewayProcess(settings, work).start()
    load = Load(settings, run_ids, per_run)
    seen: dict[tuple[int, int], float] = {}

    def on_batch(records: list[Any], read_at: float) -> None:
        for record in records:
            parsed = orjson.loads(record.value)
            seen[(run_index[parsed["run_id"]], parsed["seq"])] = read_at

    reader = OutputReader(settings, [load.topic], partitions, on_batch)
    clients = ViewersProcess(within=seconds * 4 + 150)
    try:
        await gateway.wait_ready()
        rss_idle = gateway.rss()
        await load.producer.start()
        await reader.start()
        await load.commit((run, 0) for run in range(runs))
        said = await clients.start(gateway.http_port, work / f"runs{n}.txt", per_run_viewers,
                                   work / f"viewers{n}.json")
        say(f"  viewers: {said}")
        if not said.startswith("connected"):
            raise RuntimeError(f"the viewers did not all start: {said}")
        rss_connected = gateway.rss()
        cpu0, busy0, wall0 = gateway.cpu_seconds(), machine_busy_seconds(), time.perf_counter()
        rss_peak = [rss_connected]

        async def sample() -> None:
            while True:
                rss_peak[0] = max(rss_peak[0], gateway.rss())
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        say(f"  load: {rate:,.0f} records/s over {runs} runs for {seconds:g} s "
            f"({per_run} records per run), {per_run_viewers} viewers per run")
        achieved = await load.paced(rate, txn_ms)
        said = await clients.line()
        wall = time.perf_counter() - wall0
        cpu, busy = gateway.cpu_seconds() - cpu0, machine_busy_seconds() - busy0
        sampler.cancel()
        await clients.close(kill=False)
        await reader.wait_caught_up()
    finally:
        await clients.close()
        await reader.stop()
        await load.producer.stop()
        gateway.sample_rss()
        gateway.stop()
    got = orjson.loads((work / f"viewers{n}.json").read_bytes())
    delivered = delivery(got["viewers"], run_index, per_run, load, seen)
    return {
        "runs": runs, "viewers_per_run": per_run_viewers, "records_per_run": per_run,
        "partitions": partitions, "offered_per_s": rate, "achieved_per_s": achieved,
        "transactions": len(load.transaction_s),
        "transaction_ms_mean": 1000 * sum(load.transaction_s) / len(load.transaction_s),
        "expected_messages": runs * per_run_viewers * per_run, **delivered,
        # (each viewer's seq 0 came before the load)
        "load_s": wall, "messages_per_s": (delivered["delivered_messages"] - len(got["viewers"]))
        / wall, "gateway_cpu_s": cpu, "gateway_cores": cpu / wall,
        "gateway_rss_mb": {"ready": rss_idle / 2**20, "connected": rss_connected / 2**20,
                           "peak_during_load": rss_peak[0] / 2**20,
                           "peak_vmhwm": gateway.peak_rss / 2**20},
        "gateway_kib_per_client":
            (rss_connected - rss_idle) / 1024 / max(1, runs * per_run_viewers),
        # the clients measure their own CPU: asyncio reaps their process as soon as it exits,
        # so it cannot be read from outside after its last line
        "clients_process_cpu_s": got["cpu_s_during_load"], "clients_connect_s": got["connect_s"],
        "clients_loop_lateness_ms": got["loop_lateness_ms"],
        "machine_busy_cores": busy / wall, "clients_done": said,
    }


def code_state() -> dict[str, Any]:
    """The commit measured, and the files of the package that differ from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
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


def render(result: dict[str, Any]) -> str:
    code, where = result.get("code", {}), result["machine"]
    out = [f"bench gateway {result['started_at']} at {code.get('commit', '?')}"
           + (f" (changed: {', '.join(code['changed'])})" if code.get("changed") else "")
           + f": {where['cpus']} cores ({where['cpu_model']}) shared by the broker (Kafka "
           f"{result['broker']}), the gateway, the clients and the producer; load average "
           f"{where['load_average_at_start']} at the start"]
    first = result.get("first_event")
    if first:
        out += ["", f"first event of a run behind {first['earlier_records']:,} earlier "
                f"records on its partition ({first['repeats']} start-ups and readers, "
                f"{first['requests']} requests each):"]
        startup, reader = first["startup_s"], first["reader_ms"]["median"]
        out.append(table([
            ["figure", "median", "max", "whole run", "whole max", "x reader"],
            ["gateway start-up to caught up (s)", f"{startup['median']:.2f}",
             f"{startup['max']:.2f}", "-", "-", "-"],
            *([label, f"{s['median']:.1f}", f"{s['max']:.1f}", f"{s['whole_median']:.1f}",
               f"{s['whole_max']:.1f}", f"{s['median'] / reader:.4f}"]
              for label, s in (("first event, held in memory (ms)", first["held_ms"]),
                               ("first event, read back from Kafka (ms)", first["read_back_ms"]),
                               ("baseline: RunReader from offset 0 (ms)", first["reader_ms"])))]))
        out.append(f"  the reader takes {1 / first['held_x_reader']:,.0f}x the held and "
                   f"{1 / first['read_back_x_reader']:,.0f}x the read-back first event")
        out.append(f"  start-up: {first['startup_records_per_s']:,.0f} records/s; "
                   f"{first['store']['runs']:,} runs indexed, "
                   f"{first['store']['held_bytes'] / 2**20:.0f} MiB held; with a 1 KiB "
                   f"cache {first['startup_tiny_cache_s']:.2f} s")
    for fan in result.get("fanout", []):
        out += ["", f"fan-out: {fan['clients']:,} SSE clients ({fan['runs']} runs x "
                f"{fan['viewers_per_run']} viewers) on one gateway process, "
                f"{fan['records_per_run']} records per run, {fan['achieved_per_s']:,.0f} "
                f"records/s ({fan['transactions']} transactions, "
                f"{fan['transaction_ms_mean']:.1f} ms each), {fan['partitions']} partitions:"]
        out.append(table([
            ["lag after commit (ms)", "p50", "p99", "p999", "max", "samples"],
            *([label, *(f"{s.get(k, 0):.1f}" for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")),
               f"{s['samples']:,}"]
              for label, s in (("gateway -> SSE client", fan["lag"]),
                               ("baseline: read_committed consumer",
                                fan["baseline_reader_lag"])))]))
        ratio = fan["lag_p99_x_baseline"]
        out.append(f"  p99 x baseline: {ratio:.2f}" if ratio else "  p99 x baseline: -")
        rss, late = fan["gateway_rss_mb"], fan["clients_loop_lateness_ms"]
        out.append(f"  delivered {fan['delivered_messages']:,} of {fan['expected_messages']:,}"
                   f" messages ({fan['messages_per_s']:,.0f}/s), failures: {fan['failures']}")
        out.extend(f"    FAILURE {f}" for f in fan["failure_examples"])
        out.append(f"  gateway process: {fan['gateway_cores']:.2f} cores; RSS {rss['ready']:.0f}"
                   f" MiB ready, {rss['connected']:.0f} MiB with the clients connected "
                   f"({fan['gateway_kib_per_client']:.0f} KiB each), peak "
                   f"{rss['peak_vmhwm']:.0f} MiB")
        out.append(f"  clients process {fan['clients_process_cpu_s'] / fan['load_s']:.2f} "
                   f"cores (its loop late by p99 {late['p99']:.1f} ms, max {late['max']:.1f})"
                   f"; whole machine {fan['machine_busy_cores']:.2f} of {where['cpus']} cores "
                   "busy during the load")
        out.append("  p99 lag per second of load (ms): "
                   + " ".join(f"{v:.0f}" for v in fan["lag"].get("p99_by_second_ms", [])))
    out += ["", "goals:"]
    for goal, verdict in result["verdicts"].items():
        figures = ", ".join(f"{k} {v}" for k, v in verdict.items() if k != "met")
        out.append(f"  {goal}: {figures} -> {'met' if verdict['met'] else 'NOT met'}")
    return "\n".join(out)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with Session("bench-gw") as session:
        result: dict[str, Any] = {
            **started(), "quick": args.quick,
            "broker": broker_version(session.base.bootstrap_servers),
            "fd_limit": raise_fd_limit(65536), "code": code_state(),
        }
        if "first-event" in args.parts:
            result["first_event"] = await first_event_figures(
                session, args.earlier, args.repeats, args.requests)
        if "fanout" in args.parts:
            result["fanout"] = []
            for n, rate in enumerate(float(r) for r in args.rate.split(",") if r.strip()):
                say(f"fan-out: {args.clients:,} clients, {rate:,.0f} records/s")
                result["fanout"].append(await fanout_figures(
                    session, n, runs=args.runs, per_run_viewers=args.clients // args.runs,
                    rate=rate, seconds=args.seconds, txn_ms=args.txn_ms,
                    partitions=args.partitions))
    result["verdicts"] = verdicts(result)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    args = options(
        "bench gateway", argv, __doc__, quick_sizes=QUICK,
        earlier=(1_000_000, "records of other runs before the target run"),
        repeats=(5, "start-ups and reader runs"), requests=(20, "requests per gateway"),
        clients=1000, runs=100,
        rate=("200,500,1000", "records per second over all runs; several: one run each"),
        seconds=(20.0, "of load"), txn_ms=(25.0, "one transaction per"),
        partitions=(4, "of the fan-out topics"), parts="first-event,fanout",
        quick=(False, "tiny run: " + ", ".join(f"--{k} {v}" for k, v in QUICK.items())),
        out=Path("bench/results/gateway.json"))
    if args.clients % args.runs:
        raise SystemExit("--clients must be a multiple of --runs")
    result = asyncio.run(run(args))
    print(render(result))
    write_json(args.out, result)
    return 1 if sum(fan["failures"] for fan in result.get("fanout", [])) else 0
