"""Spans when tracing is on (docs/metrics.md, "Tracing"), read back from the SDK's in-memory
exporter: a transaction's span links the distinct contexts of the records it consumed (none
for untraced ones), with the messaging attributes as ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks;
the pause router's and the validator's per-record spans are children of the record's context
(the run's trace), made only when their transaction commits; tracing off configures
nothing; bad ``OTEL_*`` values and a missing extra fail naming them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from symfonic_stream.config import ConfigError
from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord, feed
from symfonic_stream.engine.transaction import (
    CommitOutcome,
    Taken,
    TaskTurn,
    Transactions,
)
from symfonic_stream.kafka.producer import ProducerUnusable
from symfonic_stream.models.headers import TRACEPARENT_HEADER, TRACESTATE_HEADER
from symfonic_stream.observability import tracing
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.store import StorePartition
from tests.unit.test_task_pipeline import RecordingProcessor, Timeline
from tests.unit.test_trace_context import OTHER, PARENT, STATE, TRACE_ID, TRACED, PausePath

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")  # the [otel] extra
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")

SOURCE = "agent-events"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Tracing on, every span ended kept in memory (old attribute names unless a test
    installs again with its own opt-in)."""
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracing.install(provider, {})
    yield exporter
    tracing.shutdown()


class Producer:
    transactional_id = "t-1"

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail

    async def transact(self, *args: Any) -> dict[int, int]:
        if self.fail is not None:
            raise self.fail
        return {}


def _topology() -> Any:
    from symfonic_stream.engine.topology import Topology
    return Topology(consumer="typed", group_id="symfonic-typed", source_topic=SOURCE,
                    output_topics=("out",), dead_letter_topic=None, changelog_topic=None,
                    processor_factory=lambda _: RecordingProcessor(Timeline()))


def _processed(*headers: Any) -> Collector:
    out = Collector()
    processor = RecordingProcessor(Timeline())
    for offset, each in enumerate(headers):
        feed(processor, InputRecord(SOURCE, 0, offset, b"k", b"v", tuple(each)), 0.0, out)
    return out


def _turn(out: Collector, consumed: int) -> TaskTurn:
    return TaskTurn(TopicPartition(SOURCE, 0), Taken(out, consumed, consumed),
                    StorePartition([]), None, None, consumed, (0, b""))


async def _commit(out: Collector, producer: Producer | None = None) -> CommitOutcome:
    consumed = len(out.outputs)
    transactions = Transactions(_topology(), ConsumerMetrics("typed", CollectorRegistry()))
    return await transactions.commit(producer or Producer(), [_turn(out, consumed)])  # type: ignore[arg-type]


def _hex(number: int, width: int) -> str:
    return f"{number:0{width}x}"


async def test_a_transaction_span_links_its_records_distinct_contexts(spans: Any) -> None:
    own = ((TRACEPARENT_HEADER, OTHER.encode()),)
    out = _processed(TRACED, TRACED, own, (), [("other", b"x")])
    assert await _commit(out) is CommitOutcome.COMMITTED
    [span] = spans.get_finished_spans()
    assert span.name == f"{SOURCE} process"
    assert span.kind.name == "CONSUMER"
    assert span.parent is None  # a batch consumer links, it does not parent
    linked = [(_hex(link.context.trace_id, 32), _hex(link.context.span_id, 16),
               link.context.trace_state.to_header()) for link in span.links]
    assert linked == [(TRACE_ID, PARENT[36:52], STATE), (OTHER[3:35], OTHER[36:52], "")]
    assert all(link.context.is_remote for link in span.links)
    assert dict(span.attributes) == {
        "messaging.system": "kafka", "symfonic.consumer": "typed",
        "messaging.destination.name": SOURCE, "messaging.operation": "process",
        "messaging.kafka.consumer.group": "symfonic-typed",
        "messaging.kafka.destination.partition": 0, "messaging.batch.message_count": 5,
        "symfonic.transaction.records_written": 5,
        "symfonic.transaction.outcome": "committed"}


async def test_untraced_records_give_a_span_without_links(spans: Any) -> None:
    assert await _commit(_processed((), ())) is CommitOutcome.COMMITTED
    [span] = spans.get_finished_spans()
    assert list(span.links) == [] and span.parent is None


