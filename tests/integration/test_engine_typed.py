"""The typed projector on the engine. Crashed mid-transaction and restarted, its state (the
ordering guard's per-run seq and buffers) comes back from the changelog, so the committed
output equals the offline projection of the same input, run by run; and its gap timeout
fires from the engine's wall-clock timer on a partition that receives nothing more; and the
state it restores is frozen out of the garbage collector's walks."""

from __future__ import annotations

import asyncio
import gc
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.engine import garbage as heap
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.synthetic import Damage, RunShape, synthetic_stream

from .harness import (
    PARTITIONS,
    ConsumerProcess,
    InProcessEngine,
    TopicReader,
    create_topics,
    kill_mid_transaction,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    settings_for,
    wait_caught_up,
)
from .kafka_view import transactional_ids
from .observe import (
    RESTORED,
    metric_value,
    quiesce,
    read_to_committed_end,
    wait_engine_idle,
    wait_until,
)
from .workloads import reference_values_by_run


@pytest.mark.slow
async def test_typed_projector_survives_sigkill_with_its_state(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    events = synthetic_stream(
        7, 60, shape=RunShape(min_events=20, max_events=120),
        damage=Damage(duplicate_share=0.02, reorder_share=0.02, loss_share=0.0),
    )
    records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
        (str(e["run_id"]).encode(), orjson.dumps(e), []) for e in events
    ]
    group, source = names.group("typed"), names.agent_events
    first = ConsumerProcess("typed", prefix, tmp_path, name="-first").start()
    second = ConsumerProcess("typed", prefix, tmp_path, name="-restarted")
    try:
        await first.wait_ready()
        # Two thirds before the kill, the rest after it: the successor always has input that
        # needs the state it restored (asserting that the first feed was still running at
        # the kill raced the machine's load: CI once saw it done).
        split = len(records) * 2 // 3
        feeder = asyncio.create_task(produce(source, records[:split], rate=1500))
        async with TopicReader(names.stream_events) as reader:
            progress = await reader.until(300, within=60)  # a precondition, not the result
        assert len(progress) >= 300, "the first instance must be well into the stream"
        assert await kill_mid_transaction(
            first, names.stream_events, transactional_ids(group, source, range(PARTITIONS)))
        await feeder
        second.start()
        await produce(source, records[split:], rate=1500)
        await second.wait_ready(within=90)
        await wait_caught_up(group, source, within=120)
        # The restarted instance rebuilt the guard's state from the changelog.
        restored = await metric_value(second, RESTORED)
        assert restored > 0
        await quiesce(group, source, [second])  # every hole's gap written, then stopped
        live = await read_to_committed_end(
            names.stream_events, group=group, source=source, processes=[first, second]
        )
        letters = await read_to_committed_end(
            names.dead_letter, group=group, source=source, processes=[first, second]
        )
    finally:
        first.stop()
        second.stop()

    live_by_run: dict[str, list[bytes]] = defaultdict(list)
    for record in sorted(live, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None and record.value is not None
        live_by_run[record.key.decode()].append(record.value)
    expected = reference_values_by_run((orjson.dumps(e) for e in events), "typed")
    assert set(live_by_run) == set(expected)
    for run_id, outputs in expected.items():
        assert live_by_run[run_id] == outputs, f"run {run_id} differs\n{second.log()}"
    assert letters == []


async def test_gap_timeout_fires_on_an_idle_partition(bootstrap_servers: str, prefix: str) -> None:
    await create_topics(prefix, with_copier=False)
    settings = settings_for(prefix, gap_timeout_s=1.0)
    names = TopicNames(prefix)

    def event(index: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        value = {"run_id": "run-gap", "index": index, "kind": "text_delta",
                 "timestamp": 1_700_000_000.0 + index, "text": f"t{index}"}
        return b"run-gap", orjson.dumps(value), []

    group, source = names.group("typed"), names.agent_events
    async with InProcessEngine(projector_topology("typed", settings), settings) as running:
        # Index 2 never comes, and nothing else arrives afterwards on that partition.
        await produce(source, [event(0), event(1), event(3)])

        async def gap_written() -> bool:
            return running.sample("gaps_total") >= 1

        # The event: the engine's timer wrote the gap (index 3 was held behind it). Then
        # nothing is buffered and the input is committed.
        await wait_until(gap_written, "the gap timeout fires", within=30)
        await wait_engine_idle(running)
        await wait_caught_up(group, source)
    # Stopped: nothing more can be written. Read to the end.
    assert running.sample("gaps_total") == 1
    records = await read_to_committed_end(
        names.stream_events, group=group, source=source, processes=[]
    )
    envelopes = [orjson.loads(r.value) for r in records if r.value is not None]
    assert [e["seq"] for e in envelopes] == [0, 1, 2, 3]
    assert envelopes[2]["gap"] == {"from_index": 2, "to_index": 2}
    assert envelopes[3]["source_index"] == 3


async def test_set_up_freezes_the_restored_state_out_of_collections(
    bootstrap_servers: str, prefix: str
) -> None:
    """engine/heap.py, live: a task set up from its changelog holds its runs as restored
    (encoded, in its backend's dicts), and a full collection no longer walks them (each
    once, at set-up); their values are no containers the collector tracks at all."""
    await create_topics(prefix, with_copier=False)
    settings = settings_for(prefix)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    events = [(f"run-{i}".encode(), orjson.dumps({
        "run_id": f"run-{i}", "index": 0, "kind": "text_delta",
        "timestamp": 1_700_000_000.0, "text": "t"}), []) for i in range(40)]
    async with InProcessEngine(projector_topology("typed", settings), settings) as first:
        await produce(source, events)
        await wait_caught_up(group, source)
        await wait_engine_idle(first)
    async with InProcessEngine(projector_topology("typed", settings), settings) as second:
        backends = [task.store_partition.backend for task in second.engine.tasks.values()]
        held = [values for backend in backends
                for values in backend._stores.values()]  # type: ignore[attr-defined]
        assert sum(len(values) for values in held) >= 40  # the runs (and the positions)
        assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
        walked = {id(obj) for obj in gc.get_objects()}
        assert not [values for values in held if id(values) in walked]
        assert not [v for values in held for v in values.values() if gc.is_tracked(v)]
