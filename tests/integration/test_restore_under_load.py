"""Issue 32: a consumer that gets many partitions back at once restores every one of them
whole, and the runs it holds go on exactly as the reference projects them.

Open runs (their first events) are spread over 12 partitions; instance A holds them all, B
joins (each restores its share) and leaves (A restores all 12 at once, while it projects),
then every run's remaining events arrive. Fetches are cut to 16 KiB, each poll of a
restore hands over 50 records, each record costs the CPU of ~200 runs of a million-run
state, and a restoring partition that stops moving is suspected after 0.2 s. Before the
fix, suspicion ended partitions early ("treating it as restored") and their runs lost their
state: a run's next event waited for an index the guard had already projected.

Kept state (``SYMFONIC_STATE_KEEP_S``) and the warm-up assignor would serve these partitions
from memory (issue 36), and the restore under test would not run (issue 45): they are off
here, so every set-up restores whole, which the test checks (the records A restored when B
left, and the cut's calls).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.engine import setup as restoring
from symfonic_stream.models.names import TopicNames
from symfonic_stream.state import restore
from symfonic_stream.tools.synthetic import RunShape, generate_run
from tests.reference import oracle

from .conftest import read_to_end
from .harness import (
    BOOTSTRAP,
    InProcessEngine,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    wait_caught_up,
)
from .observe import wait_until

PARTITIONS = 12
#: Fetches cut to 16 KiB: a response holds one partition's records, the others come back empty.
FETCH_BYTES = 16_384
#: Each changelog record here costs what ~200 runs of a million-run state cost to restore.
RECORD_COST_S = 0.002
RUNS = 1_200
RESTORED = "state_records_restored_total"
Event = dict[str, object]


def _runs(seed: int) -> list[list[Event]]:
    rng = random.Random(seed)
    shape = RunShape(min_events=2, max_events=4, pause_share=0.0)
    return [generate_run(rng, f"load-{seed}-{n:05d}", shape=shape) for n in range(RUNS)]


def _records(events: Sequence[Event]) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(str(e["run_id"]).encode(), orjson.dumps(e), []) for e in events]


def _check(names: TopicNames, sent: Sequence[Event], typed: list[bytes | None]) -> None:
    """The typed topic against the reference projection of everything sent, run by run."""
    expected, dead = oracle.project((orjson.dumps(e) for e in sent), "typed")
    assert not dead
    got = oracle.envelopes_by_run(orjson.loads(value or b"") for value in typed)
    want = oracle.envelopes_by_run(expected)
    assert set(got) == set(want)
    wrong = [run for run in want if got[run] != want[run]]
    assert not wrong, (f"{len(wrong)} of {len(want)} runs differ from the reference, e.g. "
                       f"{wrong[0]}: {[e['seq'] for e in got[wrong[0]]]}")


def _owned(*engines: InProcessEngine) -> list[int]:
    return sorted(p for e in engines for p in e.engine.owned_partitions)


def _cut(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Restores as a loaded instance with a million runs sees them, at a test's size; the
    list counts the records the cut restore handed to a store."""
    monkeypatch.setattr(restore, "SETTLE_S", 0.2)
    monkeypatch.setattr(restore, "_MAX_RECORDS", 50)
    restore_one = restore._restore_one
    handed = [0]

    def with_a_millions_cost(*args: Any) -> bool:
        began = time.perf_counter()
        while time.perf_counter() - began < RECORD_COST_S:
            pass
        handed[0] += 1
        return restore_one(*args)

    monkeypatch.setattr(restore, "_restore_one", with_a_millions_cost)
    return handed


async def test_runs_go_on_after_an_instance_joins_and_leaves_under_cut_restores(
    bootstrap_servers: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = _cut(monkeypatch)
    settings = (await create_topics(prefix, with_copier=False, partitions=PARTITIONS)
                ).model_copy(update={"batch_max_bytes": FETCH_BYTES, "state_keep_s": 0})
    names = TopicNames(prefix)
    topology = projector_topology("typed", settings)
    runs = _runs(seed=32)
    first, rest = [r[0] for r in runs], [e for r in runs for e in r[1:]]
    async with InProcessEngine(topology, settings) as a:
        await produce(names.agent_events, _records(first))
        await wait_caught_up(names.group("typed"), names.agent_events)
        async with InProcessEngine(topology, settings) as b:
            await wait_until(lambda: _split(a, b), "A and B share the partitions", within=90)
            assert b.sample(RESTORED) > 0, "B restored its share"
            before_leave, handed_before = a.sample(RESTORED), handed[0]
        await wait_until(lambda: _all_ready(a), "A holds all 12 again", within=120)
        # A restored every partition whole, through the cut: each run's state at least.
        assert a.sample(RESTORED) - before_leave >= RUNS
        assert handed[0] - handed_before >= RUNS
        await produce(names.agent_events, _records(rest))
        await wait_caught_up(names.group("typed"), names.agent_events, within=120)
    typed = [r.value for r in await read_to_end(BOOTSTRAP, names.stream_events)]
    _check(names, first + rest, typed)


async def _split(a: InProcessEngine, b: InProcessEngine) -> bool:
    both = a.engine.owned_partitions and b.engine.owned_partitions
    return bool(both) and _owned(a, b) == list(range(PARTITIONS)) and a.health.ready \
        and b.health.ready


async def _all_ready(a: InProcessEngine) -> bool:
    return _owned(a) == list(range(PARTITIONS)) and a.health.ready


async def test_state_that_disagrees_with_the_group_is_restored_again(
    bootstrap_servers: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    """The check behind the restore: a first restore that misses the changelog's tail
    (made so here: its end offsets taken a third short) leaves a position that disagrees
    with the group's committed offset. Set-up restores again and the runs go on whole,
    instead of resuming at the group's offset without their state."""
    settings = await create_topics(prefix, with_copier=False, partitions=PARTITIONS)
    settings = settings.model_copy(update={"group_offset_interval_ms": 1})
    names = TopicNames(prefix)
    topology = projector_topology("typed", settings)
    runs = _runs(seed=33)
    first, rest = [r[0] for r in runs], [e for r in runs for e in r[1:]]
    async with InProcessEngine(topology, settings):
        for part in range(4):  # several transactions per partition, each telling the group
            await produce(names.agent_events, _records(first[part::4]))
            await wait_caught_up(names.group("typed"), names.agent_events)

    real, calls = restore.restore_stores, []
    shortening = False
    real_ends = AIOKafkaConsumer.end_offsets

    async def short_ends(self: Any, partitions: list[Any]) -> dict[Any, int]:
        ends = await real_ends(self, partitions)
        return {tp: end * 2 // 3 if shortening else end for tp, end in ends.items()}

    async def short_first(*args: Any, **kwargs: Any) -> restore.Restored:
        nonlocal shortening
        calls.append(1)
        shortening = len(calls) == 1
        try:
            return await real(*args, **kwargs)
        finally:
            shortening = False

    monkeypatch.setattr(AIOKafkaConsumer, "end_offsets", short_ends)
    monkeypatch.setattr(restoring, "restore_stores", short_first)
    with caplog.at_level("INFO"):
        async with InProcessEngine(topology, settings):
            await produce(names.agent_events, _records(rest))
            await wait_caught_up(names.group("typed"), names.agent_events, within=120)
    typed = [r.value for r in await read_to_end(BOOTSTRAP, names.stream_events)]
    _check(names, first + rest, typed)
    assert len(calls) == 2
    assert any("restoring again" in r.getMessage() for r in caplog.records)
    assert any("missed the changelog's tail" in r.getMessage() for r in caplog.records)

