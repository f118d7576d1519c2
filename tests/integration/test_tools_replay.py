"""``replay``: a time range of the raw topic re-projected exactly once, equal to offline."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from symfonic_stream.config import Settings
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.render import format_ts
from symfonic_stream.tools.replay.replay import progress_topic, replay
from symfonic_stream.tools.synthetic import Damage, RunShape, deliver, generate_run, interleave

from .conftest import ReadTopic, create_topic
from .faults import Fault, kill, wait_frozen
from .harness import ConsumerProcess
from .test_tools_cli import run_cli
from .workloads import reference_values_by_run

# Record timestamps (ms) of three publishing windows. In the past: brokers refuse records
# stamped too far in the future (message.timestamp.after.max.ms, 1 h by default).
T0 = (int(time.time()) - 3 * 3600) * 1000
T1, T2 = T0 + 100_000, T0 + 200_000
PARTITIONS = 3


@pytest.fixture
async def prefix(admin_client: AIOKafkaAdminClient) -> AsyncIterator[str]:
    """A fresh topic prefix with its raw topic; every topic under it is deleted after."""
    name = f"it-replay-{uuid.uuid4().hex[:10]}"
    await create_topic(admin_client, TopicNames(name).agent_events, PARTITIONS)
    yield name
    with contextlib.suppress(KafkaError):
        topics = [t for t in await admin_client.list_topics() if t.startswith(name)]
        await admin_client.delete_topics(topics)


def _raw_stream(seed: int = 11) -> list[bytes]:
    """Runs with duplicates, reordering and lost events, interleaved as kernels publish."""
    rng = random.Random(seed)
    runs = []
    for n in range(12):
        events = generate_run(rng, f"rp-{n}", shape=RunShape(min_events=6, max_events=40))
        runs.append(deliver(rng, events, Damage(duplicate_share=0.05, reorder_share=0.05,
                                                loss_share=0.03)))
    return [orjson.dumps(event) for event in interleave(rng, runs)]


async def _publish(bootstrap: str, topic: str, lines: list[bytes]) -> list[bytes]:
    """Produce in three time windows; returns the lines of the middle window [T1, T2)."""
    third = len(lines) // 3
    windows = [(T0, lines[:third]), (T1, lines[third : 2 * third]), (T2, lines[2 * third :])]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, value=line, key=orjson.loads(line)["run_id"].encode(),
                timestamp_ms=start_ms + i,
            )
            for start_ms, chunk in windows
            for i, line in enumerate(chunk)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return windows[1][1]


def _offline_by_run(lines: list[bytes], projection: str) -> dict[str, list[bytes]]:
    """What the reference projection writes for ``lines``, by run."""
    return reference_values_by_run(lines, "typed" if projection == "typed" else "chunks")


async def _target_by_run(read_topic: ReadTopic, topic: str) -> dict[str, list[bytes]]:
    got: dict[str, list[bytes]] = defaultdict(list)
    for record in await read_topic(topic):  # ordered by (partition, offset)
        assert record.key is not None and record.value is not None
        got[record.key.decode()].append(record.value)
    return dict(got)


Unreadable = Callable[[str], Awaitable[dict[int, int]]]


@contextlib.asynccontextmanager
async def _unreadable(bootstrap: str) -> AsyncIterator[Unreadable]:
    """``await unreadable(topic)``: {partition: how many offsets read_committed cannot read}.

    The high watermark minus the last stable offset, asked by consumers started beforehand
    so that the answer describes the moment it is asked: a read_committed reader starting
    then reads up to the last stable offset and stops there. Committed records whose commit
    marker is not written yet count, as do the records of an open transaction.
    """
    consumers = [
        AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level)
        for level in ("read_committed", "read_uncommitted")
    ]
    for consumer in consumers:
        await consumer.start()

    async def unreadable(topic: str) -> dict[int, int]:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        stable, high = await asyncio.gather(*(c.end_offsets(tps) for c in consumers))
        return {tp.partition: high[tp] - stable[tp] for tp in tps if stable[tp] < high[tp]}

    try:
        yield unreadable
    finally:
        for consumer in consumers:
            await consumer.stop()


async def test_replay_equals_offline_projection_and_reruns_write_nothing(
    bootstrap_servers: str, prefix: str, read_topic: ReadTopic
) -> None:
    settings = Settings(bootstrap_servers=bootstrap_servers, topic_prefix=prefix,
                        partitions=PARTITIONS)
    in_range = await _publish(bootstrap_servers, TopicNames(prefix).agent_events, _raw_stream())
    target = f"{prefix}.replayed"

    async with _unreadable(bootstrap_servers) as unreadable:
        summary = await replay(settings, projection="typed", from_ts=T1 / 1000,
                               to_ts=T2 / 1000, to_topic=target)
        # Readable as soon as it returns (the commit markers are written asynchronously).
        assert await unreadable(target) == {}
    expected = _offline_by_run(in_range, "typed")
    got = await _target_by_run(read_topic, target)
    assert got == expected
    assert summary.total("records_in") == len(in_range)
    assert summary.total("records_out") == sum(map(len, expected.values()))
    assert not summary.resumed
    # The range starts mid-run: such a run opens with a gap for what came before.
    assert any(b'"gap":{"from_index":0' in values[0] for values in got.values())

    again = await replay(settings, projection="typed", from_ts=T1 / 1000, to_ts=T2 / 1000,
                         to_topic=target)
    assert again.already_complete
    assert await _target_by_run(read_topic, target) == expected


async def test_replay_killed_in_a_transaction_resumes_its_plan_without_duplicates(
    bootstrap_servers: str, prefix: str, read_topic: ReadTopic, tmp_path: Path
) -> None:
    """A replay process SIGKILLed with a transaction open; the rerun resumes exactly the
    planned range (not the records published since), writes nothing twice, and what it
    committed is readable the moment it returns."""
    settings = Settings(bootstrap_servers=bootstrap_servers, topic_prefix=prefix,
                        partitions=PARTITIONS, batch_max_records=7)
    lines = _raw_stream(seed=5)
    await _publish(bootstrap_servers, TopicNames(prefix).agent_events, lines)
    target = f"{prefix}.resumed"
    # No --to: the range ends where the raw topic ends when the replay is first planned.
    args = ["replay", "--projection", "chunks", "--from", str(T0 / 1000), "--to-topic", target]
    fault = Fault("in_transaction", 3)
    first = ConsumerProcess("replay", prefix, tmp_path, args=args, batch_max_records=7,
                            partitions=PARTITIONS, fault_freeze=fault.setting).start()
    try:
        await wait_frozen(first, fault)
        kill(first)
    finally:
        first.stop()
    partial = sum(map(len, (await _target_by_run(read_topic, target)).values()))
    assert partial > 0

    # Records published after the first start are outside the planned range.
    extra = orjson.dumps({"run_id": "late", "index": 0, "kind": "text_delta",
                          "timestamp": 1.0, "text": "late"})
    await _publish_one(bootstrap_servers, TopicNames(prefix).agent_events, extra)

    async with _unreadable(bootstrap_servers) as unreadable:
        assert await unreadable(target) != {}, "the kill left its transaction open"
        summary = await replay(settings, projection="chunks", from_ts=T0 / 1000, to_ts=None,
                               to_topic=target)
        # Everything the replay committed is readable the moment it returns, its last
        # batch included: commit_transaction returns before the commit markers are
        # written; a reader starting before they are would see the last batch missing.
        assert await unreadable(target) == {}
    assert summary.resumed and not summary.already_complete
    assert await _target_by_run(read_topic, target) == _offline_by_run(lines, "chunks")
    assert summary.total("records_in") == len(lines)
    # The killed process's open transaction was written, then aborted.
    uncommitted = await read_topic(target, isolation_level="read_uncommitted")
    assert len(uncommitted) > summary.total("records_out")


async def _publish_one(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value=value, key=orjson.loads(value)["run_id"].encode())
    finally:
        await producer.stop()


async def test_replay_cli_refuses_live_topics_and_prints_json(
    bootstrap_servers: str, prefix: str, read_topic: ReadTopic
) -> None:
    names = TopicNames(prefix)
    env = {"SYMFONIC_TOPIC_PREFIX": prefix, "SYMFONIC_PARTITIONS": str(PARTITIONS)}
    status, _, err = await run_cli("replay", "--projection", "typed", "--from", "0",
                                   "--to-topic", names.stream_events,
                                   bootstrap=bootstrap_servers, env=env)
    assert status == 2 and "--force" in err
    status, _, err = await run_cli("replay", "--projection", "typed", "--from", "0",
                                   "--to-topic", names.agent_events, "--force",
                                   bootstrap=bootstrap_servers, env=env)
    assert status == 2 and "not an output topic" in err

    in_range = await _publish(bootstrap_servers, names.agent_events, _raw_stream(seed=3))
    target = f"{prefix}.cli"
    status, out, err = await run_cli(
        "replay", "--projection", "typed", "--from", format_ts(T1 / 1000),  # ISO-8601
        "--to", str(T2 / 1000), "--to-topic", target, "--json",
        bootstrap=bootstrap_servers, env=env,
    )
    assert status == 0, err
    summary: dict[str, Any] = orjson.loads(out)
    assert summary["records_in"] == len(in_range)
    assert summary["records_out"] == len(await read_topic(target))
    assert summary["already_complete"] is False
    assert progress_topic(target).startswith(target)


async def test_a_failed_commit_is_rolled_back_and_retried_in_the_same_replay(
    bootstrap_servers: str, prefix: str, read_topic: ReadTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that fails (outputs sent, never committed) is aborted; the replay's task is
    rebuilt from what its progress topic holds, as a live consumer's, and goes on: nothing
    it sent in the aborted transaction is ever visible to read_committed readers."""
    settings = Settings(bootstrap_servers=bootstrap_servers, topic_prefix=prefix,
                        partitions=PARTITIONS, batch_max_records=9)
    lines = _raw_stream(seed=8)
    await _publish(bootstrap_servers, TopicNames(prefix).agent_events, lines)
    target = f"{prefix}.fenced"
    commits = 0
    real_commit = AIOKafkaProducer.commit_transaction

    async def failing_commit(self: AIOKafkaProducer) -> None:
        nonlocal commits
        commits += 1
        if commits == 3:  # the plan, one batch, then a commit that fails
            raise RuntimeError("the broker said no")
        await real_commit(self)

    monkeypatch.setattr(AIOKafkaProducer, "commit_transaction", failing_commit)
    summary = await replay(settings, projection="typed", from_ts=T0 / 1000, to_ts=None,
                           to_topic=target)
    assert commits > 3 and not summary.resumed
    assert await _target_by_run(read_topic, target) == _offline_by_run(lines, "typed")
    # The failed transaction's outputs were written, then aborted: read_uncommitted only.
    uncommitted = await read_topic(target, isolation_level="read_uncommitted")
    assert len(uncommitted) > summary.total("records_out")


