"""The typed and chunk projectors on the real broker: live output equals the reference.

The oracle is :mod:`tests.reference.oracle`, contract §2-5 written without the code under test.
A read_committed reader of the output topics must see, run by run, exactly the envelopes
the reference projection gives the same input, whatever was killed or rebalanced. No gap
timeout fires while input flows (holes are filled by a restarted instance with a short
timeout, or not at all), so what the live run writes does not depend on how fast it ran.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.synthetic import Damage, RunShape, deliver, generate_run, interleave
from tests.reference import oracle

from .conftest import read_to_end
from .harness import (
    BOOTSTRAP,
    PARTITIONS,
    ConsumerProcess,
    Record,
    TopicReader,
    create_topics,
    kill_mid_transaction,
    produce,
    unique_prefix,
    wait_caught_up,
)
from .kafka_view import transactional_ids
from .observe import (
    BUFFERED_GAUGE as BUFFERED,
)
from .observe import (
    RESTORED,
    ChangelogRun,
    delete_all_records,
    metric_value,
    owned_only_by,
    quiesce,
    read_to_committed_end,
    split_between,
    stop_gracefully,
    wait_changelog_state,
    wait_committed,
    wait_for_assignment,
    wait_until,
)
from .workloads import reference_by_run

pytestmark = pytest.mark.slow

#: No hole times out while a test feeds input: only the input's order decides the output.
NO_GAP_S = 600
#: A restarted instance's: the holes it restores are filled soon after.
GAP_SOON_S = 0.5


def damaged_stream(seed: int, runs: int, loss: float = 0.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    shape = RunShape(min_events=20, max_events=90, pause_share=0.1)
    damage = Damage(duplicate_share=0.03, reorder_share=0.03, reorder_distance=4, loss_share=loss)
    generated = [
        deliver(rng, generate_run(rng, f"run-{seed}-{n:04d}", shape=shape), damage)
        for n in range(runs)
    ]
    return list(interleave(rng, generated))


def runs_with_holes(events: list[dict[str, Any]]) -> set[str]:
    """Runs whose input misses an index below one that did arrive: a hole only a gap fills
    (an index lost at a run's very end is never noticed, so it is no hole)."""
    seen: dict[str, set[int]] = {}
    for event in events:
        seen.setdefault(event["run_id"], set()).add(event["index"])
    return {run for run, indexes in seen.items() if len(indexes) != max(indexes) + 1}


def as_records(events: list[dict[str, Any]]) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(e["run_id"].encode(), orjson.dumps(e), []) for e in events]


def expected_by_run(events: list[dict[str, Any]], projection: oracle.ProjectionName
                   ) -> dict[str, list[Any]]:
    """What the reference projection writes for this input, grouped by run."""
    return reference_by_run((orjson.dumps(e) for e in events), projection)


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
    extra = sorted(set(live) - set(offline))
    assert not extra, f"{len(extra)} runs the input does not have, e.g. {extra[:3]}\n{logs}"
    differing = [run_id for run_id in offline if live[run_id] != offline[run_id]]
    assert not differing, (
        f"{len(differing)} runs differ, e.g. {differing[0]}:\n"
        f"live    {live[differing[0]][-3:]}\noffline {offline[differing[0]][-3:]}\n{logs}"
    )


def logs_of(*processes: ConsumerProcess) -> str:
    return "\n".join(f"--- {p.log_path.name}\n{p.log()}" for p in processes)


