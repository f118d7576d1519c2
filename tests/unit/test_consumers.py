"""The declarations (consumers/) and everything derived from them.

Each declaration is checked against what it wires (its processor's stores, the settings it
reads); the chart's generated files must match the declarations; and a consumer declared
alone, docs/engine.md's example, is in every derived list once it is registered.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

import symfonic_stream.consumers as registry
from symfonic_stream.app.acls import build_plan
from symfonic_stream.app.topics import required_topics
from symfonic_stream.app.topologies import topologies
from symfonic_stream.config import Settings
from symfonic_stream.consumers import READERS, Consumer, deployed, engines, registered
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import TOPICS
from symfonic_stream.state.store import StateStore
from symfonic_stream.tools import chart
from symfonic_stream.tools.schemas import asyncapi_document

ROOT = Path(__file__).resolve().parents[2]
ENGINE_DOC = ROOT / "docs" / "engine.md"


class Recording(Settings):
    """Settings that note every field read, by the wiring or the processor it builds."""

    read: ClassVar[set[str]] = set()

    def __getattribute__(self, name: str) -> Any:
        if name in type(self).model_fields:
            Recording.read.add(name)
        return super().__getattribute__(name)


def declared_example() -> Consumer:
    """docs/engine.md's "Writing a consumer" example, run as the page shows it."""
    [block] = re.findall(r"## Writing a consumer\n.*?```python\n(.*?)```", ENGINE_DOC.read_text(),
                         flags=re.S)
    scope: dict[str, Any] = {"__name__": "engine_md_example"}
    exec(compile(block, str(ENGINE_DOC), "exec"), scope)
    example = scope["FIRSTS"]
    assert isinstance(example, Consumer)
    return example


# -- each declaration against what it wires ---------------------------------------------


def test_an_engines_stores_and_settings_are_what_its_wiring_makes_and_reads() -> None:
    """Nothing declares them: the engine reads them off one processor its wiring makes. The
    example keeps ``seen`` and reads no setting; the same engine wired to read two settings
    (one twice) and keep a second store says so, in the order read, each once."""
    example = declared_example().engines[0]
    assert (example.stores, example.settings) == (("seen",), ())

    def wire(settings: Settings, names: TopicNames) -> Any:
        made = example.wire(settings, names)
        timeout, _, bound = settings.gap_timeout_s, settings.gap_timeout_s, settings.run_buffer_max
        assert timeout > 0 and bound > 0

        def make(partition: int) -> Any:
            processor = made.make(partition)
            processor.stores = (*processor.stores, StateStore("extra", processor.seen.codec))
            return processor
        return type(made)(make)

    changed = dataclasses.replace(example, wire=wire)
    assert (changed.stores, changed.settings) == (("seen", "extra"),
                                                  ("gap_timeout_s", "run_buffer_max"))


@pytest.mark.parametrize("engine", engines(), ids=lambda e: e.name)
def test_a_deployed_engine_builds_under_the_settings_it_is_said_to_read(
        engine: registry.Engine) -> None:
    """Its processor builds under every setting (the chart sets what the probe found), and
    what it keeps is what the changelog and the ACLs are made for."""
    Recording.read = set()
    processor = engine.wire(Recording.model_construct(), TopicNames("p")).make(0)
    assert Recording.read == set(engine.settings)
    assert tuple(store.name for store in processor.stores) == engine.stores


def test_every_reader_and_engine_setting_is_a_setting() -> None:
    named = {s for e in engines() for s in e.settings} | {s for r in READERS for s in r.settings}
    assert named and named <= set(Settings.model_fields)


def test_names_groups_and_channel_ids_are_unique() -> None:
    names = [c.name for c in registered()] + [r.name for r in READERS]
    assert len(names) == len(set(names))
    groups = [e.name for e in engines()]
    assert len(groups) == len(set(groups))
    assert len({t.id for t in TOPICS}) == len(TOPICS)
    for declared in registered():
        assert declared.scales_on in {e.name for e in declared.engines}, declared.name


def test_every_topic_is_read_or_written_by_a_declaration() -> None:
    used = {e.reads.id for e in engines()} | {w.topic.id for e in engines() for w in e.writes}
    used |= {t.id for r in READERS for t in r.reads} | {"deadLetter"}
    assert {t.id for t in TOPICS} == used


# -- what is derived -----------------------------------------------------------------------


def test_the_charts_generated_files_match_the_declarations() -> None:
    stale = chart.drift(ROOT / chart.CHART)
    assert not stale, f"{stale} drifted: run `make schemas` and commit the chart"


def test_the_deployments_consumers_are_the_four() -> None:
    """The list contract §1 names; the chart, the ACL plan and the demo follow the registry."""
    assert [c.name for c in deployed()] == ["typed", "chunks", "pauses", "resumes"]
    assert [c["name"] for c in chart.chart_data()["consumers"]] == [
        "typed", "chunks", "pauses", "resumes"]


async def test_the_gateway_tails_and_sends_what_its_declaration_reads_and_writes() -> None:
    from symfonic_stream.consumers.gateway import GATEWAY
    from symfonic_stream.gateway.server import Gateway

    settings = Settings(topic_prefix="p")
    gateway = Gateway(settings)
    readers = gateway._readers()  # the two streams' tails, the reviews' tail
    assert sorted(reader.topic for reader in readers) == sorted(
        t.name(TopicNames("p")) for t in GATEWAY.reads)
    assert [gateway.sender.topic] == [w.topic.name(TopicNames("p")) for w in GATEWAY.writes]
    await gateway.sender.stop()  # (never started: closes the producer made for it)


def test_a_consumer_declared_alone_is_in_every_derived_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    example = declared_example()
    monkeypatch.setattr(registry, "CONSUMERS", (*registry.CONSUMERS, example))
    settings = Settings(topic_prefix="p")

    [topology] = topologies("firsts", settings)
    assert (topology.group_id, topology.source_topic, topology.output_topics,
            topology.changelog_topic) == (
        "p-firsts", "p.agent-events", ("p.first-events",), "p-firsts-state-changelog")
    created = {spec.name: spec.cleanup_policy for spec in required_topics(settings)}
    assert created["p.first-events"] == "delete"
    assert created["p-firsts-state-changelog"] == "compact"
    plan = build_plan(settings, ["firsts"])
    writes = {b.resource_name for b in plan.bindings
              if b.resource_type == "TOPIC" and b.operation == "WRITE"}
    assert writes == {"p.first-events", "p.dead-letter", "p-firsts-state-changelog"}
    document = asyncapi_document()
    assert document["channels"]["firstEvents"]["address"] == "symfonic.first-events"
    assert {"firstsReceive", "firstsSendFirstEvents", "firstsWriteState"} <= set(
        document["operations"])
    data = chart.chart_data()
    assert data["consumers"][-1]["lag"] == {"group": "{prefix}-firsts",
                                            "topic": "{prefix}.agent-events"}
    assert "firsts:" in chart.values_block()


def test_the_example_processor_forwards_each_runs_first_record_once() -> None:
    example = declared_example()
    processor = example.engines[0].wire(Settings(), TopicNames("p")).make(0)
    out = Collector()
    for offset, key in enumerate([b"a", b"b", b"a", b"c", b"b"]):
        processor.process(InputRecord("p.agent-events", 0, offset, key, b"{}"), 0.0, out)
    assert [(o.topic, o.key) for o in out.outputs] == [
        ("p.first-events", b"a"), ("p.first-events", b"b"), ("p.first-events", b"c")]