async def test_replay_of_an_offset_range_of_one_partition_equals_offline(
    bootstrap_servers: str, prefix: str, read_topic: ReadTopic
) -> None:
    settings = Settings(bootstrap_servers=bootstrap_servers, topic_prefix=prefix,
                        partitions=PARTITIONS)
    raw_topic = TopicNames(prefix).agent_events
    await _publish(bootstrap_servers, raw_topic, _raw_stream(seed=21))
    raw = await read_topic(raw_topic)
    in_range = [r.value for r in raw if r.partition == 1 and 5 <= r.offset < 40 and r.value]
    assert len(in_range) == 35
    target = f"{prefix}.offsets"

    summary = await replay(settings, projection="typed", from_offsets={1: 5},
                           to_offsets={1: 40}, to_topic=target)
    assert sorted(summary.partitions) == [1]
    assert (summary.partitions[1].start, summary.partitions[1].end) == (5, 40)
    assert summary.total("records_in") == 35
    assert await _target_by_run(read_topic, target) == _offline_by_run(in_range, "typed")


async def test_replay_cli_takes_offsets_and_refuses_bad_ones(
    bootstrap_servers: str, prefix: str, read_topic: ReadTopic
) -> None:
    names = TopicNames(prefix)
    env = {"SYMFONIC_TOPIC_PREFIX": prefix, "SYMFONIC_PARTITIONS": str(PARTITIONS)}
    await _publish(bootstrap_servers, names.agent_events, _raw_stream(seed=5))
    raw = await read_topic(names.agent_events)
    target = f"{prefix}.cli-offsets"

    status, out, err = await run_cli(
        "replay", "--projection", "chunks", "--from-offset", "4", "--to-topic", target,
        "--json", bootstrap=bootstrap_servers, env=env,
    )
    assert status == 0, err
    summary: dict[str, Any] = orjson.loads(out)
    ends = {p: 1 + max(r.offset for r in raw if r.partition == p) for p in range(PARTITIONS)}
    assert summary["from_offset"] == 4 and summary["from"] is None
    assert summary["ranges"] == {str(p): [4, end] for p, end in ends.items()}
    in_range = [r.value for r in raw if r.offset >= 4 and r.value]
    assert summary["records_in"] == len(in_range)
    assert await _target_by_run(read_topic, target) == _offline_by_run(in_range, "chunks")

    for args, message in [
        (["--from-offset", f"{PARTITIONS}:0"], f"no partition {PARTITIONS}"),
        (["--from-offset", "ten"], "'ten' is not a whole number"),
        (["--from", "0", "--from-offset", "3"], "give the start of the range"),
        (["--from-offset", "9", "--to-offset", "2"], "is before --from-offset 9"),
    ]:
        status, _, err = await run_cli(
            "replay", "--projection", "typed", *args, "--to-topic", f"{prefix}.refused",
            bootstrap=bootstrap_servers, env=env,
        )
        assert status == 2, (args, err)
        assert message in err, (args, err)
