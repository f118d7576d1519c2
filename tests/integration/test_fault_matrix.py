"""The fault table: every consumer killed or frozen in each named phase, its successor too.

Each row of :data:`~tests.integration.faults.TABLE` is one run:

1. a warm-up instance processes the first input and stops gracefully, so there is
   committed state and offsets to restore;
2. instance A starts armed with the row's first fault; input flows all along; when A's
   fault lands it is SIGKILLed, or (a zombie) left frozen until its successor B owns every
   partition and committed, then woken: woken mid-transaction it must be fenced (its
   ``producers_fenced_total`` counts it); woken elsewhere it is fenced or gives its
   partitions back having written nothing;
3. a successor armed with the row's second fault (restoring, fencing, mid-transaction ...)
   is killed there too (a joiner makes the group revoke it when that fault is
   ``revoking``); a last instance finishes;
4. with every instance stopped, each output partition is read read_committed to its end and
   compared with the expectation computed without the code under test
   (:mod:`tests.integration.workloads`): no duplicate, no loss, per-run order.

A fault that does not land in the phase it names fails the run. ``make test`` runs the
``quick`` rows (each distinct first fault once: its mode and phase, stateless and stateful;
every phase as a successor's); ``make test-faults`` runs every row.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from pathlib import Path
from typing import Any

import pytest

from symfonic_stream.models.names import TopicNames

from .conftest import Record, read_to_end
from .faults import REPLAY_TABLE, TABLE, Fault, Row, kill, thaw, wait_frozen
from .harness import (
    BOOTSTRAP,
    PARTITIONS,
    ConsumerProcess,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    wait_caught_up,
)
from .workloads import WORKLOADS, Feeder, Workload

pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.timeout(400)]

#: Settings of every instance: holes never time out mid-test (the reference has no clock),
#: and a batch limit small enough that each phase comes round often.
SETTINGS = {"gap_timeout_s": 600, "batch_max_records": 200}


def _param(row: Row) -> Any:
    marks = () if row.quick else (pytest.mark.faults_full,)
    return pytest.param(row, id=row.name, marks=marks)


def _instance(workload: Workload, prefix: str, logs: Path, name: str,
              fault: Fault | None = None) -> ConsumerProcess:
    settings: dict[str, Any] = dict(SETTINGS)
    if fault is not None:
        settings["fault_freeze"] = fault.setting
    return ConsumerProcess(workload.consumer, prefix, logs, name=name, **settings)


async def _owns_all(process: ConsumerProcess, topic: str) -> bool:
    """Whether ``process`` owns, set up and consumes every partition of ``topic``."""
    owned = [
        await asyncio.to_thread(process.metric, "symfonic_stream_partition_assigned",
                                topic=topic, partition=str(p))
        for p in range(PARTITIONS)
    ]
    return all(value == 1 for value in owned)


async def _until(condition: object, within: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        if await condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {within} s: {what}")


@pytest.mark.parametrize("row", [_param(row) for row in TABLE])
async def test_fault_table(row: Row, prefix: str, tmp_path: Path,
                           bootstrap_servers: str) -> None:
    workload = WORKLOADS[row.consumer]
    names = TopicNames(prefix)
    await create_topics(prefix, with_copier=True)
    source = workload.source(names)
    first, second = row.first, row.successor
    feeder = Feeder(workload, source, seed=zlib.crc32(row.name.encode()), rate=400)
    processes: list[ConsumerProcess] = []

    def instance(name: str, fault: Fault | None = None) -> ConsumerProcess:
        process = _instance(workload, prefix, tmp_path, name, fault).start()
        processes.append(process)
        return process

    async def revoked_when_armed(process: ConsumerProcess, fault: Fault) -> None:
        """A ``revoking`` fault needs a rebalance: a joiner makes the group revoke."""
        if fault.phase == "revoking":
            await process.wait_ready(within=90)
            instance(f"-joins-{process.log_path.stem}")

    try:
        # 1. Warm-up: committed state and offsets exist before the first fault.
        await feeder.send_batches(2)
        warm = instance("-warm")
        await warm.wait_ready()
        await wait_caught_up(names.group(row.consumer), source, within=120)
        warm.terminate()
        assert await warm.wait(60) == 0, warm.log()
        # 2. The first fault, while input flows.
        feeder.start()
        a = instance("-a", first)
        await revoked_when_armed(a, first)
        await wait_frozen(a, first)
        if first.mode == "kill":
            kill(a)
            successor = instance("-b", second)
        else:
            await _zombie_fenced(a, first, instance("-b"), source)
            successor = instance("-c", second)
        # 3. The successor's fault, then a last instance.
        await revoked_when_armed(successor, second)
        await wait_frozen(successor, second)
        kill(successor)
        last = instance("-last")
        await last.wait_ready(within=90)
        await feeder.stop()
        await wait_caught_up(names.group(row.consumer), source, within=180)
        for process in processes:
            process.stop()
        # 4. Read everything committed and compare.
        read = {topic: await read_to_end(BOOTSTRAP, topic, timeout_s=60)
                for topic in workload.outputs(names)}
    finally:
        with contextlib.suppress(Exception):
            await feeder.stop()
        for process in processes:
            process.stop()
    logs = "\n".join(p.log(30) for p in processes)
    try:
        workload.check(names, feeder.sent, read)
    except AssertionError as exc:
        raise AssertionError(f"{row.name}: {exc}\n{logs}") from None


async def _zombie_fenced(a: ConsumerProcess, fault: Fault, b: ConsumerProcess,
                         source: str) -> None:
    """A frozen past its session; B takes every partition and commits; A is woken."""
    await b.wait_ready(within=90)
    await _until(lambda: _owns_all(b, source), 90, "B owns every partition")
    committed_before = await asyncio.to_thread(
        b.metric, "symfonic_stream_transactions_total", outcome="committed")
    await _until(lambda: _committed_more(b, committed_before), 60, "B commits")
    revoked_before = _revocations(a)
    thaw(a)
    if fault.fence_guaranteed:
        await _until(lambda: _fenced(a), 60, "the zombie woken mid-transaction is fenced")
    else:
        # Woken, it either writes with its old producer, and is fenced, or learns of the
        # rebalance first and gives its partitions back having written nothing (frozen
        # after a fetch, say): either way nothing of it becomes visible, which the final
        # check proves.
        await _until(lambda: _fenced_or_revoked(a, revoked_before), 60,
                     "the woken zombie is fenced or gives its partitions back")


async def _committed_more(process: ConsumerProcess, before: float) -> bool:
    now = await asyncio.to_thread(
        process.metric, "symfonic_stream_transactions_total", outcome="committed")
    return now > before


async def _fenced(process: ConsumerProcess) -> bool:
    return await asyncio.to_thread(process.metric, "symfonic_stream_producers_fenced_total") >= 1


def _revocations(process: ConsumerProcess) -> int:
    return process.log_path.read_text(errors="replace").count('"partitions revoked"')


async def _fenced_or_revoked(process: ConsumerProcess, revoked_before: int) -> bool:
    return _revocations(process) > revoked_before or await _fenced(process)


@pytest.mark.parametrize(("first", "second"), [
    pytest.param(first, second, id=f"replay:kill-{first.phase}:then-{second.phase}",
                 marks=() if quick else (pytest.mark.faults_full,))
    for first, second, quick in REPLAY_TABLE])
async def test_replay_fault_table(first: Fault, second: Fault, prefix: str, tmp_path: Path,
                                  bootstrap_servers: str) -> None:
    """``symfonic-stream replay`` (a subprocess) killed in a transaction's phases, then
    rerun, twice: the target holds the reference projection of the range, once."""
    workload = WORKLOADS["typed"]
    names = TopicNames(prefix)
    await create_topics(prefix, with_copier=False)
    feeder = Feeder(workload, names.agent_events, seed=3, rate=5000)
    await feeder.send_batches(12)
    target = f"{prefix}.replayed"
    args = ["replay", "--projection", "typed", "--to-topic", target, "--from-offset", "0",
            "--json"]
    runs: list[ConsumerProcess] = []
    try:
        for n, fault in enumerate((first, second)):
            settings: dict[str, Any] = {"batch_max_records": 100, "fault_freeze": fault.setting}
            run = ConsumerProcess("replay", prefix, tmp_path, name=f"-{n}", args=args, **settings)
            runs.append(run.start())
            await wait_frozen(run, fault)
            kill(run)
        last = ConsumerProcess("replay", prefix, tmp_path, name="-last", args=args,
                               batch_max_records=100)
        runs.append(last.start())
        assert await last.wait(180) == 0, last.log()
        read: dict[str, list[Record]] = {
            target: await read_to_end(BOOTSTRAP, target, timeout_s=60), names.dead_letter: []
        }
    finally:
        for run in runs:
            run.stop()
    story = f"replay: first {first}, rerun {second}"
    try:
        workload.check(names, feeder.sent, _as_typed_output(names, target, read))
    except AssertionError as exc:
        raise AssertionError(f"{story}: {exc}\n" + "\n".join(r.log(20) for r in runs)) from None


def _as_typed_output(
    names: TopicNames, target: str, read: dict[str, list[Record]]
) -> dict[str, list[Record]]:
    """The replay's target read as if it were the live typed topic (same check)."""
    return {names.stream_events: read[target], names.dead_letter: read[names.dead_letter]}