async def test_typed_and_chunk_output_equal_the_reference_projection(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Both projectors consume everything with holes waiting (no gap times out), stop, and
    their successors fill the holes from the restored state: the reference fills exactly
    the input's holes with gaps at its end of input, and so must they."""
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    events = damaged_stream(seed=11, runs=220, loss=0.002)
    assert len(events) >= 10_000
    holes = runs_with_holes(events)
    assert holes, "the input must have holes that will need gaps"
    source = names.agent_events
    projections = (("typed", names.stream_events), ("chunks", names.stream_chunks))
    waiting = {p: ConsumerProcess(p, prefix, tmp_path, name="-waiting", gap_timeout_s=NO_GAP_S)
               for p, _ in projections}
    filling = {p: ConsumerProcess(p, prefix, tmp_path, name="-filling", gap_timeout_s=GAP_SOON_S)
               for p, _ in projections}
    try:
        for process in waiting.values():
            process.start()
        await asyncio.gather(*(p.wait_ready() for p in waiting.values()))
        await produce(source, as_records(events))
        for projection, _ in projections:
            await quiesce_holding(names.group(projection), source, waiting[projection])
        for projection, topic in projections:
            expected = expected_by_run(events, projection)
            gapped = {run for run, records in expected.items() if any("gap" in r for r in records)}
            assert gapped == holes, "the oracle must fill exactly the input's holes with gaps"
            proc = filling[projection].start()
            await proc.wait_ready()
            group = names.group(projection)
            await quiesce(group, source, [proc])  # every gap written, then stopped
            records = await read_to_committed_end(
                topic, group=group, source=source, processes=[waiting[projection], proc]
            )
            assert_same(live_by_run(records), expected, proc.log())
    finally:
        for process in (*waiting.values(), *filling.values()):
            process.stop()


async def quiesce_holding(group: str, source: str, process: ConsumerProcess) -> None:
    """Until ``group`` committed all of ``source`` with ``process`` holding events behind
    its holes; then it stops (SIGTERM, exit 0)."""
    await wait_caught_up(group, source, within=120)
    await wait_until(lambda: _buffering(process), f"{process.log_path.name} holds its holes")
    await stop_gracefully(process)


async def _buffering(process: ConsumerProcess) -> bool:
    return await metric_value(process, BUFFERED) > 0


async def test_sigkill_mid_transaction_and_restart_gives_the_same_output(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    events = damaged_stream(seed=12, runs=120)
    expected = expected_by_run(events, "typed")
    processes = {  # (no loss: every hole is filled by its event, never by a gap)
        "first": ConsumerProcess("typed", prefix, tmp_path, name="-first",
                                 gap_timeout_s=NO_GAP_S),
        "second": ConsumerProcess("typed", prefix, tmp_path, name="-second",
                                  gap_timeout_s=NO_GAP_S),
    }
    first, second = processes["first"], processes["second"]
    try:
        await first.start().wait_ready()
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "first"), "first alone"
        )
        feeder = asyncio.create_task(produce(source, as_records(events), rate=1000))
        async with TopicReader(names.stream_events) as reader:
            progress = await reader.until(1500, within=60)
        assert len(progress) >= 1500, "the first instance must be well into the stream"
        caught_open = await kill_mid_transaction(
            first, names.stream_events, transactional_ids(group, source, range(PARTITIONS)),
            input_flows=feeder)
        assert caught_open, "the kill must leave a transaction open"
        assert not feeder.done(), "the kill must happen while input still flows"
        await second.start().wait_ready()
        await feeder
        # The dead member's session expires, then the group gives everything to the second.
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "second"), "second alone"
        )
        await quiesce(group, source, [second])
        records = await read_to_committed_end(
            names.stream_events, group=group, source=source, processes=[first, second]
        )
        everything = await read_to_end(
            BOOTSTRAP, names.stream_events, isolation_level="read_uncommitted"
        )
    finally:
        first.stop()
        second.stop()
    assert_same(live_by_run(records), expected, logs_of(first, second))
    # The zombie's open transaction reached the log and was aborted, not committed.
    assert len(everything) > len(records)


async def test_two_instances_one_killed_and_restarted_while_input_flows(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    events = damaged_stream(seed=13, runs=150)
    expected = expected_by_run(events, "typed")
    processes = {  # (no loss: every hole is filled by its event, never by a gap)
        name: ConsumerProcess("typed", prefix, tmp_path, name=f"-{name}", gap_timeout_s=NO_GAP_S)
        for name in ("a", "b", "b_again")
    }
    a, b, b_again = processes["a"], processes["b"], processes["b_again"]
    try:
        a.start()
        b.start()
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        before = await wait_for_assignment(
            group, source, processes, lambda o: split_between(o, "a", "b"), "a and b"
        )
        feeder = asyncio.create_task(produce(source, as_records(events), rate=500))
        # b is working: it committed output for each of its partitions.
        await wait_committed(group, source, before.owners["b"])
        caught_open = await kill_mid_transaction(
            b, names.stream_events, transactional_ids(group, source, before.owners["b"]),
            input_flows=feeder)
        assert caught_open, "b must die with a transaction open"
        assert not feeder.done(), "the kill must happen while input still flows"
        # b's partitions move to a once b's session expires (b never left: SIGKILL).
        alone = await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "a"), "a alone"
        )
        assert set(alone.member_of) == {"a"} and alone.member("a") == before.member("a")
        assert alone.owners["a"] > before.owners["a"]
        b_again.start()
        await b_again.wait_ready()
        # ... and some move back to the new instance.
        shared = await wait_for_assignment(
            group, source, processes, lambda o: split_between(o, "a", "b_again"), "a and b_again"
        )
        assert shared.owners["b_again"] and shared.owners["a"] < alone.owners["a"]
        await feeder
        await quiesce(group, source, [a, b_again])
        records = await read_to_committed_end(
            names.stream_events, group=group, source=source, processes=list(processes.values())
        )
    finally:
        for proc in (a, b, b_again):
            proc.stop()
    assert_same(live_by_run(records), expected, logs_of(a, b, b_again))


