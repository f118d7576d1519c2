"""The typed and chunk projectors on the real broker: live output equals offline output.

The oracle is :func:`symfonic_stream.offline.project_lines`, the same processor with no
broker. A read_committed reader of the output topics must see, run by run, exactly the
records the offline command prints for the same input, whatever was killed or rebalanced.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.offline import project_lines
from symfonic_stream.synthetic import Damage, RunShape, deliver, generate_run, interleave
from symfonic_stream.topics import TopicNames

from .harness import ConsumerProcess, Record, TopicReader, create_topics, produce, unique_prefix

pytestmark = pytest.mark.slow

GAP_TIMEOUT_S = 4.0


def damaged_stream(seed: int, runs: int, loss: float = 0.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    shape = RunShape(min_events=20, max_events=90, pause_share=0.1)
    damage = Damage(duplicate_share=0.03, reorder_share=0.03, reorder_distance=4, loss_share=loss)
    generated = [
        deliver(rng, generate_run(rng, f"run-{seed}-{n:04d}", shape=shape), damage)
        for n in range(runs)
    ]
    return list(interleave(rng, generated))


def as_records(events: list[dict[str, Any]]) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(e["run_id"].encode(), orjson.dumps(e), []) for e in events]


def offline_by_run(events: list[dict[str, Any]], projection: str) -> dict[str, list[Any]]:
    """What `symfonic-stream project` writes for this input, grouped by run."""
    by_run: dict[str, list[Any]] = {}
    for released in project_lines((orjson.dumps(e) for e in events), projection):  # type: ignore[arg-type]
        for output in released.outputs:
            record = orjson.loads(output.value or b"")
            by_run.setdefault(record["run_id"], []).append(record)
    return by_run


def live_by_run(records: list[Record]) -> dict[str, list[Any]]:
    by_run: dict[str, list[Any]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        record = orjson.loads(r.value or b"")
        assert r.key == record["run_id"].encode()
        by_run.setdefault(record["run_id"], []).append(record)
    return by_run


def assert_same(live: dict[str, list[Any]], offline: dict[str, list[Any]], logs: str) -> None:
    for run_id, records in live.items():
        assert [r["seq"] for r in records] == list(range(len(records))), (
            f"{run_id}: seq not dense\n{logs}"
        )
    missing = sorted(set(offline) - set(live))
    assert not missing, f"{len(missing)} runs missing, e.g. {missing[:3]}\n{logs}"
    differing = [run_id for run_id in offline if live[run_id] != offline[run_id]]
    assert not differing, (
        f"{len(differing)} runs differ, e.g. {differing[0]}:\n"
        f"live    {live[differing[0]][-3:]}\noffline {offline[differing[0]][-3:]}\n{logs}"
    )


async def read_until_expected(
    topic: str, expected: dict[str, list[Any]], within: float
) -> list[Record]:
    total = sum(len(records) for records in expected.values())
    async with TopicReader(topic) as reader:
        await reader.until(total, within=within)
        await reader.settle(quiet=1.5, within=10)
        return reader.records


async def test_typed_and_chunk_output_equal_the_offline_projection(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    events = damaged_stream(seed=11, runs=220, loss=0.002)
    assert len(events) >= 10_000
    assert any(  # the input really has holes that will need gaps
        isinstance(e, dict) for e in events
    )
    settings = {"gap_timeout_s": GAP_TIMEOUT_S}
    typed = ConsumerProcess("typed", prefix, tmp_path, **settings).start()
    chunks = ConsumerProcess("chunks", prefix, tmp_path, **settings).start()
    try:
        await asyncio.gather(typed.wait_ready(), chunks.wait_ready())
        await produce(names.agent_events, as_records(events))
        for projection, topic, proc in (
            ("typed", names.stream_events, typed),
            ("chunks", names.stream_chunks, chunks),
        ):
            expected = offline_by_run(events, projection)
            gaps = sum("gap" in r for records in expected.values() for r in records)
            assert gaps > 0, "the stream should contain holes"
            records = await read_until_expected(topic, expected, within=120)
            assert_same(live_by_run(records), expected, proc.log())
    finally:
        typed.stop()
        chunks.stop()


async def test_sigkill_mid_stream_and_restart_gives_the_same_output(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    events = damaged_stream(seed=12, runs=120)
    expected = offline_by_run(events, "typed")
    first = ConsumerProcess("typed", prefix, tmp_path, name="-first").start()
    second = ConsumerProcess("typed", prefix, tmp_path, name="-second")
    try:
        await first.wait_ready()
        feeder = asyncio.create_task(produce(names.agent_events, as_records(events), rate=2500))
        async with TopicReader(names.stream_events) as reader:
            await reader.until(1500, within=60)
        first.kill()
        second.start()
        await feeder
        await second.wait_ready()
        records = await read_until_expected(names.stream_events, expected, within=120)
        assert_same(live_by_run(records), expected, first.log() + second.log())
    finally:
        first.stop()
        second.stop()


async def test_two_instances_one_killed_and_restarted_while_input_flows(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    events = damaged_stream(seed=13, runs=150)
    expected = offline_by_run(events, "typed")
    a = ConsumerProcess("typed", prefix, tmp_path, name="-a").start()
    b = ConsumerProcess("typed", prefix, tmp_path, name="-b").start()
    b_again = ConsumerProcess("typed", prefix, tmp_path, name="-b-again")
    try:
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        feeder = asyncio.create_task(produce(names.agent_events, as_records(events), rate=1500))
        await asyncio.sleep(2.0)
        b.kill()  # its partitions move to a
        await asyncio.sleep(3.0)
        b_again.start()  # and some move back
        await feeder
        records = await read_until_expected(names.stream_events, expected, within=150)
        assert_same(live_by_run(records), expected, a.log() + b.log() + b_again.log())
    finally:
        for proc in (a, b, b_again):
            proc.stop()


async def test_hole_becomes_a_gap_and_buffered_events_survive_a_sigkill(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    run = "run-with-a-hole"

    def text(index: int) -> dict[str, Any]:
        return {
            "run_id": run,
            "index": index,
            "kind": "text_delta",
            "timestamp": 1000.0 + index,
            "text": f"t{index}",
        }

    first = ConsumerProcess("typed", prefix, tmp_path, name="-first", gap_timeout_s=6).start()
    second = ConsumerProcess("typed", prefix, tmp_path, name="-second", gap_timeout_s=6)
    try:
        await first.wait_ready()
        await produce(names.agent_events, as_records([text(0), text(3), text(4)]))
        async with TopicReader(names.stream_events) as reader:
            await reader.until(1, within=30)
            await asyncio.sleep(1.5)  # 3 and 4 are buffered, committed to the changelog
            assert len(reader.records) == 1
            first.kill()
            second.start()
            await second.wait_ready()
            started = time.monotonic()
            await reader.until(4, within=60)
        waited = time.monotonic() - started
        got = [orjson.loads(r.value or b"") for r in reader.records]
        assert [r.get("gap") for r in got] == [None, {"from_index": 1, "to_index": 2}, None, None]
        assert [r["seq"] for r in got] == [0, 1, 2, 3]
        assert [r["source_index"] for r in got] == [0, None, 3, 4]
        assert got[1]["ts"] == 1003.0
        assert waited < 60
    finally:
        first.stop()
        second.stop()


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"r", b"x" * 5000, "too_large"),
        (b"r", b"{not json", "invalid_json"),
        (b"r", b'{"run_id": "r", "index": "0", "kind": "done", "timestamp": 1}', "invalid_event"),
        (b"other", b'{"run_id": "r", "index": 0, "kind": "done", "timestamp": 1}', "key_mismatch"),
        # keyless: the dead letter keeps no key and goes to the input partition's number
        (None, b'{"run_id": "r", "index": 0, "kind": "done", "timestamp": 1}', "key_mismatch"),
    ],
)
async def test_each_dead_letter_reason_reaches_the_topic_and_the_consumer_goes_on(
    bootstrap_servers: str, tmp_path: Path, key: bytes | None, value: bytes, reason: str
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    proc = ConsumerProcess("typed", prefix, tmp_path, max_record_bytes=4096).start()
    try:
        await proc.wait_ready()
        good = {"run_id": "ok", "index": 0, "kind": "text_delta", "timestamp": 1.0, "text": "x"}
        await produce(names.agent_events, [(key, value, [("trace", b"abc")])], partition=0)
        await produce(names.agent_events, [(b"ok", orjson.dumps(good), [])], partition=0)
        async with TopicReader(names.dead_letter) as letters:
            [letter] = await letters.until(1, within=60)
        async with TopicReader(names.stream_events) as out:
            [after] = await out.until(1, within=60)
        headers = dict(letter.headers)
        assert (letter.key, letter.value) == (key, value)
        if key is None:
            assert letter.partition == 0
        assert headers["trace"] == b"abc"
        assert headers["symfonic-dlq-reason"] == reason.encode()
        assert headers["symfonic-dlq-source"] == f"{names.agent_events}/0/0".encode()
        assert headers["symfonic-dlq-consumer"] == b"typed"
        assert headers["symfonic-dlq-detail"]
        assert orjson.loads(after.value or b"")["event"]["text"] == "x"
    finally:
        proc.stop()


async def test_run_closed_is_dead_lettered_live(bootstrap_servers: str, tmp_path: Path) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    proc = ConsumerProcess("typed", prefix, tmp_path).start()
    try:
        await proc.wait_ready()
        done = {"run_id": "r", "index": 0, "kind": "cancelled", "timestamp": 1.0}
        late = {"run_id": "r", "index": 1, "kind": "text_delta", "timestamp": 2.0, "text": "x"}
        await produce(names.agent_events, as_records([done, late]))
        async with TopicReader(names.dead_letter) as letters:
            [letter] = await letters.until(1, within=60)
        assert dict(letter.headers)["symfonic-dlq-reason"] == b"run_closed"
        assert AgentEvent.model_validate_json(letter.value or b"").index == 1
    finally:
        proc.stop()


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy", "gzip"])
async def test_outputs_are_written_with_each_compression_codec(
    bootstrap_servers: str, codec: str
) -> None:
    from symfonic_stream.processors.projector import projector_topology

    from .harness import InProcessEngine, settings_for

    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    settings = settings_for(prefix, compression=codec)
    events = [
        {"run_id": "z", "index": i, "kind": "text_delta", "timestamp": 1.0, "text": "x" * 200}
        for i in range(20)
    ]
    async with InProcessEngine(projector_topology("typed", settings), settings):
        await produce(names.agent_events, as_records(events))
        async with TopicReader(names.stream_events) as reader:
            got = await reader.until(20, within=60)
    assert [orjson.loads(r.value or b"")["seq"] for r in got] == list(range(20))