async def test_the_links_are_bounded(spans: Any) -> None:
    many = [[(TRACEPARENT_HEADER, f"00-{n + 1:032x}-{n + 1:016x}-01".encode())]
            for n in range(tracing.LINKS_MAX + 20)]
    await _commit(_processed(*many))
    [span] = spans.get_finished_spans()
    assert len(span.links) == tracing.LINKS_MAX


@pytest.mark.parametrize(("opt_in", "name", "present", "absent"), [
    ("messaging", f"process {SOURCE}",
     {"messaging.operation.type": "process", "messaging.operation.name": "process",
      "messaging.consumer.group.name": "symfonic-typed",
      "messaging.destination.partition.id": "0"},
     {"messaging.operation", "messaging.kafka.consumer.group",
      "messaging.kafka.destination.partition"}),
    ("http, messaging/dup", f"process {SOURCE}",
     {"messaging.operation": "process", "messaging.operation.type": "process",
      "messaging.kafka.consumer.group": "symfonic-typed",
      "messaging.consumer.group.name": "symfonic-typed"}, set()),
])
async def test_the_attribute_names_follow_the_stability_opt_in(
        spans: Any, opt_in: str, name: str, present: dict[str, Any], absent: set[str]) -> None:
    tracing.install(tracing._provider, {"OTEL_SEMCONV_STABILITY_OPT_IN": opt_in})
    await _commit(_processed(TRACED))
    [span] = spans.get_finished_spans()
    assert span.name == name
    assert present.items() <= dict(span.attributes).items()
    assert not absent & set(span.attributes)


@pytest.mark.parametrize(("fail", "outcome"), [
    (ProducerUnusable("fenced", fenced=True), "fenced"),
    (ProducerUnusable("gone", fenced=False), "unusable"),
])
async def test_a_failed_transaction_says_so_on_its_span(spans: Any, fail: Exception,
                                                        outcome: str) -> None:
    assert await _commit(_processed(TRACED), Producer(fail)) is CommitOutcome.UNUSABLE
    [span] = spans.get_finished_spans()
    assert span.attributes["symfonic.transaction.outcome"] == outcome


async def test_the_review_path_spans_are_children_of_the_runs_context(spans: Any) -> None:
    path = PausePath()
    path.pause(TRACED)
    path.answer(TRACED)
    path.answer((), token="wrong")  # no context of its own, no token: no span anywhere
    assert spans.get_finished_spans() == ()  # nothing before a transaction commits
    assert [n.name for n in path.routed.noted] == ["ticket routed"]
    assert [n.name for n in path.out.noted] == ["answer verdict"]
    for out in (path.routed, path.out):
        await _commit(out)
    made = spans.get_finished_spans()
    per_record = {span.name: span for span in made if span.kind.name == "INTERNAL"}
    assert set(per_record) == {"ticket routed", "answer verdict"}
    transactions = {span.context.span_id for span in made if span.kind.name == "CONSUMER"}
    for span in per_record.values():
        assert _hex(span.context.trace_id, 32) == TRACE_ID
        assert _hex(span.parent.span_id, 16) == PARENT[36:52]
        assert {link.context.span_id for link in span.links} <= transactions
    assert per_record["ticket routed"].attributes["symfonic.queue"] == "questions"
    assert per_record["answer verdict"].attributes["symfonic.outcome"] == "accepted"


async def test_a_claim_decided_is_a_span_in_the_tickets_context(spans: Any) -> None:
    """(The claim itself carries no context: the validator keeps the ticket's, the run's.)"""
    path = PausePath()
    path.pause(TRACED)
    path.answer((), action="claim", responder="ana")
    path.answer((), action="claim", responder="bob")  # held by ana: refused
    path.answer((), action="claim", responder="ana", token="wrong")  # no context: no span
    assert [n.name for n in path.out.noted] == ["ticket claimed"] * 2
    await _commit(path.out)
    claimed = [span for span in spans.get_finished_spans() if span.name == "ticket claimed"]
    assert [span.attributes["symfonic.outcome"] for span in claimed] == ["granted", "held"]
    for span in claimed:
        assert _hex(span.context.trace_id, 32) == TRACE_ID
        assert _hex(span.parent.span_id, 16) == PARENT[36:52]
        assert span.attributes["symfonic.ticket_id"] == "intr-1"
        assert span.attributes["symfonic.queue"] == "questions"
        assert span.attributes["symfonic.run_id"] == "run-1"


