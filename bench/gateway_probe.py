"""What a token of another tenant can measure (issue 33 item 4): the gateway's answer to a
run of another tenant beside its answer to a run that does not exist.

    .venv/bin/python -m bench gateway_probe [--rounds 40] [--wait 0.5]

A gateway in this process (``SYMFONIC_GATEWAY_AUTH=jwt``, ``SYMFONIC_GATEWAY_RUN_WAIT_S``
``--wait``) tails a fresh prefix whose topics hold one run of tenant ``acme``. A ``globex``
token then asks, ``--rounds`` times and in a random order each round, for that run and for
an unknown run id of the same length, over a raw socket (``time.perf_counter`` from before
the TCP connect to the connection's close after the answer). Reported per kind: the
statuses, whether every body is the same but for the run id, and the times (median, p10,
p90, spread). It fails unless both answers are the same ``404``: a ``401`` says the
gateway refused the token itself, which measures nothing. The topics are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from pathlib import Path
from typing import Any

import jwt
import orjson
from aiokafka import AIOKafkaProducer
from pydantic import SecretStr

from bench.harness import options, say, write_json
from bench.kafka_io import Session
from bench.processes import serving_gateway
from bench.workload import end_envelope
from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import plain_producer_kwargs
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.models.names import TopicNames

SECRET = "bench-probe-secret-long-enough-for-hs256"
AUDIENCE = "bench-probe"
RUN, UNKNOWN = "acme-run-0001", "acme-run-0002"


def probe_settings(wait_s: float) -> dict[str, Any]:
    """The gateway's settings for the probe: JWTs of :data:`SECRET` for :data:`AUDIENCE`,
    an ephemeral port."""
    return {"gateway_port": 0, "gateway_host": "127.0.0.1", "gateway_auth": "jwt",
            "gateway_jwt_key": SecretStr(SECRET), "gateway_jwt_audience": AUDIENCE,
            "gateway_run_wait_s": wait_s, "metrics_port": 0}


def token(tenant: str) -> str:
    """A token of ``tenant`` the gateway accepts (``exp``, ``iat``, its audience) that may
    read runs."""
    now = int(time.time())
    return jwt.encode({"tenant": tenant, "scope": "runs:read", "aud": AUDIENCE, "iat": now,
                       "exp": now + 3600}, SECRET, algorithm="HS256")


async def _acme_run(settings: Settings) -> None:
    """One closed run of tenant acme on both run streams, as a projector writes it."""
    names = TopicNames(settings.topic_prefix)
    value = end_envelope(RUN, 0, time.time())
    producer = AIOKafkaProducer(**plain_producer_kwargs(settings, "bench-probe"))
    await producer.start()
    try:
        for topic in (names.stream_events, names.stream_chunks):
            await producer.send_and_wait(topic, value, key=RUN.encode(),
                                         headers=[(TENANT_HEADER, b"acme")])
    finally:
        await producer.stop()


async def _ask(port: int, run_id: str, bearer: str) -> tuple[float, bytes]:
    """Seconds to the whole answer (the connection closed), and the answer's bytes."""
    began = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: probe\r\n"
                     f"Authorization: Bearer {bearer}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
        return time.perf_counter() - began, answer
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
    timed: dict[str, tuple[list[float], list[bytes]]] = {RUN: ([], []), UNKNOWN: ([], [])}
    async with Session("bench-probe") as session:
        settings = await session.topics("p", 1, **probe_settings(wait_s))
        await _acme_run(settings)
        async with serving_gateway(settings) as gateway:
            bearer = token("globex")
            for n in range(rounds):
                order = [RUN, UNKNOWN]
                random.shuffle(order)
                for run_id in order:
                    seconds, answer = await _ask(gateway.port, run_id, bearer)
                    timed[run_id][0].append(seconds)
                    timed[run_id][1].append(answer)
                if (n + 1) % 10 == 0:
                    say(f"{n + 1}/{rounds} rounds")
    foreign, unknown = timed[RUN], timed[UNKNOWN]
    bodies = {_body(a).replace(UNKNOWN.encode(), RUN.encode()) for a in foreign[1] + unknown[1]}
    foreign_ms, unknown_ms = _summary(*foreign), _summary(*unknown)
    return {"rounds": rounds, "run_wait_s": wait_s, "another_tenants_run": foreign_ms,
            "unknown_run": unknown_ms, "identical_answers": len(bodies) == 1,
            "median_difference_ms": round(foreign_ms["median_ms"] - unknown_ms["median_ms"], 2)}


def main(argv: list[str] | None = None) -> int:
    args = options("bench gateway_probe", argv, __doc__, rounds=40,
                   wait=(0.5, "SYMFONIC_GATEWAY_RUN_WAIT_S"),
                   out=Path("bench/results/gateway-probe.json"))
    result = asyncio.run(run(args.rounds, args.wait))
    write_json(args.out, result)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    statuses = result["another_tenants_run"]["statuses"] + result["unknown_run"]["statuses"]
    return 0 if result["identical_answers"] and set(statuses) == {"404"} else 1