async def test_hole_becomes_a_gap_and_buffered_events_survive_a_sigkill(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Events buffered behind a hole live only in the changelog across a SIGKILL.

    The input is deleted before the restart, so the restarted instance cannot get indexes
    3 and 4 back by re-reading it: it must restore them (and the run's next index and seq)
    from the changelog, write the gap once, and go on numbering where the first one was.
    """
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source, changelog = names.group("typed"), names.agent_events, names.changelog("typed")
    run = "run-with-a-hole"

    def text(index: int) -> dict[str, Any]:
        return {
            "run_id": run,
            "index": index,
            "kind": "text_delta",
            "timestamp": 1000.0 + index,
            "text": f"t{index}",
        }

    def buffered_behind_the_hole(run: ChangelogRun) -> bool:
        return (run.state.next_index, run.state.next_seq, sorted(run.held)) == (1, 1, [3, 4])

    # The first instance never fills the hole (it is killed first); the second fills the
    # one it restores soon after.
    processes = {
        "first": ConsumerProcess("typed", prefix, tmp_path, name="-first",
                                 gap_timeout_s=NO_GAP_S),
        "second": ConsumerProcess("typed", prefix, tmp_path, name="-second",
                                  gap_timeout_s=GAP_SOON_S),
    }
    first, second = processes["first"], processes["second"]
    try:
        await first.start().wait_ready()
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "first"), "first alone"
        )
        await produce(source, as_records([text(0), text(3), text(4)]))
        # All three consumed and their offsets committed; 3 and 4 wait in the changelog.
        state = await wait_changelog_state(
            changelog, b"run/" + run.encode(), buffered_behind_the_hole,
            "3 and 4 buffered behind a hole",
        )
        assert [orjson.loads(state.held[i].record.value or b"")["text"]
                for i in (3, 4)] == ["t3", "t4"]
        await wait_caught_up(group, source)
        first.kill()
        before = await read_to_end(BOOTSTRAP, names.stream_events)
        assert [orjson.loads(r.value or b"")["seq"] for r in before] == [0], first.log()
        await delete_all_records(source)  # from now on only the changelog has 3 and 4
        await second.start().wait_ready()
        await wait_for_assignment(
            group, source, processes, lambda o: owned_only_by(o, "second"), "second alone"
        )
        assert await metric_value(second, RESTORED) >= 1, "the second must restore a state"
        await quiesce(group, source, [second])  # the gap is due: buffered goes to 0
        records = await read_to_committed_end(
            names.stream_events, group=group, source=source, processes=[first, second]
        )
        got = [orjson.loads(r.value or b"") for r in records]
        assert [r.get("gap") for r in got] == [None, {"from_index": 1, "to_index": 2}, None, None]
        assert [r["seq"] for r in got] == [0, 1, 2, 3]
        assert [r["source_index"] for r in got] == [0, None, 3, 4]
        assert [r["event"]["text"] for r in got if "event" in r] == ["t0", "t3", "t4"]
        assert got[1]["ts"] == 1003.0
        # ... and the second instance went on from the restored state in the changelog.
        await wait_changelog_state(
            changelog, b"run/" + run.encode(),
            lambda s: (s.state.next_index, s.state.next_seq, s.held) == (5, 4, {}),
            "continued from the restored state", within=10,
        )
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
        group, source = names.group("typed"), names.agent_events
        [letter] = await read_to_committed_end(
            names.dead_letter, group=group, source=source, processes=[proc]
        )
        [after] = await read_to_committed_end(
            names.stream_events, group=group, source=source, processes=[proc]
        )
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
        group, source = names.group("typed"), names.agent_events
        [letter] = await read_to_committed_end(
            names.dead_letter, group=group, source=source, processes=[proc]
        )
        outputs = await read_to_committed_end(
            names.stream_events, group=group, source=source, processes=[proc]
        )
        assert [orjson.loads(r.value or b"")["end"]["status"] for r in outputs] == ["cancelled"]
        assert dict(letter.headers)["symfonic-dlq-reason"] == b"run_closed"
        assert AgentEvent.model_validate_json(letter.value or b"").index == 1
    finally:
        proc.stop()


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy", "gzip"])
async def test_outputs_are_written_with_each_compression_codec(
    bootstrap_servers: str, codec: str
) -> None:
    from symfonic_stream.app.topologies import projector_topology

    from .harness import InProcessEngine, settings_for

    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    settings = settings_for(prefix, compression=codec)
    events = [
        {"run_id": "z", "index": i, "kind": "text_delta", "timestamp": 1.0, "text": "x" * 200}
        for i in range(20)
    ]
    group, source = names.group("typed"), names.agent_events
    async with InProcessEngine(projector_topology("typed", settings), settings):
        await produce(source, as_records(events))
        await wait_caught_up(group, source)
    # The engine has stopped: nothing more can be written.
    got = await read_to_committed_end(
        names.stream_events, group=group, source=source, processes=[]
    )
    assert [orjson.loads(r.value or b"")["seq"] for r in got] == list(range(20))