async def test_a_claim_refused_in_its_own_context_is_a_claim_span(spans: Any) -> None:
    path = PausePath()
    path.pause(())
    path.answer(TRACED, action="claim", responder="ana", token="wrong")
    assert [(n.name, n.attributes["symfonic.outcome"]) for n in path.out.noted] == [
        ("ticket claimed", "bad_token")]


async def test_an_aborted_transaction_makes_no_per_record_spans(spans: Any) -> None:
    path = PausePath()
    path.pause(TRACED)
    await _commit(path.routed, Producer(ProducerUnusable("fenced", fenced=True)))
    assert [span.name for span in spans.get_finished_spans()] == [f"{SOURCE} process"]


def test_tracing_off_keeps_nothing_and_configures_no_provider() -> None:
    assert tracing.TRACER is None
    assert tracing.configure("symfonic-stream-typed", {}) is False
    assert tracing.TRACER is None
    out = _processed(TRACED)
    out.note_span("ticket routed")
    assert out.links == {} and out.noted == []
    for off in ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                 "OTEL_SDK_DISABLED": "true"},
                {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                 "OTEL_TRACES_EXPORTER": "none"}):
        assert tracing.wanted(off) is False


def test_tracing_on_by_the_standard_variables() -> None:
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c:4318/v1/traces"})
    try:
        assert tracing.configure("symfonic-stream-typed",
                                 {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
        assert tracing.TRACER is not None
        resource = tracing._provider.resource  # type: ignore[union-attr]
        assert resource.attributes["service.name"] == "symfonic-stream-typed"
    finally:
        tracing.shutdown()  # (nothing ended: nothing to send to the closed port)
    assert tracing.TRACER is None


@pytest.mark.parametrize(("variable", "value"), [
    ("OTEL_SDK_DISABLED", "yes"),
    ("OTEL_TRACES_EXPORTER", "jaeger"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318"),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli"),
    ("OTEL_BSP_SCHEDULE_DELAY", "-5"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
    ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "nan"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "1.5"),
    ("OTEL_TRACES_SAMPLER", "sometimes"),
    ("OTEL_TRACES_SAMPLER_ARG", "2"),
])
def test_a_bad_otel_variable_fails_naming_it(variable: str, value: str) -> None:
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio",
               variable: value}
    with pytest.raises(ConfigError, match=variable):
        tracing.configure("symfonic-stream-typed", environ)
    assert tracing.TRACER is None


def test_tracing_asked_for_without_the_sdk_names_the_extra() -> None:
    script = ("import sys; sys.modules['opentelemetry.sdk'] = None;"
              " from symfonic_stream.observability import tracing;"
              " tracing.configure('x', {'OTEL_TRACES_EXPORTER': 'otlp'})")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0
    assert "needs the [otel] extra" in done.stderr
    assert "pip install 'symfonic-stream[otel]'" in done.stderr


def test_an_output_carries_no_span_machinery() -> None:
    """(The links and notes stay in the collector: no record gains a header for them.)"""
    out = _processed(TRACED)
    [output] = out.outputs
    assert isinstance(output, OutputRecord)
    assert output.headers == TRACED
    assert (TRACESTATE_HEADER, STATE.encode()) in output.headers


def test_run_refuses_a_bad_otel_variable_before_it_connects() -> None:
    environ = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318",
               "SYMFONIC_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = subprocess.run([sys.executable, "-m", "symfonic_stream", "run", "typed"],
                          capture_output=True, text=True, timeout=60, check=False,
                          cwd=Path(__file__).resolve().parents[2], env=environ)
    assert done.returncode == 2
    assert "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL" in done.stderr


def test_a_restore_span_is_a_child_of_its_rebalance(spans: Any) -> None:
    with tracing.span("rebalance assign", {"symfonic.partitions": [0, 1]}), \
            tracing.span("restore", {"symfonic.changelog": "c"}):
        pass
    restore, assign = spans.get_finished_spans()
    assert (restore.name, assign.name) == ("restore", "rebalance assign")
    assert restore.parent.span_id == assign.context.span_id and assign.parent is None
    assert tuple(assign.attributes["symfonic.partitions"]) == (0, 1)
