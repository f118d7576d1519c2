"""The SSE gateway against issues 19's and 49's goals, each against a baseline of the same
run (docs/benchmarks.md, "The gateway"): the **first event** of a run behind ``--earlier``
records (held, read back) against ``RunReader`` from offset 0; **fan-out** to ``--clients``
SSE clients in ``--client-processes`` processes, every seq once, its lag against a plain
``read_committed`` consumer's, with a slow viewer of a busier run that must get every
terminal and the whole text; with ``--baseline-tree``, each case on that checkout's gateway
first, then on this one's."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
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
from bench.sse_client import ViewersProcesses, first_event, raise_fd_limit
from bench.workload import end_envelope, envelope
from symfonic_stream.config import Settings
from symfonic_stream.gateway.server import Gateway
from symfonic_stream.kafka.clients import transactional_producer_kwargs
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.reader import RunReader

FIRST_EVENT_GOAL_MS, LAG_GOAL_MS, IDLE_KIB_GOAL = 100.0, 250.0, 16.0
QUICK = {"earlier": 20_000, "repeats": 2, "requests": 5, "clients": 50, "runs": 10,
         "rate": "200", "seconds": 3.0, "client_processes": 1}
#: Records per earlier run (the last one its ``end``), and runs interleaved at a time.
RUN_LEN, WIDTH, TARGET_TEXTS = 100, 200, 5
#: The smallest ``SYMFONIC_GATEWAY_CACHE_BYTES`` allowed: the target's first records go.
TINY_CACHE_BYTES = 1024
#: The busier run the slow viewer reads: records a second, and its fast viewers.
HOT_RATE, HOT_VIEWERS = 150.0, 2


def text(seq: int) -> str:
    """The text of a delta of seq ``seq``: a few tokens' worth."""
    return f"<{seq}> a few tokens "

_WORDS = ("the ", "model ", "streams ", "a ", "token ", "and ", "then ", "tool ", "result ",
          "reads ", "Kafka ", "partition ", "offset ", "quickly, ", "because ", "of ")


#: What the gateway process runs: the code of a tree (the baseline checkout's, or this one's),
#: saying in its log each collection of its oldest generation over 20 ms (a stall that every
#: viewer's lag shows).
GATEWAY = """import gc, runpy, sys, time
sys.path.insert(0, sys.argv.pop(1))
began = [0.0]
def pause(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    elif info["generation"] == 2 and time.perf_counter() - began[0] > 0.02:
        print(f"gc2 {(time.perf_counter() - began[0]) * 1000:.0f}", file=sys.stderr, flush=True)
gc.callbacks.append(pause)
runpy.run_module("symfonic_stream", run_name="__main__")
"""


def earlier_records(count: int, seed: int = 19) -> Iterator[tuple[bytes, bytes]]:
    """``count`` envelopes of other runs, interleaved as a projector writes them."""
    rng = random.Random(seed)
    texts = ["".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 30)))[:200]
             for _ in range(997)]
    ts, made = time.time() - 3600, 0
    for block in itertools.count():
        runs = [f"run-{block:05d}-{n:03d}-{rng.getrandbits(32):08x}" for n in range(WIDTH)]
        for seq, run_id in itertools.product(range(RUN_LEN), runs):
            if made == count:
                return
            ts += 0.0001
            kind = "thinking_delta" if (made * 7) % 10 < 2 else "text_delta"
            yield run_id.encode(), (end_envelope(run_id, seq, ts) if seq == RUN_LEN - 1 else
                                    envelope(run_id, seq, ts, kind, texts[made % len(texts)]))
            made += 1


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "max": max(values), "all": values}


async def _requests(gateway: Gateway, run_id: str, count: int) -> tuple[list[float], int]:
    """``count`` requests for the run: ms to the first event each; where it is held from."""
    run = gateway.tails["events"].store.get(run_id)
    if run is None:
        raise RuntimeError(f"the gateway has not indexed {run_id}")
    held_from, path, took = run.held_from, f"/v1/runs/{run_id}/events", []
    for _ in range(count):
        first_s, seq, _, seqs = await first_event("127.0.0.1", gateway.port, path)
        if seq != 0 or seqs != TARGET_TEXTS + 1:
            raise RuntimeError(f"{path}: first seq {seq}, {seqs} messages")
        took.append(first_s * 1000)
        await asyncio.sleep(0.05)
    return took, held_from


