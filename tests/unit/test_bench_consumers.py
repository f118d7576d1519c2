"""The benchmarks measure what the declarations name: their rows, each row's outputs and
the baseline are read from the registry (``symfonic_stream.consumers``) when a benchmark
runs, so bench/ holds no list of consumers and a consumer declared alone is measured too."""

from __future__ import annotations

import pytest

import symfonic_stream.consumers as registry
from bench.processes import BASELINE, bench_consumers
from bench.projectors import rows
from symfonic_stream.config import Settings
from symfonic_stream.models.names import TopicNames
from tests.unit.test_consumers import declared_example


def test_the_rows_are_the_raw_topics_consumers_the_copier_first_then_the_projectors_at_once(
) -> None:
    assert BASELINE == "copier"
    assert bench_consumers() == ("copier", "typed", "chunks", "pauses")
    assert {name: row.groups for name, row in rows().items()} == {
        "copier": ("copier",), "typed": ("typed",), "chunks": ("chunks",),
        "pauses": ("pauses",), "typed+chunks": ("typed", "chunks")}
    assert [name for name, row in rows().items() if row.own_input] == ["typed+chunks"]


def test_a_rows_outputs_are_what_its_consumers_write_that_no_engine_reads() -> None:
    """The pause router's tickets, not its registrations with the resume validator."""
    settings, names = Settings(topic_prefix="p"), TopicNames("p")
    assert {name: row.topics(settings) for name, row in rows().items()} == {
        "copier": [names.copier_output], "typed": [names.stream_events],
        "chunks": [names.stream_chunks],
        "pauses": [names.human_queue("default"), names.expired_queue],
        "typed+chunks": [names.stream_events, names.stream_chunks]}


def test_a_consumer_declared_alone_is_a_row_of_the_benchmarks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "CONSUMERS", (*registry.CONSUMERS, declared_example()))
    assert bench_consumers()[-1] == "firsts"
    firsts = rows()["firsts"]
    assert firsts.groups == ("firsts",)
    assert firsts.topics(Settings(topic_prefix="p")) == ["p.first-events"]
