"""Trace context through every consumer on the real broker (docs/metrics.md, "Tracing"): a
run the kernel publishes in one W3C trace (the publisher SDK's ``trace=``), paused by an
``ask_user`` that a reviewer answers with the reviewer SDK, resumed and ended; beside it a
run published with no context, and one whose every record carries an invalid
``traceparent``. Through the typed, chunks, pauses and resumes consumers, every record
projected of the traced run (typed, chunks, its ticket, its registration, its answer, its
review records, its resume) carries the run's trace id, and no record of the other two
carries any; the SDKs give each record's context back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.models.headers import TRACEPARENT_HEADER
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.models.trace import TraceContext
from symfonic_stream.sdk.publisher import EventPublisher
from symfonic_stream.sdk.reader import RunReader
from symfonic_stream.sdk.reviewer import Reviewer

from .harness import (
    ConsumerProcess,
    Record,
    TopicReader,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
)
from .observe import stop_gracefully, wait_until

pytestmark = pytest.mark.slow

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACED, UNTRACED, HOSTILE = "run-traced", "run-untraced", "run-hostile"
NOW = float(int(time.time()))


def span(n: int) -> TraceContext:
    """The kernel's span that wrote event ``n`` of the traced run: one trace, a parent each."""
    return TraceContext(f"00-{TRACE_ID}-{n + 1:016x}-01", "symfonic=kernel")


def event(run_id: str, index: int, kind: str, **fields: Any) -> dict[str, Any]:
    body = {"run_id": run_id, "index": index, "kind": kind, "timestamp": NOW + index,
            "scope": {"tenant": None, "principal": "p"}, **fields}
    if kind == "ask_user":
        body["interrupt"] = {
            "name": "ask_user", "kind": "ask_user", "payload": {"questions": [{"q": "ok?"}]},
            "token": f"token-{run_id}", "tool_call_id": "call-1",
            "interrupt_id": f"{run_id}-i1", "run_id": run_id, "session_id": "s",
            "expires_at": NOW + 3600, "resumable": True}
    return body


def before_pause(run_id: str) -> list[dict[str, Any]]:
    return [event(run_id, 0, "text_delta", text="Hel"), event(run_id, 1, "ask_user")]


def after_resume(run_id: str) -> list[dict[str, Any]]:
    return [event(run_id, 2, "text_delta", text="lo"), event(run_id, 3, "done", result=None)]


def run_of(topic: str, record: Record) -> str:
    """Which run a record of ``topic`` belongs to, from its key."""
    key = (record.key or b"").decode()
    if topic.endswith(".review-tickets"):
        key = orjson.loads(key)[1]
    return key.removesuffix("-i1")


def trace_ids(record: Record) -> list[str]:
    return [value.decode()[3:35] for name, value in record.headers if name == TRACEPARENT_HEADER]


async def publish(settings: Any, events: Callable[[str], list[dict[str, Any]]]) -> None:
    async with EventPublisher(settings) as publisher:
        for body in events(TRACED):
            await publisher.send(body, trace=span(body["index"]))
        for body in events(UNTRACED):
            await publisher.send(body)
    hostile = [(HOSTILE.encode(), orjson.dumps(body),
                [(TRACEPARENT_HEADER, b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01")])
               for body in events(HOSTILE)]
    await produce(TopicNames(settings.topic_prefix).agent_events, hostile)


async def answer_both(settings: Any, names: TopicNames) -> dict[str, Ticket]:
    """The reviewer's side: each run's ticket read, answered in its own context."""
    tickets: dict[str, Ticket] = {}
    async with Reviewer("trace-desk", settings) as reviewer:
        async def read() -> None:
            async for ticket in reviewer.tickets("default"):
                tickets[ticket.ticket_id.removesuffix("-i1")] = ticket
                if len(tickets) == 3:
                    return
        await asyncio.wait_for(read(), 30)
        for run_id in (TRACED, UNTRACED, HOSTILE):
            outcome = await reviewer.answer(tickets[run_id], {"text": "yes"}, "pat")
            assert outcome.accepted, outcome
    return tickets


async def test_a_traced_runs_every_output_carries_its_trace_and_no_other_run_gets_one(
    prefix: str, tmp_path: Path
) -> None:
    settings = await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    consumers = [ConsumerProcess(name, prefix, tmp_path).start()
                 for name in ("typed", "chunks", "pauses", "resumes")]
    try:
        await asyncio.gather(*(c.wait_ready() for c in consumers))
        await publish(settings, before_pause)
        tickets = await answer_both(settings, names)
        assert tickets[TRACED].trace_context is not None
        assert tickets[TRACED].trace_context.trace_id == TRACE_ID
        assert tickets[UNTRACED].trace_context is None
        assert tickets[HOSTILE].trace_context is None
        await publish(settings, after_resume)

        topics = [names.stream_events, names.stream_chunks, names.human_queue("default"),
                  names.pause_registrations, names.review_tickets, names.resumes]
        readers = {topic: TopicReader(topic) for topic in topics}
        for reader in readers.values():
            await reader.__aenter__()
        try:
            async def ended() -> bool:
                for reader in readers.values():
                    await reader.poll(50)
                typed = readers[names.stream_events].records
                chunks = readers[names.stream_chunks].records
                done = [r for r in typed + chunks if b'"completed"' in (r.value or b"")]
                return (len(done) == 6 and len(readers[names.resumes].records) == 3
                        and len(readers[names.review_tickets].records) >= 6)

            await wait_until(ended, "every run ended in typed and chunks, every resume")
            for topic, reader in readers.items():
                await reader.settle(quiet=0.5, within=5)
                by_run: dict[str, list[Record]] = {}
                for record in reader.records:
                    by_run.setdefault(run_of(topic, record), []).append(record)
                assert set(by_run) == {TRACED, UNTRACED, HOSTILE}, (topic, set(by_run))
                for record in by_run[TRACED]:
                    assert trace_ids(record) == [TRACE_ID], (topic, record)
                for run_id in (UNTRACED, HOSTILE):
                    assert all(trace_ids(r) == [] for r in by_run[run_id]), (topic, run_id)
        finally:
            for reader in readers.values():
                await reader.__aexit__(None, None, None)

        # The reader SDK gives each record's context back: the event's own span's.
        async with RunReader(TRACED, settings, follow=True, idle_timeout_s=10) as reader:
            contexts = [(record.seq, record.trace_context) async for record in reader]
        assert contexts and all(c is not None and c.trace_id == TRACE_ID for _, c in contexts)
        assert contexts[0][1] == span(0)
        async with RunReader(UNTRACED, settings, follow=True, idle_timeout_s=10) as reader:
            untraced = [record.trace_context async for record in reader]
        assert len(untraced) == len(contexts) and set(untraced) == {None}
        await stop_gracefully(*consumers)
    finally:
        for consumer in consumers:
            consumer.stop()
