"""A failed transaction of a stateful consumer rolls its stores back in memory: no restore.

The typed projector commits a run's first events; then it processes more of the run (its
state moves on) and raises on the next record. Everything since the last commit is
dropped; the stores go back to that commit without reading the changelog again; the
partition is read again from the committed offset, the record it raised on is
dead-lettered, and the typed topic holds the reference projection of the rest, once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson
import pytest

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.projector import ProjectorProcessor

from .harness import (
    PARTITIONS,
    InProcessEngine,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    settings_for,
    wait_caught_up,
)
from .observe import read_to_committed_end
from .workloads import reference_values_by_run

RUN = "run-rb"


def _event(index: int, text: str = "t") -> dict[str, Any]:
    return {"run_id": RUN, "index": index, "kind": "text_delta",
            "timestamp": 1_700_000_000.0 + index, "text": f"{text}{index}"}


class _RaisesAfterChanging:
    """The typed projector with a bug: on a ``boom`` event it changes the run's state
    (projects it) and then raises, every time it is handed that record."""

    def __init__(self, inner: ProjectorProcessor) -> None:
        self.inner = inner
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        self.inner.process(record, now, out)
        if record.value is not None and b'"boom' in record.value:
            self.raised += 1
            raise ValueError("cannot handle boom")


async def test_a_failed_transaction_rolls_the_state_back_without_a_restore(
    bootstrap_servers: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    await create_topics(prefix, with_copier=False)
    settings = settings_for(prefix)
    names = TopicNames(prefix)
    typed = projector_topology("typed", settings)
    processors: list[_RaisesAfterChanging] = []

    def make(partition: int) -> Any:
        processors.append(_RaisesAfterChanging(typed.processor_factory(partition)))
        return processors[-1]

    topology = dataclasses.replace(typed, processor_factory=make)
    group, source = names.group("typed"), names.agent_events
    committed_first = [_event(0), _event(1)]
    after = [_event(2), _event(3), _event(4, "boom")]
    caplog.set_level(logging.INFO, logger="symfonic_stream.engine.setup")
    async with InProcessEngine(topology, settings) as running:
        await produce(source, [(RUN.encode(), orjson.dumps(e), []) for e in committed_first])
        await wait_caught_up(group, source)  # the run's state is in the changelog
        await produce(source, [(RUN.encode(), orjson.dumps(e), []) for e in after])
        await wait_caught_up(group, source)
    # Stopped: nothing more can be written. Read to the end.
    assert sum(p.raised for p in processors) == 1
    assert len(processors) == PARTITIONS, "one processor per partition, kept, none rebuilt"
    assert running.sample("state_records_restored_total") == 0  # not even the run's record
    assert any("rolled back to the last commit" in r.getMessage() for r in caplog.records)
    assert running.sample("dead_letters_total", reason="invalid_event") == 1
    records = await read_to_committed_end(
        names.stream_events, group=group, source=source, processes=[]
    )
    expected = reference_values_by_run(
        (orjson.dumps(e) for e in committed_first + after[:2]), "typed")
    assert [r.value for r in records] == expected[RUN]
