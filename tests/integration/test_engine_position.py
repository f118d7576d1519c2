"""A stateful consumer's position travels in its changelog, and every transaction tells
its group the same offsets (commit step 6: what fences a zombie by its generation).

The typed projector, as processes: killed mid-backlog, its group holds exactly the
changelog's positions and a successor resumes there (it reads nothing again); an idle
consumer's group is up to date while it runs; an operator's reset of the group's offsets is
followed, not overridden by the changelog.
"""

from __future__ import annotations

from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.engine.transaction import PROGRESS_CODEC
from symfonic_stream.models.names import TopicNames

from .conftest import read_to_end
from .faults import Fault, wait_frozen
from .harness import (
    BOOTSTRAP,
    PARTITIONS,
    ConsumerProcess,
    committed_offsets,
    create_topics,
    end_offsets,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
)
from .observe import metric_value, wait_committed_to, wait_until
from .workloads import WORKLOADS, Feeder

RECORDS_IN = "symfonic_stream_records_in_total"
DUPLICATES = "symfonic_stream_duplicates_total"


async def _consumed(process: ConsumerProcess, count: int) -> None:
    async def done() -> bool:
        return await metric_value(process, RECORDS_IN) >= count

    await wait_until(done, f"{process.log_path.name} consumes {count} records", within=120)


async def _typed_input(prefix: str, seed: int) -> tuple[TopicNames, str, str, Feeder]:
    """Fresh topics; the typed group, its source, and a feeder of whole runs into it."""
    await create_topics(prefix)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    return names, group, source, Feeder(WORKLOADS["typed"], source, seed=seed, rate=2000)


async def _check_outputs(names: TopicNames, feeder: Feeder) -> None:
    workload = WORKLOADS["typed"]
    read = {topic: await read_to_end(BOOTSTRAP, topic)
            for topic in workload.outputs(names)}
    workload.check(names, feeder.sent, read)


async def _changelog_positions(changelog: str) -> dict[int, int]:
    """Each partition's last committed position record (its next input offset)."""
    positions: dict[int, int] = {}
    for record in await read_to_end(BOOTSTRAP, changelog):
        if record.key == b"position/next" and record.value:
            positions[record.partition] = PROGRESS_CODEC.decode(record.value).next_offset
    return positions


async def test_a_killed_consumers_group_holds_its_changelogs_positions_and_resumes_there(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    names, group, source, feeder = await _typed_input(prefix, seed=18)
    await feeder.send_batches(8)  # a backlog: busy from the start, never quiet
    # Killed after its 6th transaction, with small ones, while the backlog lasts.
    fault = Fault("commit_logged", 6)
    first = ConsumerProcess("typed", prefix, tmp_path, name="-first", batch_max_records=20,
                            fault_freeze=fault.setting)
    second = ConsumerProcess("typed", prefix, tmp_path, name="-second")
    try:
        first.start()
        await wait_frozen(first, fault)
        first.kill()
        positions = await _changelog_positions(names.changelog("typed"))
        assert any(positions.values()), positions  # it committed, mid-backlog
        # (the group shows the last transaction's offsets once its markers are written)
        await wait_committed_to(group, source, positions, list(positions))
        told = await committed_offsets(group, source)
        assert {p: told.get(p, 0) for p in positions} == positions

        await second.start().wait_ready(within=90)
        ends = await end_offsets(source)
        left = sum(end - positions.get(p, 0) for p, end in ends.items())
        await _consumed(second, left)
        # Where both say: nothing the first committed is read again.
        assert await metric_value(second, RECORDS_IN) == left, second.log()
        second.terminate()
        assert await second.wait(within=60) == 0, second.log()
    finally:
        first.stop()
        second.stop()
        await feeder.stop()
    # The stop told the group (its offsets show once the markers are written); the outputs
    # are the reference projection of all of it.
    await wait_committed_to(group, source, ends, ends)
    assert await committed_offsets(group, source) == ends
    await _check_outputs(names, feeder)


async def test_a_running_consumers_group_is_up_to_date(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    _, group, source, feeder = await _typed_input(prefix, seed=19)
    typed = ConsumerProcess("typed", prefix, tmp_path)
    try:
        await typed.start().wait_ready()
        await feeder.send_batches(4)
        ends = await end_offsets(source)

        async def told() -> bool:
            return await committed_offsets(group, source) == ends

        await wait_until(told, "the group's offsets reach the end while it runs", within=20)
        assert typed.proc is not None and typed.proc.poll() is None  # told, not stopped
    finally:
        typed.stop()
        await feeder.stop()


async def _reset_group(group: str, source: str, to: int) -> None:
    """What ``kafka-consumer-groups --reset-offsets`` does to an empty group."""
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.commit({tp: to for tp in tps})
    finally:
        await consumer.stop()


async def test_an_operators_reset_of_the_group_is_followed(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    names, group, source, feeder = await _typed_input(prefix, seed=20)
    first = ConsumerProcess("typed", prefix, tmp_path, name="-first")
    second = ConsumerProcess("typed", prefix, tmp_path, name="-second")
    try:
        await first.start().wait_ready()
        await feeder.send_batches(4)
        sent = len(feeder.sent)
        await _consumed(first, sent)
        first.terminate()
        assert await first.wait(within=60) == 0, first.log()
        ends = await end_offsets(source)
        await wait_committed_to(group, source, ends, ends)  # once the markers are written
        assert await committed_offsets(group, source) == ends

        await _reset_group(group, source, to=0)
        await second.start().wait_ready(within=90)
        # Everything again, from the beginning: each event a duplicate of one the guard's
        # restored state has seen, so nothing new is written.
        await _consumed(second, sent)
        assert await metric_value(second, DUPLICATES) == sent, second.log()
        # Restored twice (issue 32: the restore is suspected first), then taken as a reset.
        log = second.log(tail=400)
        assert "restoring again" in log
        assert "the group's committed offset was moved by someone else" in log
    finally:
        first.stop()
        second.stop()
        await feeder.stop()
    await _check_outputs(names, feeder)
