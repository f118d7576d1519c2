"""Start-up and shutdown of a consumer process: graceful SIGTERM, missing topics."""

from __future__ import annotations

import time
from pathlib import Path

from symfonic_stream.kafka.topics import copier_output_topic
from symfonic_stream.topics import TopicNames

from .harness import (
    ConsumerProcess,
    TopicReader,
    committed_offsets,
    create_topics,
    end_offsets,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    unique_prefix,
    wait_caught_up,
)


def _batch(start: int, n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"run-{i % 16}".encode(), f"{i}".encode(), []) for i in range(start, start + n)]


async def test_sigterm_exits_zero_quickly_commits_and_leaves_the_group(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    names = TopicNames(prefix)
    group = names.group("copier")
    await produce(names.agent_events, _batch(0, 2000))
    first = ConsumerProcess("copier", prefix, tmp_path, name="-first", shutdown_timeout_s=20)
    first.start()
    second = ConsumerProcess("copier", prefix, tmp_path, name="-second")
    try:
        await first.wait_ready()
        await wait_caught_up(group, names.agent_events)
        stopped_at = time.monotonic()
        first.terminate()
        assert await first.wait(within=20) == 0, first.log()
        assert time.monotonic() - stopped_at < 10, "graceful shutdown took too long"
        assert "LeaveGroup request succeeded" in first.log(tail=200)
        # Everything consumed was committed with the output, before exiting.
        assert await committed_offsets(group, names.agent_events) == await end_offsets(
            names.agent_events
        )
        # Having left the group, the next instance gets the partitions at once (no wait
        # for a session timeout) and starts exactly where the first one stopped.
        await produce(names.agent_events, _batch(2000, 500))
        started = time.monotonic()
        second.start()
        await second.wait_ready(within=30)
        assert time.monotonic() - started < 8, "rejoin waited for the old member's session"
        await wait_caught_up(group, names.agent_events)
        async with TopicReader(copier_output_topic(names)) as reader:
            copied = await reader.settle(quiet=1.0)
    finally:
        first.stop()
        second.stop()
    values = [r.value for r in copied]
    assert len(values) == 2500
    assert set(values) == {f"{i}".encode() for i in range(2500)}


async def test_missing_topics_fail_start_up_with_a_clear_message(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    consumer = ConsumerProcess("copier", unique_prefix(), tmp_path).start()
    try:
        assert await consumer.wait(within=30) == 1
    finally:
        consumer.stop()
    log = consumer.log()
    assert "agent-events" in log and "topics ensure" in log, log