async def _reader(settings: Settings, run_id: str) -> float:
    began = time.perf_counter()
    async with RunReader(run_id, settings) as reader:
        async for record in reader:
            if record.seq != 0:
                raise RuntimeError(f"reader: first seq {record.seq}")
            return (time.perf_counter() - began) * 1000
    raise RuntimeError("reader: no record")


async def first_event_figures(session: Session, earlier: int, repeats: int,
                              requests: int) -> dict[str, Any]:
    settings = await session.topics("ttfe", 1, gateway_port=0, gateway_host="127.0.0.1")
    topic = TopicNames(settings.topic_prefix).stream_events
    say(f"first event: writing {earlier:,} earlier records to {topic}")
    publish_s = await publish(settings, earlier_records(earlier), topic)
    target, now = f"target-{settings.topic_prefix}", time.time()
    await publish(settings, [*((target.encode(), envelope(target, seq, now, "text_delta",
                                                          f"part {seq} "))
                               for seq in range(TARGET_TEXTS)),
                             (target.encode(), end_envelope(target, TARGET_TEXTS, now))], topic)
    ends = await end_offsets(settings, topic, 1)
    startup: list[float] = []
    for n in range(repeats):
        began = time.perf_counter()
        async with serving_gateway(settings) as gateway:
            startup.append(time.perf_counter() - began)
            say(f"  start-up {n + 1}/{repeats}: {startup[-1]:.2f} s")
            if n == repeats - 1:
                held, held_from = await _requests(gateway, target, requests)
                runs = len(gateway.tails["events"].store)
    if held_from != 0:
        raise RuntimeError(f"seqs below {held_from} not held: raise the cache")
    async with serving_gateway(settings.model_copy(
            update={"gateway_cache_bytes": TINY_CACHE_BYTES})) as gateway:
        back, back_from = await _requests(gateway, target, requests)
    if back_from == 0:
        raise RuntimeError("the 1 KiB cache still holds the target's first record")
    reader = [await _reader(settings, target) for _ in range(repeats)]
    base = statistics.median(reader)
    return {"earlier_records": earlier, "partition_records": ends[0], "publish_s": publish_s,
            "runs_indexed": runs, "startup_s": summary(startup),
            "startup_records_per_s": ends[0] / statistics.median(startup),
            "held_ms": summary(held), "read_back_ms": summary(back),
            "reader_ms": summary(reader), "held_x_reader": statistics.median(held) / base,
            "read_back_x_reader": statistics.median(back) / base}


def lag_figures(lags: list[tuple[float, float]], since: float) -> dict[str, Any]:
    """p50/p99/... of ``(commit time, lag)`` samples, and the p99 per second of load."""
    ordered = sorted(lag for _, lag in lags)
    if not ordered:
        return {"samples": 0}
    return {"samples": len(ordered), **{f"{name}_ms": rank(ordered, share) * 1000 for name, share
                                        in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))},
            "max_ms": ordered[-1] * 1000,
            "p99_by_second_ms": p99_by_second((at - since, lag * 1000) for at, lag in lags)}


