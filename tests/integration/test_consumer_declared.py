"""A consumer from its declaration alone, on the real broker: docs/engine.md's example.

Registered, its topics (its output, its changelog) come from ``topics ensure``'s list and
its topology from ``app/topologies.py``; it forwards the first record of each run once, and
after a restart its state store, restored from the changelog, still knows the runs seen.
"""

from __future__ import annotations

import pytest

import symfonic_stream.consumers as registry
from symfonic_stream.app.topologies import topologies
from symfonic_stream.models.names import TopicNames
from tests.unit.test_consumers import declared_example

from .harness import (
    InProcessEngine,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    wait_caught_up,
)
from .observe import read_to_committed_end


async def test_a_declared_consumer_runs_and_restores_its_state(
    bootstrap_servers: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "CONSUMERS", (*registry.CONSUMERS, declared_example()))
    settings = await create_topics(prefix, with_copier=False)  # its topics: from the list
    names = TopicNames(prefix)
    group, source, output = names.group("firsts"), names.agent_events, f"{prefix}.first-events"
    first = [(f"run-{i % 5}".encode(), f"v{i}".encode(), []) for i in range(40)]
    await produce(source, first)
    [topology] = topologies("firsts", settings)
    async with InProcessEngine(topology, settings):
        await wait_caught_up(group, source)
    # Restarted: runs 0-4 are in its restored store; only run-5's first record is new.
    await produce(source, [(b"run-2", b"again", []), (b"run-5", b"v-new", []),
                           (b"run-5", b"v-newer", [])])
    async with InProcessEngine(topologies("firsts", settings)[0], settings):
        await wait_caught_up(group, source)
    forwarded = await read_to_committed_end(output, group=group, source=source, processes=[])
    assert sorted((r.key, r.value) for r in forwarded) == [
        (b"run-0", b"v0"), (b"run-1", b"v1"), (b"run-2", b"v2"), (b"run-3", b"v3"),
        (b"run-4", b"v4"), (b"run-5", b"v-new")]
