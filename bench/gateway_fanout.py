"""Issue 19's second goal: many SSE clients on one gateway process, lag after the commit.

The gateway runs as deployed (``symfonic-stream gateway``, its own process, ``SYMFONIC_*``
only, ready by its ``/readyz``); the viewers run in a process of their own
(:mod:`bench.gateway_clients`); this process writes the envelopes with a *transactional*
producer, one small transaction every ``txn_ms``, recording for every (run, seq) the time
just after ``commit_transaction`` returned. First each run's seq 0 is committed and every
viewer must have received it (so all are connected and streaming); then the load: ``rate``
records per second over ``runs`` runs, round-robin, each run's last record its closing
``end``. Delivery lag = a viewer's receive time (``time.time()`` when the bytes arrived)
- the commit time of that record, for every seq after 0.

The baseline, in the same run: a plain ``read_committed`` aiokafka consumer
(:class:`bench.kafka_io.OutputReader`, in this process) reading the same topic, its lag
measured the same way: the least any reader of the topic could achieve.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import psutil
from aiokafka import AIOKafkaProducer

from bench.consumers import Consumer
from bench.gateway_ttfe import end_envelope, envelope
from bench.kafka_io import OutputReader, create_topics, prefix_settings
from bench.machine import machine_busy_seconds
from bench.progress import say
from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import transactional_producer_kwargs
from symfonic_stream.models.names import TopicNames
from symfonic_stream.runtime.workers import free_port


class GatewayProcess(Consumer):
    """``symfonic-stream gateway`` in its own process (metrics and probes on ``port``)."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        super().__init__("gateway", settings, log_dir)
        self.http_port = free_port()
        self.command = [sys.executable, "-m", "symfonic_stream", "gateway"]
        self.env.update(SYMFONIC_GATEWAY_PORT=str(self.http_port),
                        SYMFONIC_GATEWAY_HOST="127.0.0.1",
                        SYMFONIC_GATEWAY_RUN_WAIT_S="120")

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def lag_figures(lags: list[tuple[float, float]], since: float) -> dict[str, Any]:
    """p50/p99/... of ``(commit time, lag)`` samples, and the p99 per second of load (by
    commit time from ``since``): a rising series means the gateway fell behind."""
    ordered = sorted(lag for _, lag in lags)
    if not ordered:
        return {"samples": 0}
    seconds: dict[int, list[float]] = {}
    for at, lag in lags:
        seconds.setdefault(int(at - since), []).append(lag)
    by_second = [round(percentile(sorted(v), 0.99) * 1000, 1)
                 for _, v in sorted(seconds.items())]
    return {"samples": len(ordered), "min_ms": ordered[0] * 1000,
            "p50_ms": percentile(ordered, 0.5) * 1000, "p99_ms": percentile(ordered, 0.99) * 1000,
            "p999_ms": percentile(ordered, 0.999) * 1000, "max_ms": ordered[-1] * 1000,
            "p99_by_second_ms": by_second}


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
        started = time.perf_counter()
        await self.producer.begin_transaction()
        batch = list(records)
        for run, seq in batch:
            await self.producer.send(self.topic, self.value(run, seq),
                                     key=self.run_ids[run].encode())
        await self.producer.commit_transaction()
        now = time.time()
        self.transaction_s.append(time.perf_counter() - started)
        for key in batch:
            self.committed[key] = now

    async def paced(self, rate: float, txn_ms: float) -> float:
        """Every seq after 0 of every run at ``rate`` records/s; returns the achieved rate."""
        runs = len(self.run_ids)
        total = runs * (self.per_run - 1)
        self.load_started = time.time()
        started, done = time.perf_counter(), 0
        while done < total:
            due = min(total, int((time.perf_counter() - started) * rate) + 1)
            if due > done:
                await self.commit((i % runs, 1 + i // runs) for i in range(done, due))
                done = due
            await asyncio.sleep(max(0.0, started + (done / rate) - time.perf_counter(),
                                    txn_ms / 1000 - self.transaction_s[-1]))
        elapsed = time.perf_counter() - started
        return total / elapsed if elapsed > 0 else 0.0


def check_viewers(viewers: list[dict[str, Any]], run_index: dict[str, int], per_run: int,
                  committed: dict[tuple[int, int], float]
                  ) -> tuple[list[str], list[tuple[float, float]]]:
    """Every viewer got every seq once, in order: the failures (described) and the
    ``(commit time, lag)`` of every message after seq 0."""
    failures: list[str] = []
    lags: list[tuple[float, float]] = []
    expected = list(range(per_run))
    for n, viewer in enumerate(viewers):
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
    return failures, lags


async def _clients(port: int, runs_file: Path, viewers: int, out: Path, within: float
                   ) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gateway_clients", "--port", str(port),
        "--runs-file", str(runs_file), "--viewers", str(viewers), "--out", str(out),
        "--within", str(within), stdout=asyncio.subprocess.PIPE)


async def _line(proc: asyncio.subprocess.Process, within: float) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(within):
        return (await proc.stdout.readline()).decode().strip()


async def measure(base: Settings, prefix: str, *, runs: int, viewers: int, rate: float,
                  seconds: float, txn_ms: float, partitions: int) -> dict[str, Any]:
    settings = prefix_settings(base, prefix, partitions)
    await create_topics(settings)
    per_run = max(2, round(rate * seconds / runs) + 1)
    run_ids = [f"{prefix}-run-{n:04d}" for n in range(runs)]
    run_index = {run_id: n for n, run_id in enumerate(run_ids)}
    work = Path(tempfile.mkdtemp(prefix="symfonic-gateway-bench-"))
    (work / "runs.txt").write_text("\n".join(run_ids) + "\n")
    gateway = GatewayProcess(settings, work)
    gateway.start()
    load = Load(settings, run_ids, per_run)
    seen: dict[tuple[int, int], float] = {}

    def on_batch(records: list[Any], read_at: float) -> None:
        for record in records:
            parsed = orjson.loads(record.value)
            seen[(run_index[parsed["run_id"]], parsed["seq"])] = read_at

    reader = OutputReader(settings, [load.topic], partitions, on_batch)
    clients: asyncio.subprocess.Process | None = None
    try:
        await gateway.wait_ready()
        rss_idle = gateway.rss()
        await load.producer.start()
        await reader.start()
        await load.commit((run, 0) for run in range(runs))
        clients = await _clients(gateway.http_port, work / "runs.txt", viewers,
                                 work / "viewers.json", seconds * 4 + 120)
        said = await _line(clients, seconds * 4 + 150)
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
            f"({per_run} records per run), {viewers} viewers per run")
        achieved = await load.paced(rate, txn_ms)
        said = await _line(clients, seconds * 4 + 150)
        wall = time.perf_counter() - wall0
        cpu, busy = gateway.cpu_seconds() - cpu0, machine_busy_seconds() - busy0
        sampler.cancel()
        await clients.wait()
        await reader.wait_caught_up()
    finally:
        if clients is not None and clients.returncode is None:
            clients.kill()
            await clients.wait()
        await reader.stop()
        await load.producer.stop()
        gateway.sample_rss()
        gateway.stop()
    got = orjson.loads((work / "viewers.json").read_bytes())
    shutil.rmtree(work, ignore_errors=True)
    failures, lags = check_viewers(got["viewers"], run_index, per_run, load.committed)
    base_lags = [(load.committed[key], at - load.committed[key]) for key, at in seen.items()
                 if key[1] > 0 and key in load.committed]
    delivered = sum(len(v["seqs"]) for v in got["viewers"])
    since = load.load_started
    gw, floor = lag_figures(lags, since), lag_figures(base_lags, since)
    return {
        "runs": runs, "viewers_per_run": viewers, "clients": len(got["viewers"]),
        "records_per_run": per_run, "partitions": partitions, "offered_per_s": rate,
        "achieved_per_s": achieved, "transactions": len(load.transaction_s),
        "transaction_ms_mean": 1000 * sum(load.transaction_s) / len(load.transaction_s),
        "expected_messages": runs * viewers * per_run, "delivered_messages": delivered,
        "failures": len(failures), "failure_examples": failures[:10],
        "lag": gw, "baseline_reader_lag": floor,
        "lag_p99_x_baseline": gw["p99_ms"] / floor["p99_ms"] if floor.get("p99_ms") else None,
        # (each viewer's seq 0 came before the load)
        "load_s": wall, "messages_per_s": (delivered - len(got["viewers"])) / wall,
        "gateway_cpu_s": cpu, "gateway_cores": cpu / wall,
        "gateway_rss_mb": {"ready": rss_idle / 2**20, "connected": rss_connected / 2**20,
                           "peak_during_load": rss_peak[0] / 2**20,
                           "peak_vmhwm": gateway.peak_rss / 2**20},
        "gateway_kib_per_client": (rss_connected - rss_idle) / 1024 / max(1, runs * viewers),
        # the clients measure their own CPU: asyncio reaps their process as soon as it exits,
        # so it cannot be read from outside after its last line
        "clients_process_cpu_s": got["cpu_s_during_load"], "clients_connect_s": got["connect_s"],
        "clients_loop_lateness_ms": got["loop_lateness_ms"],
        "machine_busy_cores": busy / wall, "clients_done": said,
    }
