"""The fan-out benchmark's viewers, in a process of their own (``bench.gateway`` starts it).

    python -m bench.gateway_clients --port P --runs-file F --viewers V --out O

Opens ``V`` connections per run id of ``F`` (one per line) to the gateway's
``/v1/runs/<id>/events``, each a :class:`bench.sse_client.Viewer` recording the seq and
arrival time (``time.time()``) of every ``id:`` line. It prints ``connected <n> <s>`` once
every viewer has received its first message (the parent starts the load then), waits until
the gateway has closed every stream (after the run's closing end) or ``--within`` seconds,
writes every viewer's seqs and times to ``--out`` (JSON) and prints ``done``. Separate from
the benchmark's producer so that its timestamps of commits are not delayed by a thousand
sockets' reads, and from the gateway so that neither shares the other's event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.sse_client import Viewer, request

#: Connections opened at once while connecting.
CONNECT_AT_ONCE = 100


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (up to the hard limit); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


async def run(args: argparse.Namespace, run_ids: list[str]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    viewers: list[tuple[str, Viewer, asyncio.Future[None]]] = []
    started = time.perf_counter()
    pending = [(run_id, n) for run_id in run_ids for n in range(args.viewers)]
    for start in range(0, len(pending), CONNECT_AT_ONCE):
        batch = []
        for run_id, _ in pending[start:start + CONNECT_AT_ONCE]:
            first: asyncio.Future[None] = loop.create_future()
            payload = request(args.host, args.port, f"/v1/runs/{run_id}/events")

            def viewer(payload: bytes = payload, first: asyncio.Future[None] = first) -> Viewer:
                return Viewer(payload, first)

            batch.append((run_id, first, loop.create_connection(viewer, args.host, args.port)))
        made = await asyncio.gather(*(connect for _, _, connect in batch))
        for (run_id, first, _), (_, protocol) in zip(batch, made, strict=True):
            viewers.append((run_id, protocol, first))
    connected_s = time.perf_counter() - started
    firsts = [first for _, _, first in viewers]
    try:
        async with asyncio.timeout(args.within):
            await asyncio.gather(*firsts)
        print(f"connected {len(viewers)} {time.perf_counter() - started:.3f}", flush=True)
    except TimeoutError:
        got = sum(1 for f in firsts if f.done())
        print(f"failed {got} of {len(viewers)} got a first message", flush=True)
    cpu_at_load = time.process_time()
    lateness: list[float] = []
    monitor = asyncio.create_task(_watch_loop(lateness))
    try:
        async with asyncio.timeout(args.within):
            await asyncio.gather(*(v.done for _, v, _ in viewers))
    except TimeoutError:
        pass
    monitor.cancel()
    lateness.sort()
    for _, v, _ in viewers:
        if not v.done.done():
            v.error = v.error or "still open at the deadline"
            v.close()
    return {
        "connect_s": connected_s,
        "cpu_s_during_load": time.process_time() - cpu_at_load,
        "loop_lateness_ms": {
            "p50": lateness[len(lateness) // 2] * 1000 if lateness else 0.0,
            "p99": lateness[int(len(lateness) * 0.99)] * 1000 if lateness else 0.0,
            "max": lateness[-1] * 1000 if lateness else 0.0},
        "viewers": [{"run": run_id, "seqs": v.seqs, "times": v.times, "error": v.error}
                    for run_id, v, _ in viewers],
    }


async def _watch_loop(lateness: list[float], tick_s: float = 0.01) -> None:
    """How late this process's event loop wakes a 10 ms sleep: a late loop stamps its
    receive times late (the lag is then partly the clients', not the gateway's)."""
    while True:
        due = time.perf_counter() + tick_s
        await asyncio.sleep(tick_s)
        lateness.append(max(0.0, time.perf_counter() - due))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_clients",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--runs-file", type=Path, required=True)
    parser.add_argument("--viewers", type=int, default=10)
    parser.add_argument("--within", type=float, default=300.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    raise_fd_limit(65536)
    run_ids = [line.strip() for line in args.runs_file.read_text().splitlines()
               if line.strip()]
    result = asyncio.run(run(args, run_ids))
    args.out.write_bytes(orjson.dumps(result))
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
