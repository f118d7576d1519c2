"""Broker failures on a 3-node KRaft cluster (RF 3, min ISR 2): what a user's cluster does
during a crash or a rolling restart (issue 13).

Run by ``make test-cluster`` against ``scripts/kafka.sh cluster-start`` (the tests deselect
themselves elsewhere: they kill brokers). Each test feeds whole synthetic runs while brokers
go away, then reads every output read_committed to its end and compares it with the
reference projection of what was sent (:mod:`tests.reference.oracle`): zero duplicates,
zero lost records, every run's order.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from symfonic_stream.models.names import TopicNames

from .conftest import read_to_end
from .harness import (
    BOOTSTRAP,
    PARTITIONS,
    ConsumerProcess,
    create_topics,
    kill_mid_transaction,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    wait_caught_up,
)
from .kafka_view import GROUP, TRANSACTION, coordinator, leaders, transactional_ids
from .observe import quiesce, wait_until
from .workloads import WORKLOADS, Feeder

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

KAFKA_SH = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"
#: Holes never time out mid-test (the reference projection has no clock).
SETTINGS: dict[str, Any] = {"gap_timeout_s": 600, "batch_max_records": 300}


def kafka_sh(*args: str) -> str:
    """Run ``scripts/kafka.sh`` (the cluster's ports come from the environment)."""
    done = subprocess.run(
        [str(KAFKA_SH), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"kafka.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


async def broker(*args: str) -> str:
    return await asyncio.to_thread(kafka_sh, *args)


def _typed(prefix: str, logs: Path, name: str) -> ConsumerProcess:
    return ConsumerProcess("typed", prefix, logs, name=name, **SETTINGS)


async def _finish(prefix: str, feeder: Feeder, processes: list[ConsumerProcess]) -> None:
    """Stop the input, wait for the group to commit all of it, stop every instance, read
    everything committed and compare with the reference."""
    names = TopicNames(prefix)
    await feeder.stop()
    await wait_caught_up(names.group("typed"), names.agent_events, within=240)
    live = [p for p in processes if p.proc is not None and p.proc.poll() is None]
    await quiesce(names.group("typed"), names.agent_events, live)
    read = {topic: await read_to_end(BOOTSTRAP, topic, timeout_s=120)
            for topic in WORKLOADS["typed"].outputs(names)}
    logs = "\n".join(p.log(20) for p in processes)
    try:
        WORKLOADS["typed"].check(names, feeder.sent, read)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs}") from None


def _require_cluster() -> None:
    assert int(os.environ.get("SYMFONIC_REPLICATION_FACTOR", "1")) == 3, (
        "the cluster tests run with SYMFONIC_REPLICATION_FACTOR=3 (make test-cluster)"
    )


async def _moved(what: str, now: Callable[[], Awaitable[int]], victim: int) -> int:
    """Until ``now()`` names a live node other than ``victim``: the cluster moved it."""
    node = victim

    async def elsewhere() -> bool:
        nonlocal node
        node = await now()
        return node not in (victim, -1)

    await wait_until(elsewhere, f"{what} moved off node {victim}", within=120)
    return node


async def test_the_broker_leading_an_input_partition_killed_mid_stream_and_restarted(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    _require_cluster()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    feeder = Feeder(WORKLOADS["typed"], names.agent_events, seed=11, rate=500)
    processes = [_typed(prefix, tmp_path, "-a").start(), _typed(prefix, tmp_path, "-b").start()]
    victim = (await leaders(names.agent_events))[0]
    try:
        await asyncio.gather(*(p.wait_ready() for p in processes))
        feeder.start()
        await feeder.sent_at_least(600)
        led = {p for p, node in (await leaders(names.agent_events)).items() if node == victim}
        assert 0 in led
        await broker("kill-node", str(victim))
        for partition in led:  # every partition it led has another leader now
            await _moved(f"the leader of {names.agent_events}/{partition}",
                         partial(_leader, names.agent_events, partition), victim)
        await feeder.sent_at_least(len(feeder.sent) + 1500)  # work goes on without it
        await broker("start-node", str(victim))
        await feeder.sent_at_least(len(feeder.sent) + 600)
        for process in processes:
            assert process.proc is not None and process.proc.poll() is None, process.log()
        await _finish(prefix, feeder, processes)
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
        await broker("start-node", str(victim))


async def test_a_consumer_killed_and_restarted_while_its_group_coordinator_is_down(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    _require_cluster()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    feeder = Feeder(WORKLOADS["typed"], source, seed=12, rate=500)
    first = _typed(prefix, tmp_path, "-first").start()
    processes = [first]
    victim = -1
    try:
        await first.wait_ready()
        feeder.start()
        await feeder.sent_at_least(600)
        victim = await coordinator(group, GROUP)
        assert victim > 0, "the group has no coordinator"
        await broker("kill-node", str(victim))
        await _moved("the group's coordinator", lambda: coordinator(group, GROUP), victim)
        await feeder.sent_at_least(len(feeder.sent) + 600)
        ids = transactional_ids(group, source, range(PARTITIONS))
        assert await kill_mid_transaction(first, names.stream_events, ids), "no open transaction"
        # Started while the coordinator's node is down: its start-up checks and fencing
        # must get by on the two live brokers (a rolling restart in Kubernetes looks
        # like this).
        second = _typed(prefix, tmp_path, "-second").start()
        processes.append(second)
        await second.wait_ready(within=120)
        await feeder.sent_at_least(len(feeder.sent) + 600)
        await broker("start-node", str(victim))
        await feeder.sent_at_least(len(feeder.sent) + 300)
        await _finish(prefix, feeder, processes)
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
        if victim > 0:
            await broker("start-node", str(victim))


async def test_a_rolling_restart_of_every_broker_under_load(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    """Each node in turn stopped (controlled shutdown) and started again: what it led or
    coordinated (input partitions, the group, the consumers' transactional ids) moves to
    another node while it is down."""
    _require_cluster()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    ids = transactional_ids(group, source, range(PARTITIONS))
    feeder = Feeder(WORKLOADS["typed"], source, seed=13, rate=500)
    processes = [_typed(prefix, tmp_path, "-a").start(), _typed(prefix, tmp_path, "-b").start()]
    try:
        await asyncio.gather(*(p.wait_ready() for p in processes))
        feeder.start()
        for node in (1, 2, 3):
            await feeder.sent_at_least(len(feeder.sent) + 400)
            held = await _held_by(node, source, group, ids)
            await broker("stop-node", str(node))
            for what, now in held:
                await _moved(what, now, node)
            await feeder.sent_at_least(len(feeder.sent) + 400)
            await broker("start-node", str(node))
        await feeder.sent_at_least(len(feeder.sent) + 400)
        for process in processes:
            assert process.proc is not None and process.proc.poll() is None, process.log()
        await _finish(prefix, feeder, processes)
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
        for number in ("1", "2", "3"):
            await broker("start-node", number)


async def _leader(topic: str, partition: int) -> int:
    return (await leaders(topic)).get(partition, -1)


Now = Callable[[], Awaitable[int]]


async def _held_by(node: int, source: str, group: str, ids: list[str]) -> list[tuple[str, Now]]:
    """What ``node`` leads or coordinates of the test's: input partitions, the group, the
    transactional ids; each with how to ask who holds it now."""
    held: list[tuple[str, Now]] = [
        (f"the leader of {source}/{p}", partial(_leader, source, p))
        for p, leader in (await leaders(source)).items() if leader == node]
    if await coordinator(group, GROUP) == node:
        held.append(("the group's coordinator", lambda: coordinator(group, GROUP)))
    for tid in ids:
        if await coordinator(tid, TRANSACTION) == node:
            held.append((f"the coordinator of {tid}", partial(coordinator, tid, TRANSACTION)))
    return held
