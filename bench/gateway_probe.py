"""What a token of another tenant can measure (issue 33 item 4): the gateway's answer to a
run of another tenant beside its answer to a run that does not exist.

A gateway in this process (``SYMFONIC_GATEWAY_AUTH=jwt``, ``SYMFONIC_GATEWAY_RUN_WAIT_S``
``--wait``) tails a fresh prefix whose topics hold one run of tenant ``acme``. A ``globex``
token then asks, ``--rounds`` times and in a random order each round, for that run and for
an unknown run id of the same length, over a raw socket (``time.perf_counter`` from before
the TCP connect to the connection's close after the answer). Reported per kind: the
statuses, whether every body is the same but for the run id, and the times (median, p10,
p90, spread). The topics are deleted afterwards.

    .venv/bin/python -m bench.gateway_probe [--rounds 40] [--wait 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import orjson
from aiokafka import AIOKafkaProducer
from pydantic import SecretStr

from bench.kafka_io import cleanup, create_topics, prefix_settings
from bench.progress import say
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.gateway.server import Gateway
from symfonic_stream.kafka.clients import plain_producer_kwargs
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.models.names import TopicNames

SECRET = "bench-probe-secret-long-enough-for-hs256"
AUDIENCE = "bench-probe"
RUN, UNKNOWN = "acme-run-0001", "acme-run-0002"


async def _acme_run(settings: Settings) -> None:
    """One closed run of tenant acme on both output topics, as a projector writes it."""
    names = TopicNames(settings.topic_prefix)
    value = orjson.dumps({"run_id": RUN, "seq": 0, "source_index": 0, "ts": time.time(),
                          "end": {"status": "completed", "error": None}})
    producer = AIOKafkaProducer(**plain_producer_kwargs(settings, "bench-probe"))
    await producer.start()
    try:
        for topic in (names.stream_events, names.stream_chunks):
            await producer.send_and_wait(topic, value, key=RUN.encode(),
                                         headers=[(TENANT_HEADER, b"acme")])
    finally:
        await producer.stop()


async def _ask(port: int, run_id: str, token: str) -> tuple[float, bytes]:
    """Seconds to the whole answer (the connection closed), and the answer's bytes."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: probe\r\n"
                     f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
        return time.perf_counter() - started, answer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _summary(seconds: list[float], answers: list[bytes]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in seconds)
    deciles = statistics.quantiles(ms, n=10)
    statuses = sorted({a.split(b" ", 2)[1].decode() for a in answers})
    return {"statuses": statuses, "median_ms": round(statistics.median(ms), 2),
            "p10_ms": round(deciles[0], 2), "p90_ms": round(deciles[-1], 2),
            "stdev_ms": round(statistics.stdev(ms), 2), "n": len(ms)}


def _body(answer: bytes) -> bytes:
    """The answer without its Date header (the clock's, not the run's)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def run(rounds: int, wait_s: float) -> dict[str, Any]:
    base = load_settings()
    prefix = f"bench-probe-{uuid.uuid4().hex[:8]}"
    settings = prefix_settings(base, prefix, 1).model_copy(update={
        "gateway_port": 0, "gateway_host": "127.0.0.1", "gateway_auth": "jwt",
        "gateway_jwt_key": SecretStr(SECRET), "gateway_jwt_audience": AUDIENCE,
        "gateway_run_wait_s": wait_s, "metrics_port": 0})
    try:
        await create_topics(settings)
        await _acme_run(settings)
        gateway = Gateway(settings)
        await gateway.start()
        serving = asyncio.create_task(gateway.serve())
        try:
            await asyncio.wait_for(asyncio.gather(
                *(tail.caught_up.wait() for tail in gateway.tails.values())), 60)
            now = int(time.time())
            token = jwt.encode({"tenant": "globex", "scope": "runs:read", "aud": AUDIENCE,
                                "iat": now, "exp": now + 3600}, SECRET, algorithm="HS256")
            timed: dict[str, tuple[list[float], list[bytes]]] = {RUN: ([], []), UNKNOWN: ([], [])}
            for n in range(rounds):
                order = [RUN, UNKNOWN]
                random.shuffle(order)
                for run_id in order:
                    seconds, answer = await _ask(gateway.port, run_id, token)
                    timed[run_id][0].append(seconds)
                    timed[run_id][1].append(answer)
                if (n + 1) % 10 == 0:
                    say(f"{n + 1}/{rounds} rounds")
        finally:
            gateway.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(serving, 15)
            await gateway.close()
    finally:
        say(f"deleted {await cleanup(base, [prefix])} benchmark topics")
    foreign, unknown = timed[RUN], timed[UNKNOWN]
    bodies = {_body(a).replace(UNKNOWN.encode(), RUN.encode()) for a in foreign[1] + unknown[1]}
    foreign_ms, unknown_ms = _summary(*foreign), _summary(*unknown)
    return {"rounds": rounds, "run_wait_s": wait_s, "another_tenants_run": foreign_ms,
            "unknown_run": unknown_ms, "identical_answers": len(bodies) == 1,
            "median_difference_ms": round(foreign_ms["median_ms"] - unknown_ms["median_ms"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_probe",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--wait", type=float, default=0.5, help="SYMFONIC_GATEWAY_RUN_WAIT_S")
    parser.add_argument("--out", type=Path, default=Path("bench/results/gateway-probe.json"))
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.rounds, args.wait))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0 if result["identical_answers"] else 1


if __name__ == "__main__":
    sys.exit(main())
