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
from .kafka_view import transactional_ids
from .observe import quiesce
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


async def test_a_broker_killed_mid_stream_and_restarted(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    _require_cluster()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    feeder = Feeder(WORKLOADS["typed"], names.agent_events, seed=11, rate=500)
    processes = [_typed(prefix, tmp_path, "-a").start(), _typed(prefix, tmp_path, "-b").start()]
    try:
        await asyncio.gather(*(p.wait_ready() for p in processes))
        feeder.start()
        await feeder.sent_at_least(600)
        await broker("kill-node", "2")
        await feeder.sent_at_least(len(feeder.sent) + 1500)  # work goes on without it
        await broker("start-node", "2")
        await feeder.sent_at_least(len(feeder.sent) + 600)
        for process in processes:
            assert process.proc is not None and process.proc.poll() is None, process.log()
        await _finish(prefix, feeder, processes)
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
        await broker("start-node", "2")


async def test_a_consumer_killed_and_restarted_while_a_broker_is_down(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    _require_cluster()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    feeder = Feeder(WORKLOADS["typed"], names.agent_events, seed=12, rate=500)
    first = _typed(prefix, tmp_path, "-first").start()
    processes = [first]
    try:
        await first.wait_ready()
        feeder.start()
        await feeder.sent_at_least(600)
        await broker("kill-node", "2")
        await feeder.sent_at_least(len(feeder.sent) + 600)
        assert await kill_mid_transaction(first, names.stream_events, transactional_ids(
            names.group("typed"), names.agent_events, range(PARTITIONS))), "no open transaction"
        # Started while node 2 is down: its start-up checks and fencing must get by on the
        # two live brokers (a rolling restart in Kubernetes looks like this).
        second = _typed(prefix, tmp_path, "-second").start()
        processes.append(second)
        await second.wait_ready(within=120)
        await feeder.sent_at_least(len(feeder.sent) + 600)
        await broker("start-node", "2")
        await feeder.sent_at_least(len(feeder.sent) + 300)
        await _finish(prefix, feeder, processes)
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
        await broker("start-node", "2")


async def test_a_rolling_restart_of_every_broker_under_load(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    _require_cluster()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    feeder = Feeder(WORKLOADS["typed"], names.agent_events, seed=13, rate=500)
    processes = [_typed(prefix, tmp_path, "-a").start(), _typed(prefix, tmp_path, "-b").start()]
    try:
        await asyncio.gather(*(p.wait_ready() for p in processes))
        feeder.start()
        for node in ("1", "2", "3"):
            await feeder.sent_at_least(len(feeder.sent) + 400)
            await broker("stop-node", node)
            await feeder.sent_at_least(len(feeder.sent) + 400)
            await broker("start-node", node)
        await feeder.sent_at_least(len(feeder.sent) + 400)
        for process in processes:
            assert process.proc is not None and process.proc.poll() is None, process.log()
        await _finish(prefix, feeder, processes)
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
        for node in ("1", "2", "3"):
            await broker("start-node", node)
