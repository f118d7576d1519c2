"""Issue 36: the persistent store (``SYMFONIC_STATE_DIR``). A typed projector SIGKILLed in
the middle of a transaction is replaced by one on the same folder: it opens its stores on
disk and reads only the changelog after their checkpoint, and every run ends exactly as the
reference oracle projects it. Both ways of keeping values: on disk with a cache far smaller
than the state (``SYMFONIC_STATE_CACHE_KEYS=20``: values leave memory and are read back),
and all in memory, loaded from disk at start (``0``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.synthetic import RunShape, generate_run
from tests.reference import oracle

from .conftest import read_to_end
from .harness import (
    BOOTSTRAP,
    PARTITIONS,
    ConsumerProcess,
    create_topics,
    kill_mid_transaction,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    wait_caught_up,
)
from .kafka_view import transactional_ids
from .observe import metric_value

RUNS = 600
RESTORED = "symfonic_stream_state_records_restored_total"
Event = dict[str, object]


def _records(events: Sequence[Event]) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(str(e["run_id"]).encode(), orjson.dumps(e), []) for e in events]


@pytest.mark.parametrize(("cache_keys", "opened"), [
    (20, "state opened on its persistent store (values on disk)"),
    (0, "state loaded from its persistent store"),
])
async def test_a_restart_after_a_kill_mid_transaction_reads_only_the_changelogs_tail(
    bootstrap_servers: str, prefix: str, tmp_path: Path, cache_keys: int, opened: str
) -> None:
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source = names.group("typed"), names.agent_events
    rng = random.Random(3636)
    shape = RunShape(min_events=4, max_events=8, pause_share=0.0)
    runs = [generate_run(rng, f"disk-{n:04d}", shape=shape) for n in range(RUNS)]
    opening, rest = [r[0] for r in runs], [e for r in runs for e in r[1:]]
    folder = tmp_path / "state"
    first = ConsumerProcess("typed", prefix, tmp_path, name="-first", state_dir=folder,
                            state_cache_keys=cache_keys)
    second = ConsumerProcess("typed", prefix, tmp_path, name="-second", state_dir=folder,
                             state_cache_keys=cache_keys)
    try:
        await first.start().wait_ready()
        await produce(source, _records(opening))
        await wait_caught_up(group, source)
        feeding = asyncio.create_task(produce(source, _records(rest), rate=1500))
        assert await kill_mid_transaction(first, names.stream_events, transactional_ids(
            group, source, range(PARTITIONS))), first.log()
        await second.start().wait_ready(within=120)
        await feeding
        await wait_caught_up(group, source, within=120)
        restored = await metric_value(second, RESTORED)
        assert opened in second.log(tail=400)
    finally:
        first.stop()
        second.stop()
    assert names.changelog("typed") is not None
    changelog = len(await read_to_end(BOOTSTRAP, names.changelog("typed")))
    # The successor read the tail after its stores' checkpoint: the last transactions'
    # records at most, never the changelog (thousands of records here).
    assert restored < changelog / 10, (restored, changelog)
    expected, dead = oracle.project((orjson.dumps(e) for e in opening + rest), "typed")
    assert not dead
    got = oracle.envelopes_by_run(
        orjson.loads(r.value or b"") for r in await read_to_end(BOOTSTRAP, names.stream_events))
    assert got == oracle.envelopes_by_run(expected)
