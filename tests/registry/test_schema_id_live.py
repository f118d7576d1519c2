"""SYMFONIC_SCHEMA_ID_FRAMING=header on the real broker and the real registry: the typed
projector, started after ``schemas register``, writes every record of its output topic with
the ``__value_schema_id`` header naming the id the registry holds for ``<topic>-value``, and
the values are the same JSON a projector without the header writes; a projector whose output
topic has no registered schema refuses to start, naming the subject.
"""

from __future__ import annotations

import time

import orjson
import pytest

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.engine.setup import EngineError
from symfonic_stream.kafka.schema_registry import (
    VALUE_SCHEMA_ID_HEADER,
    SchemaRegistry,
    schema_id_header,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.schemas.register import register
from symfonic_stream.tools.schemas.subjects import value_schemas
from symfonic_stream.tools.synthetic import RunShape, synthetic_stream
from tests.integration.harness import (
    InProcessEngine,
    Record,
    TopicReader,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    settings_for,
)

pytestmark = pytest.mark.timeout(180)


async def test_the_projectors_outputs_name_their_schema_in_a_header(
        registry_url: str, prefix: str) -> None:
    await create_topics(prefix, with_copier=False)
    settings = settings_for(prefix, schema_registry_url=registry_url,
                            schema_id_framing="header")
    names = TopicNames(prefix)
    reports = await register(settings, value_schemas(settings))
    [events_id] = [r.schema_id for r in reports if r.subject == f"{names.stream_events}-value"]
    assert events_id is not None
    async with SchemaRegistry(settings) as registry:
        assert await registry.latest_id(f"{names.stream_events}-value") == events_id

    events = synthetic_stream(3, 7, shape=RunShape(min_events=5, max_events=20))
    await produce(names.agent_events,
                  [(str(e["run_id"]).encode(), orjson.dumps(e), []) for e in events])
    runs = {str(e["run_id"]) for e in events}
    async with (InProcessEngine(projector_topology("typed", settings), settings),
                TopicReader(names.stream_events) as reader):
        # Until every run's end record is written (no loss: each run ends).
        deadline = time.monotonic() + 60
        while _ended(reader.records) != runs and time.monotonic() < deadline:
            await reader.poll()
        written = reader.records
    assert _ended(written) == runs
    expected = (VALUE_SCHEMA_ID_HEADER, schema_id_header(events_id))
    for record in written:
        assert record.headers.count(expected) == 1, record.headers
        assert record.value is not None
        assert orjson.loads(record.value)["run_id"]  # plain JSON: no prefix before it


def _ended(records: list[Record]) -> set[str]:
    values = [orjson.loads(r.value) for r in records if r.value is not None]
    return {v["run_id"] for v in values if v.get("end") is not None}


async def test_a_projector_without_its_schema_registered_refuses_to_start(
        registry_url: str, prefix: str) -> None:
    await create_topics(prefix, with_copier=False)
    settings = settings_for(prefix, schema_registry_url=registry_url,
                            schema_id_framing="header")
    running = InProcessEngine(projector_topology("typed", settings), settings)
    with pytest.raises(EngineError, match=f"{prefix}.stream-events-value.*schemas register"):
        async with running:
            pass
