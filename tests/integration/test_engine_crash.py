"""Exactly once through crashes: consumers SIGKILLed mid-stream, restarted, rebalanced.

A read_committed reader of the output must see every input record exactly once, and the
records of each key (so of each input partition) in the order they were produced.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from symfonic_stream.kafka.topics import copier_output_topic
from symfonic_stream.topics import TopicNames

from .harness import (
    ConsumerProcess,
    TopicReader,
    create_topics,
    expected_by_key,
    kill_mid_transaction,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    sequences_by_key,
    wait_caught_up,
)

pytestmark = pytest.mark.slow


def _stream(n: int, keys: int = 40) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"run-{i % keys}".encode(), f"{i}".encode(), [("seq", f"{i}".encode())])
            for i in range(n)]


def _assert_exactly_once(copied: list, sent: list, logs: str) -> None:  # type: ignore[type-arg]
    values = [r.value for r in copied]
    duplicates = len(values) - len(set(values))
    missing = {v for _, v, _ in sent} - set(values)
    assert duplicates == 0, f"{duplicates} duplicate(s)\n{logs}"
    assert not missing, f"{len(missing)} missing, e.g. {sorted(missing)[:5]}\n{logs}"
    assert len(values) == len(sent)
    assert sequences_by_key(copied) == expected_by_key(sent), "per-key order broken"


async def test_sigkill_mid_stream_then_restart_is_exactly_once(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    names = TopicNames(prefix)
    sent = _stream(4000)
    first = ConsumerProcess("copier", prefix, tmp_path, name="-first").start()
    second = ConsumerProcess("copier", prefix, tmp_path, name="-restarted")
    try:
        await first.wait_ready()
        feeder = asyncio.create_task(produce(names.agent_events, sent, rate=1500))
        async with TopicReader(copier_output_topic(names)) as reader:
            await reader.until(500, within=60)
            caught_open = await kill_mid_transaction(first, copier_output_topic(names))
            assert caught_open, "the kill must leave a transaction open"
            assert not feeder.done(), "the kill must happen while input still flows"
            assert len(reader.records) < len(sent)
            second.start()
            await feeder
            await second.wait_ready(within=90)
            await wait_caught_up(names.group("copier"), names.agent_events, within=120)
            copied = await reader.settle(quiet=2.0)
        async with TopicReader(copier_output_topic(names), "read_uncommitted") as raw:
            everything = await raw.settle(quiet=1.0)
    finally:
        first.stop()
        second.stop()
    _assert_exactly_once(copied, sent, second.log())
    # The zombie's open transaction reached the broker and was aborted, not committed.
    assert len(everything) > len(copied)


async def test_two_consumers_one_killed_and_restarted_while_input_flows(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    names = TopicNames(prefix)
    sent = _stream(6000)
    a = ConsumerProcess("copier", prefix, tmp_path, name="-a").start()
    b = ConsumerProcess("copier", prefix, tmp_path, name="-b").start()
    a2 = ConsumerProcess("copier", prefix, tmp_path, name="-a2")
    try:
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        feeder = asyncio.create_task(produce(names.agent_events, sent, rate=1200))
        async with TopicReader(copier_output_topic(names)) as reader:
            await reader.until(1000, within=60)
            await kill_mid_transaction(a, copier_output_topic(names))
            assert not feeder.done(), "the kill must happen while input still flows"
            await asyncio.sleep(1.0)
            a2.start()
            await feeder
            await asyncio.gather(a2.wait_ready(within=90), b.wait_ready(within=90))
            await wait_caught_up(names.group("copier"), names.agent_events, within=120)
            copied = await reader.settle(quiet=2.0)
        assert b.proc is not None and b.proc.poll() is None, "the survivor must keep running"
    finally:
        for consumer in (a, b, a2):
            consumer.stop()
    _assert_exactly_once(copied, sent, b.log() + "\n" + a2.log())
