"""Start-up and shutdown of a consumer process: graceful SIGTERM, missing topics."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from symfonic_stream.models.names import TopicNames

from .conftest import read_to_end
from .faults import Fault, thaw, wait_frozen
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
from .kafka_view import transactional_ids, transactions
from .observe import (
    REBALANCES,
    describe_group,
    metric_value,
    open_transaction_records,
    owned_only_by,
    quiesce,
    read_to_committed_end,
    split_between,
    wait_committed_to,
    wait_for_assignment,
)


def _batch(start: int, n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"run-{i % 16}".encode(), f"{i}".encode(), []) for i in range(start, start + n)]


async def test_sigterm_commits_the_batch_it_holds_open_and_leaves_the_group(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    """The first instance holds what it consumes in one open batch (a ten-minute linger no
    test waits out), so before SIGTERM nothing of its share is committed; on SIGTERM it
    commits that batch itself (frozen in that commit, the test sees the transaction open)
    and leaves the group, and the second instance goes on from there."""
    await create_topics(prefix)
    names = TopicNames(prefix)
    group = names.group("copier")
    source = names.agent_events
    closing_commit = Fault("in_transaction", 1)  # its first transaction: the one on SIGTERM
    processes = {
        "first": ConsumerProcess("copier", prefix, tmp_path, name="-first", shutdown_timeout_s=20,
                                 batch_max_latency_ms=600_000,
                                 fault_freeze=closing_commit.setting),
        "second": ConsumerProcess("copier", prefix, tmp_path, name="-second"),
    }
    first, second = processes["first"], processes["second"]
    try:
        first.start()
        await first.wait_ready()
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "first"), "first alone"
        )
        second.start()
        await second.wait_ready()
        before = await wait_for_assignment(
            group, source, processes, lambda o: split_between(o, "first", "second"),
            "first and second sharing the partitions",
        )
        first_member = before.member("first")
        mine = before.owners["first"]
        rebalances = await metric_value(second, REBALANCES)
        await produce(source, _batch(0, 2500))
        # The second committed its share; the first consumed alongside and committed none.
        ends = await end_offsets(source)
        await wait_committed_to(group, source, ends, before.owners["second"])
        held = await committed_offsets(group, source)
        assert all(ends[p] > held.get(p, 0) == 0 for p in mine), (held, ends)
        assert second.proc is not None
        second.proc.send_signal(signal.SIGSTOP)  # only the first can commit its batch now
        try:
            first.terminate()
            # Shutting down, it commits the batch it held, and stops in that transaction.
            await wait_frozen(first, closing_commit)
            in_flight = await open_transaction_records(names.copier_output)
            assert in_flight, "SIGTERM found no batch in flight"
            ours = await transactions(transactional_ids(group, source, mine))
            assert any(t.open_on(names.copier_output) for t in ours.values()), ours
            assert await committed_offsets(group, source) == held
            thaw(first)
            assert await first.wait(within=60) == 0, first.log()
            # Right after its exit the first instance is no member any more: it left. A
            # member that merely went away stays listed until its session (10 s) expires,
            # and only then would the group rebalance.
            after_exit = await describe_group(BOOTSTRAP, group, source)
            # The batch it held was committed by the first instance, on exit: its offsets
            # move to just past the input records of that batch. EndTxn answers before the
            # commit markers reach __consumer_offsets, so the offsets show a moment after the
            # exit: wait for them (the second is stopped, so nobody else can move them).
            where = {r.value: (r.partition, r.offset) for r in
                     await read_to_end(BOOTSTRAP, source, isolation_level="read_committed")}
            batch_end: dict[int, int] = {}
            for record in in_flight:
                partition, offset = where[record.value]
                batch_end[partition] = max(batch_end.get(partition, 0), offset + 1)
            await wait_committed_to(group, source, batch_end, batch_end)
            committed = await committed_offsets(group, source)
        finally:
            second.proc.send_signal(signal.SIGCONT)
        assert first_member not in after_exit.members, (after_exit, first.log(tail=200))
        assert "LeaveGroup request succeeded" in first.log(tail=200)
        assert set(batch_end) <= mine
        assert {p: committed.get(p) for p in batch_end} == batch_end, first.log()
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
