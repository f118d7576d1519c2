"""Start-up and shutdown of a consumer process: graceful SIGTERM, missing topics."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from symfonic_stream.models.names import TopicNames

from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    committed_offsets,
    create_topics,
    end_offsets,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    unique_prefix,
    wait_caught_up,
)
from .observe import (
    REBALANCES,
    describe_group,
    metric_value,
    owned_only_by,
    quiesce,
    read_to_committed_end,
    split_between,
    wait_for_assignment,
    wait_idle,
)


def _batch(start: int, n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"run-{i % 16}".encode(), f"{i}".encode(), []) for i in range(start, start + n)]


async def test_sigterm_exits_zero_commits_and_hands_its_partitions_over_by_leaving_the_group(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    names = TopicNames(prefix)
    group = names.group("copier")
    source = names.agent_events
    processes = {
        "first": ConsumerProcess("copier", prefix, tmp_path, name="-first", shutdown_timeout_s=20),
        "second": ConsumerProcess("copier", prefix, tmp_path, name="-second"),
    }
    first, second = processes["first"], processes["second"]
    try:
        first.start()
        await first.wait_ready()
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "first"), "first alone"
        )
        await produce(source, _batch(0, 2000))
        await wait_caught_up(group, source)
        second.start()
        await second.wait_ready()
        before = await wait_for_assignment(
            group, source, processes, lambda o: split_between(o, "first", "second"),
            "first and second sharing the partitions",
        )
        first_member = before.member("first")
        rebalances = await metric_value(second, REBALANCES)
        # Work in flight when the first instance shuts down: it has consumed all of this,
        # and the second is frozen meanwhile, so only the first can commit it.
        await produce(source, _batch(2000, 500))
        await wait_idle(first)
        await wait_idle(second)
        ends = await end_offsets(source)
        assert second.proc is not None
        second.proc.send_signal(signal.SIGSTOP)
        try:
            first.terminate()
            assert await first.wait(within=60) == 0, first.log()
            # Right after its exit the first instance is no member any more: it left. A
            # member that merely went away stays listed until its session (10 s) expires,
            # and only then would the group rebalance.
            after_exit = await describe_group(BOOTSTRAP, group, source)
            committed = await committed_offsets(group, source)
        finally:
            second.proc.send_signal(signal.SIGCONT)
        assert first_member not in after_exit.members, (after_exit, first.log(tail=200))
        assert "LeaveGroup request succeeded" in first.log(tail=200)
        # What the first instance processed was committed by the first instance, on exit.
        mine = before.owners["first"]
        assert {p: committed.get(p) for p in mine} == {p: ends[p] for p in mine}, first.log()
        after = await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "second"), "second alone"
        )
        assert after.member("second") == before.member("second")  # the same member, re-assigned
        assert await metric_value(second, REBALANCES) > rebalances  # the generation moved
        await quiesce(group, source, [second])
        assert await committed_offsets(group, source) == await end_offsets(source)
        copied = await read_to_committed_end(
            names.copier_output, group=group, source=source, processes=[first, second]
        )
    finally:
        first.stop()
        second.stop()
    values = [r.value for r in copied]
    assert len(values) == 2500, "every input record copied exactly once"
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


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
async def test_a_consumer_runs_on_the_event_loop_its_setting_names(
    bootstrap_servers: str, prefix: str, tmp_path: Path, event_loop: str
) -> None:
    """SYMFONIC_EVENT_LOOP (runtime/loop.py): uvloop by default, Python's own on request;
    either way the consumer copies what arrives and stops cleanly on SIGTERM."""
    await create_topics(prefix)
    names = TopicNames(prefix)
    overrides = {} if event_loop == "uvloop" else {"event_loop": event_loop}
    consumer = ConsumerProcess("copier", prefix, tmp_path, **overrides).start()
    try:
        await consumer.wait_ready()
        await produce(names.agent_events, _batch(0, 100))
        await wait_caught_up(names.group("copier"), names.agent_events)
        consumer.terminate()
        assert await consumer.wait(within=30) == 0
    finally:
        consumer.stop()
    serving = [line for line in consumer.log(tail=400).splitlines() if '"serving"' in line]
    assert [json.loads(line)["event_loop"] for line in serving] == [event_loop], serving
