"""A consumer started before its Kafka is reachable waits for it (contract §8, issue 13).

In Kubernetes the pods often start before the brokers answer. The consumer must wait with
back-off, one log line per attempt and no traceback, ``/readyz`` failing with the reason and
``/healthz`` alive, and carry on once Kafka answers; after ``SYMFONIC_STARTUP_TIMEOUT_S`` it
exits 1 with one clear message.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import orjson
import pytest

from symfonic_stream.models.names import TopicNames

from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    TopicReader,
    cli_path,
    consumer_env,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
)
from .tcp_proxy import TcpProxy


def _log_lines(process: ConsumerProcess) -> list[dict[str, object]]:
    lines = process.log_path.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


async def _until(condition: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {within} s: {what}")


async def test_a_consumer_started_before_kafka_waits_then_consumes(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix, with_copier=True)
    names = TopicNames(prefix)
    proxy = TcpProxy(BOOTSTRAP)  # closed: nothing answers at its address yet
    consumer = ConsumerProcess(
        "copier", prefix, tmp_path, bootstrap_servers=proxy.address, startup_timeout_s=120
    ).start()
    try:
        await _until(
            lambda: sum(line.get("message") == "waiting for Kafka"
                        for line in _log_lines(consumer)) >= 3,
            60, "three 'waiting for Kafka' log lines",
        )
        status, body = await asyncio.to_thread(consumer.probe, "/readyz")
        assert status == 503, body
        assert body.startswith("not ready: waiting for Kafka"), body
        assert proxy.address in body or "Unable to bootstrap" in body or "connect" in body.lower()
        live, _ = await asyncio.to_thread(consumer.probe, "/healthz")
        assert live == 200, "waiting for Kafka is what it should do: alive, not ready"
        assert consumer.proc is not None and consumer.proc.poll() is None
        waits = [
            line for line in _log_lines(consumer) if line.get("message") == "waiting for Kafka"
        ]
        numbers = [line["attempt"] for line in waits]
        assert numbers == list(range(1, len(numbers) + 1)), numbers
        assert all("exception" not in line for line in waits), "a wait is not a traceback"

        await proxy.open()
        await consumer.wait_ready(within=90)
        sent = [(b"run-1", orjson.dumps({"n": i}), ()) for i in range(20)]
        await produce(names.agent_events, sent)
        async with TopicReader(f"{prefix}.copier-output") as reader:
            copied = await reader.until(len(sent), within=60)
        assert sorted(r.value for r in copied) == sorted(v for _, v, _ in sent)
        assert "Traceback" not in consumer.log_path.read_text(errors="replace")
    finally:
        consumer.stop()
        await proxy.close()


@pytest.mark.timeout(120)
async def test_a_consumer_gives_up_after_the_startup_timeout_with_one_clear_message(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    proxy = TcpProxy(BOOTSTRAP)  # never opened
    consumer = ConsumerProcess(
        "typed", prefix, tmp_path, bootstrap_servers=proxy.address, startup_timeout_s=4
    ).start()
    try:
        status = await consumer.wait(within=60)
    finally:
        consumer.stop()
    text = consumer.log_path.read_text(errors="replace")
    assert status == 1, text
    assert "Traceback" not in text
    [failure] = [line for line in _log_lines(consumer) if line.get("level") == "ERROR"]
    assert failure["message"] == "consumer cannot start"
    assert "SYMFONIC_STARTUP_TIMEOUT_S=4" in str(failure["error"])
    assert "no answer in" in str(failure["error"])
    assert "exception" not in failure


async def test_topics_ensure_waits_for_kafka_then_creates_the_topics(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    proxy = TcpProxy(BOOTSTRAP)
    env = consumer_env(prefix, bootstrap_servers=proxy.address, startup_timeout_s=120)

    process = await asyncio.create_subprocess_exec(
        cli_path(), "topics", "ensure", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    waits: list[bytes] = []
    try:
        # It says once that it waits (a line every tenth attempt after: a terminal's
        # command, or a Job that waits minutes), and goes on waiting.
        while not waits:
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            assert line, "topics ensure exited instead of waiting for Kafka"
            if b"waiting for Kafka" in line:
                waits.append(line)
        assert process.returncode is None, "it must wait, not fail"
        await proxy.open()
        out, err = await asyncio.wait_for(process.communicate(), 90)
    finally:
        if process.returncode is None:
            process.kill()
        await proxy.close()
    assert process.returncode == 0, err.decode()
    assert b"attempt 1 " in waits[0] and b"SYMFONIC_STARTUP_TIMEOUT_S=120" in waits[0], waits
    assert b"Unable connect to" not in err  # aiokafka's own line, folded into ours
    assert b"Traceback" not in err
    assert f"created  {prefix}.agent-events" in out.decode()