class Load:
    """The transactional writer of the runs' envelopes, timing every commit. The last run
    is the busier one: text deltas, a ``usage`` every tenth, a pause halfway."""

    def __init__(self, settings: Settings, run_ids: list[str], per_run: int,
                 hot: int) -> None:
        self.topic = TopicNames(settings.topic_prefix).stream_events
        self.run_ids, self.lengths = run_ids, [per_run] * (len(run_ids) - 1) + [hot]
        self.producer = AIOKafkaProducer(**transactional_producer_kwargs(
            settings, f"{settings.topic_prefix}-load"))
        #: (run index, seq) -> time.time() just after its transaction's commit returned.
        self.committed: dict[tuple[int, int], float] = {}
        self.transaction_s: list[float] = []
        self.load_started = 0.0

    def value(self, run: int, seq: int) -> bytes:
        run_id, last, ts = self.run_ids[run], self.lengths[run] - 1, time.time()
        if seq == last:
            return end_envelope(run_id, seq, ts)
        if run == len(self.run_ids) - 1 and seq == last // 2 + 1:
            return orjson.dumps({"run_id": run_id, "seq": seq, "source_index": seq, "ts": ts,
                                 "end": {"status": "paused", "error": None}})
        hot = run == len(self.run_ids) - 1
        kind = ("usage" if hot and seq % 10 == 5 else "ask_user" if hot and seq == last // 2
                else "text_delta")
        return envelope(run_id, seq, ts, kind, text(seq))

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
        self.committed.update(dict.fromkeys(batch, now))

    async def paced(self, rate: float, txn_ms: float) -> float:
        """Every seq after 0 of every run at ``rate`` records/s over the regular runs (and
        :data:`HOT_RATE` for the busier one); returns the regular runs' achieved rate."""
        runs = len(self.run_ids) - 1
        total = runs * (self.lengths[0] - 1)
        due = sorted([(i / rate, i % runs, 1 + i // runs) for i in range(total)]
                     + [(s / HOT_RATE, runs, s) for s in range(1, self.lengths[-1])])
        self.load_started, began, done = time.time(), time.perf_counter(), 0
        while done < len(due):
            now = time.perf_counter() - began
            upto = next((n for n in range(done, len(due)) if due[n][0] > now), len(due))
            if upto > done:
                await self.commit((run, seq) for _, run, seq in due[done:upto])
                done = upto
            await asyncio.sleep(max(txn_ms / 1000 - self.transaction_s[-1], 0.001))
        return total / (time.perf_counter() - began)


def delivery(got: dict[str, Any], run_index: dict[str, int], load: Load,
             seen: dict[tuple[int, int], float]) -> dict[str, Any]:
    """Every viewer got every seq once and in order (else a failure, described), the lag
    after the commit of every regular run's message after seq 0 (the viewers', and the plain
    reader's that ``seen`` timed), and what the slow viewer got."""
    failures, lags, committed = [], [], load.committed
    hot = len(load.run_ids) - 1
    for n, viewer in enumerate(got["viewers"]):
        run, seqs = run_index[viewer["run"]], viewer["seqs"]
        if seqs != list(range(load.lengths[run])) or viewer["error"]:
            failures.append(f"viewer {n} of {viewer['run']}: {len(seqs)} messages, "
                            f"{len(seqs) - len(set(seqs))} repeated {viewer['error']}")
        lags += [(committed[(run, seq)], at - committed[(run, seq)])
                 for seq, at in zip(seqs, viewer["times"], strict=True)
                 if seq > 0 and run != hot and (run, seq) in committed]
    floor = lag_figures([(committed[key], at - committed[key]) for key, at in seen.items()
                         if key[1] > 0 and key[0] != hot and key in committed], load.load_started)
    lag = lag_figures(lags, load.load_started)
    slow = got["slow"] or {"messages": [], "error": "no slow viewer"}
    ids = [m[0] for m in slow["messages"]]
    texts = "".join(orjson.loads(d)["event"]["text"] for _, e, d, _ in slow["messages"]
                    if e == "text_delta")
    last = load.lengths[hot] - 1
    kept = [s for s in range(last + 1)
            if orjson.loads(load.value(hot, s)).get("event", {}).get("type") != "text_delta"]
    whole = "".join(text(s) for s in range(last) if s not in kept)
    return {"clients": len(got["viewers"]),
            "delivered_messages": sum(len(v["seqs"]) for v in got["viewers"]),
            "failures": len(failures), "failure_examples": failures[:10], "lag": lag,
            "baseline_reader_lag": floor, "lag_p99_x_baseline":
            lag.get("p99_ms", 0) / floor["p99_ms"] if floor.get("p99_ms") else None,
            "slow": {"messages": len(ids), "of": last + 1, "error": slow["error"],
                     "ids_grow": ids == sorted(set(ids)), "whole_text": texts == whole,
                     "terminals_kept": [s for s in kept if s % 10 != 5 and s not in ids],
                     "usage_shed": sum(s % 10 == 5 and s not in ids for s in kept),
                     "end_lag_ms": 1000 * (slow["messages"][-1][3] - committed[(hot, last)])
                     if ids and ids[-1] == last else None}}


async def fanout_figures(session: Session, n: int, tree: str | None, args: Any,
                         rate: float) -> dict[str, Any]:
    settings = await session.topics(f"fan{n}", args.partitions)
    runs, seconds = args.runs, args.seconds
    per_run = max(2, round(rate * seconds / runs) + 1)
    run_ids = [f"{settings.topic_prefix}-run-{i:04d}" for i in range(runs + 1)]
    run_index = {run_id: i for i, run_id in enumerate(run_ids)}
    work, gateway = session.log_dir, GatewayProcess(settings, session.log_dir)
    # As deployed, room made for the clients (its file limit: this process's, raised).
    gateway.env.update(SYMFONIC_GATEWAY_MAX_CLIENTS=str(args.clients + 100),
                       SYMFONIC_GATEWAY_MAX_CONNECTIONS=str(args.clients + 200))
    gateway.command[1:3] = ["-c", GATEWAY, tree or "."]
    gateway.start()
    load = Load(settings, run_ids, per_run, int(HOT_RATE * seconds))
    seen: dict[tuple[int, int], float] = {}

    def on_batch(records: list[Any], read_at: float) -> None:
        for record in records:
            parsed = orjson.loads(record.value)
            seen[(run_index[parsed["run_id"]], parsed["seq"])] = read_at

    reader = OutputReader(settings, [load.topic], args.partitions, on_batch)
    clients = ViewersProcesses(args.client_processes, seconds * 4 + 240, work / f"viewers{n}")
    try:
        await gateway.wait_ready()
        rss_idle = gateway.rss()
        await load.producer.start()
        await reader.start()
        await load.commit((run, 0) for run in range(runs + 1))
        said = await clients.start(gateway.http_port, [
            *((run_id, args.clients // runs) for run_id in run_ids[:-1]),
            (run_ids[-1], HOT_VIEWERS)], run_ids[-1])
        say(f"  viewers: {said}")
        if "failed" in said:
            raise RuntimeError(f"the viewers did not all start: {said}")
        await asyncio.sleep(2.0)  # (idle: what a connected client costs)
        rss_connected = gateway.rss()
        cpu0, busy0, wall0 = gateway.cpu_seconds(), machine_busy_seconds(), time.perf_counter()
        say(f"  load: {rate:,.0f} records/s over {runs} runs for {seconds:g} s "
            f"({per_run} records per run), {args.clients // runs} viewers per run")
        achieved = await load.paced(rate, args.txn_ms)
        await asyncio.sleep(1.0)  # (the last records' sends: the load's, not the slow one's)
        wall = time.perf_counter() - wall0
        cpu, busy = gateway.cpu_seconds() - cpu0, machine_busy_seconds() - busy0
        said = await clients.lines()
        got = await clients.close(kill=False)
        await reader.wait_caught_up()
    finally:
        await clients.close()
        await reader.stop()
        await load.producer.stop()
        gateway.sample_rss()
        gateway.stop()
    delivered = delivery(got, run_index, load, seen)
    return {"side": "before" if tree else "after", "runs": runs, "partitions": args.partitions,
            "viewers_per_run": args.clients // runs, "records_per_run": per_run,
            "offered_per_s": rate, "achieved_per_s": achieved,
            "transactions": len(load.transaction_s), **delivered,
            "expected_messages": args.clients * per_run + HOT_VIEWERS * load.lengths[-1],
            "load_s": wall, "gc2_ms": [int(line[4:]) for line in gateway.log_path.read_text(
                errors="replace").splitlines() if line.startswith("gc2 ")],
            "messages_per_s": (delivered["delivered_messages"] - args.clients - HOT_VIEWERS)
            / wall,
            "gateway_cores": cpu / wall, "machine_busy_cores": busy / wall,
            "gateway_rss_mb": {"ready": rss_idle / 2**20, "connected": rss_connected / 2**20,
                               "peak_vmhwm": gateway.peak_rss / 2**20},
            "gateway_kib_per_client": (rss_connected - rss_idle) / 1024 / (args.clients + 3),
            "clients_cores": got["cpu_s_during_load"] / wall,
            "clients_loop_late_p99_ms": got["loop_late_p99_ms"], "clients_done": said}


RATIOS: dict[str, Callable[[dict[str, Any]], float]] = {
    "p99": lambda f: f["lag"].get("p99_ms", 0), "gateway_cores": lambda f: f["gateway_cores"],
    "kib_per_client": lambda f: f["gateway_kib_per_client"]}


def ratios(fans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per rate, this tree's figure over the baseline tree's of the same round: each round's
    and their median."""
    found: dict[str, dict[str, Any]] = {}
    for before, after in itertools.pairwise(fans):
        if before["side"] == "before" and after["side"] == "after":
            rate = found.setdefault(f"{after['offered_per_s']:g}", {k: [] for k in RATIOS})
            for name, figure in RATIOS.items():
                rate[name].append(round(figure(after) / max(figure(before), 1e-9), 3))
    return {rate: {name: {"rounds": got, "median": statistics.median(got)}
                   for name, got in figures.items()} for rate, figures in found.items()}


def verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each goal: the figures it is judged by, and whether it was met."""
    found: dict[str, dict[str, Any]] = {}
    for name in ("held", "read_back") if result.get("first_event") else ():
        figure = result["first_event"][f"{name}_ms"]
        found[f"first_event_{name} < {FIRST_EVENT_GOAL_MS:g} ms"] = {
            "median_ms": round(figure["median"], 1), "max_ms": round(figure["max"], 1),
            "met": figure["max"] < FIRST_EVENT_GOAL_MS}
    for fan in result.get("fanout", []):
        complete = not fan["failures"] and fan["delivered_messages"] == fan["expected_messages"]
        p99, kib, slow = fan["lag"].get("p99_ms", 1e9), fan["gateway_kib_per_client"], fan["slow"]
        found[f"{fan['side']}: {fan['clients']:,} clients at {fan['messages_per_s']:,.0f} "
              f"messages/s: p99 < {LAG_GOAL_MS:g} ms, every seq once, <= {IDLE_KIB_GOAL:g} "
              "KiB per idle client, the slow viewer every terminal and the whole text"] = {
            "p99_ms": round(p99, 1), "complete": complete, "kib_per_client": round(kib, 1),
            "met": complete and p99 < LAG_GOAL_MS and kib <= IDLE_KIB_GOAL
            and slow["whole_text"] and not slow["terminals_kept"] and slow["ids_grow"]}
    return found


def render(result: dict[str, Any]) -> str:
    where, first = result["machine"], result.get("first_event")
    out = [f"bench gateway {result['started_at']} at {result['code']}: {where['cpus']} cores "
           f"shared by the broker, the gateway, the clients and the producer; load average "
           f"{where['load_average_at_start']}; fd limit {result['fd_limit']}"]
    if first:
        reader = first["reader_ms"]["median"]
        out += ["", f"first event behind {first['earlier_records']:,} records (ms), start-up "
                f"{first['startup_s']['median']:.1f} s:", table([
                    ["figure", "median", "max", "x reader"], *(
                        [label, f"{s['median']:.1f}", f"{s['max']:.1f}",
                         f"{s['median'] / reader:.4f}"] for label, s in (
                            ("held in memory", first["held_ms"]),
                            ("read back", first["read_back_ms"]),
                            ("RunReader from offset 0", first["reader_ms"])))])]
    for fan in result.get("fanout", []):
        slow = fan["slow"]
        out += ["", f"{fan['side']}: {fan['clients']:,} clients ({fan['runs']} runs x "
                f"{fan['viewers_per_run']}), {fan['achieved_per_s']:,.0f} records/s, "
                f"{fan['messages_per_s']:,.0f} messages/s; lag after commit (ms):", table([
                    ["", "p50", "p99", "p999", "max"], *(
                        [label, *(f"{s.get(k, 0):.1f}" for k in ("p50_ms", "p99_ms", "p999_ms",
                                                                 "max_ms"))]
                        for label, s in (("gateway -> client", fan["lag"]),
                                         ("consumer", fan["baseline_reader_lag"])))]),
                f"  delivered {fan['delivered_messages']:,} of {fan['expected_messages']:,}, "
                f"failures {fan['failures']}; gateway {fan['gateway_cores']:.2f} cores, "
                f"{fan['gateway_kib_per_client']:.1f} KiB per idle client, peak "
                f"{fan['gateway_rss_mb']['peak_vmhwm']:.0f} MiB; clients "
                f"{fan['clients_cores']:.2f} cores (loop late p99 "
                f"{fan['clients_loop_late_p99_ms']:.0f} ms); machine "
                f"{fan['machine_busy_cores']:.2f} cores; its oldest generation's collections "
                f"over 20 ms: {fan['gc2_ms']} ms",
                f"  slow viewer: {slow['messages']} messages of {slow['of']} records, whole "
                f"text {slow['whole_text']}, terminals missing {slow['terminals_kept']}, "
                f"usage shed {slow['usage_shed']}, end {slow['end_lag_ms'] or 0:.0f} ms after "
                f"its commit {slow['error']}", *(f"    FAILURE {f}" for f in
                                                  fan["failure_examples"])]
    out += [f"after / before at {rate} records/s: " + ", ".join(
        f"{name} {r['median']:.2f} (rounds {r['rounds']})" for name, r in figures.items())
        for rate, figures in result["after_x_before"].items()]
    return "\n".join(out + ["", "goals:"] + [
        f"  {goal}: {', '.join(f'{k} {v}' for k, v in verdict.items() if k != 'met')} -> "
        f"{'met' if verdict['met'] else 'NOT met'}"
        for goal, verdict in result["verdicts"].items()])


async def run(args: Any, commit: str) -> dict[str, Any]:
    async with Session("bench-gw") as session:
        result: dict[str, Any] = {**started(), "quick": args.quick, "code": commit,
                                  "broker": broker_version(session.base.bootstrap_servers),
                                  "fd_limit": raise_fd_limit(65536), "fanout": []}
        if result["fd_limit"] < args.clients + 1000:
            say(f"the file limit ({result['fd_limit']}) stops {args.clients:,} clients")
        if "first-event" in args.parts:
            result["first_event"] = await first_event_figures(
                session, args.earlier, args.repeats, args.requests)
        cases = [float(r) for r in args.rate.split(",") if r.strip()] if "fanout" in \
            args.parts else []
        for n, (rnd, rate, tree) in enumerate(itertools.product(range(args.rounds), cases, [
                *([args.baseline_tree] if args.baseline_tree else []), None])):
            say(f"fan-out round {rnd + 1} ({tree or 'this tree'}): {args.clients:,} clients, "
                f"{rate:,.0f} records/s")
            result["fanout"].append({"round": rnd + 1, **await fanout_figures(
                session, n, tree, args, rate)})
    result["after_x_before"] = ratios(result["fanout"])
    result["verdicts"] = verdicts(result)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    args = options(
        "bench gateway", argv, __doc__, quick_sizes=QUICK,
        earlier=(1_000_000, "records of other runs before the target run"),
        repeats=(5, "start-ups and reader runs"), requests=(20, "requests per gateway"),
        clients=1000, runs=100, client_processes=(4, "processes the clients are spread over"),
        rate=("200,500,1000", "records per second over all runs; several: one run each"),
        seconds=(20.0, "of load"), txn_ms=(25.0, "one transaction per"),
        partitions=(4, "of the fan-out topics"), parts="first-event,fanout", rounds=1,
        baseline_tree=("", "a checkout of the code to compare (its gateway runs each case "
                       "first)"),
        quick=(False, "tiny run: " + ", ".join(f"--{k} {v}" for k, v in QUICK.items())),
        out=Path("bench/results/gateway.json"))
    if args.clients % args.runs:
        raise SystemExit("--clients must be a multiple of --runs")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                            capture_output=True, check=False).stdout.strip()
    result = asyncio.run(run(args, commit))
    print(render(result))
    write_json(args.out, result)
    return 1 if sum(fan["failures"] for fan in result["fanout"] if fan["side"] == "after") else 0
