"""One run's trace read back from a real OTLP receiver (docs/metrics.md, "Tracing"): a run
the kernel publishes in one W3C trace, paused by an ``ask_user`` that a reviewer answers,
resumed and ended, beside a run published with no context, through the typed, chunks,
pauses and resumes consumers started with tracing on (``OTEL_EXPORTER_OTLP_ENDPOINT``: the
``collector`` fixture's receiver). The run's trace holds the typed transaction span's link
to the run's record, the pause router's ``ticket routed`` span and the validator's ``answer
verdict`` span, each a child of the record's context, and the gateway's ``stream served``
span of a viewer that read the run (SSE) to its end; no span of the untraced run is in it,
and no transaction links a context the untraced run never had."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from symfonic_stream.models.names import TopicNames
from symfonic_stream.runtime.workers import free_port
from symfonic_stream.sdk.publisher import EventPublisher
from symfonic_stream.sdk.reviewer import Reviewer
from tests.integration.conftest import bootstrap_servers  # noqa: F401  (the broker, checked)
from tests.integration.gateway_harness import read_sse
from tests.integration.harness import (
    ConsumerProcess,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
)
from tests.integration.observe import stop_gracefully, wait_until
from tests.integration.test_trace_context_live import (
    TRACE_ID,
    TRACED,
    UNTRACED,
    after_resume,
    before_pause,
    span,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

#: The kernel's span that wrote the ``ask_user`` (event 1): the ticket's and the answer's
#: context, so the router's and the validator's spans are its children.
ASK_USER_SPAN = span(1).parent_id


async def publish(settings: Any, events: Any) -> None:
    async with EventPublisher(settings) as publisher:
        for body in events(TRACED):
            await publisher.send(body, trace=span(body["index"]))
        for body in events(UNTRACED):
            await publisher.send(body)


async def answer_both(settings: Any) -> None:
    """Each run's ticket answered by the reviewer SDK (in the ticket's own context)."""
    async with Reviewer("trace-desk", settings) as reviewer:
        tickets: dict[str, Any] = {}

        async def read() -> None:
            async for ticket in reviewer.tickets("default"):
                tickets[ticket.ticket_id.removesuffix("-i1")] = ticket
                if len(tickets) == 2:
                    return
        await asyncio.wait_for(read(), 30)
        for run_id in (TRACED, UNTRACED):
            outcome = await reviewer.answer(tickets[run_id], {"text": "yes"}, "pat")
            assert outcome.accepted, outcome


def _attribute(found: dict[str, Any], name: str) -> Any:
    return (found.get("attributes") or {}).get(name)


async def test_one_runs_trace_links_its_transactions_and_holds_its_review_path(
        prefix: str, tmp_path: Path, collector: Any) -> None:
    settings = await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    consumers = []
    gateway_port = free_port()
    for name in ("typed", "chunks", "pauses", "resumes", "gateway"):
        consumer = (ConsumerProcess(name, prefix, tmp_path) if name != "gateway" else
                    ConsumerProcess(name, prefix, tmp_path, args=["gateway"],
                                    gateway_port=gateway_port, gateway_host="127.0.0.1"))
        consumer.env.update(OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
                            OTEL_BSP_SCHEDULE_DELAY="200")
        consumers.append(consumer.start())
    try:
        await asyncio.gather(*(c.wait_ready() for c in consumers))
        await publish(settings, before_pause)
        await answer_both(settings)
        await publish(settings, after_resume)
        async with httpx.AsyncClient(timeout=30) as client:  # a viewer, to the run's end
            status, messages = await read_sse(
                client, f"http://127.0.0.1:{gateway_port}/v1/runs/{TRACED}/events", within=60)
        assert status == 200 and messages[-1].get("event") == "end", messages[-3:]

        # The run's trace: the router's ticket, the validator's verdict, and the typed
        # transactions that link the run's records (each in a trace of its own: the
        # receiver gives a trace's spans and the spans that link to it).
        def typed_transaction(found: dict[str, Any]) -> bool:
            return (found["name"] in (f"process {names.agent_events}",
                                      f"{names.agent_events} process")
                    and _attribute(found, "symfonic.consumer") == "typed")

        spans: list[dict[str, Any]] = []

        async def arrived() -> bool:
            spans[:] = await collector.spans(TRACE_ID, at_least=2, within=30.0)
            return (any(s["name"] == "answer verdict" for s in spans)
                    and any(s["name"] == "ticket routed" for s in spans)
                    and any(s["name"] == "stream served" for s in spans)
                    and any(typed_transaction(s) for s in spans))

        await wait_until(arrived, "the run's ticket, verdict and typed transaction spans",
                         within=30.0)
        [routed] = [s for s in spans if s["name"] == "ticket routed"]
        verdicts = [s for s in spans if s["name"] == "answer verdict"]
        assert routed["traceId"] == TRACE_ID and routed["parentSpanId"] == ASK_USER_SPAN
        assert _attribute(routed, "symfonic.run_id") == TRACED
        assert _attribute(routed, "symfonic.queue") == "default"
        [verdict] = verdicts  # the untraced run's verdict is in no trace of the run's
        assert verdict["traceId"] == TRACE_ID and verdict["parentSpanId"] == ASK_USER_SPAN
        assert _attribute(verdict, "symfonic.outcome") == "accepted"

        [served] = [s for s in spans if s["name"] == "stream served"]
        assert served["traceId"] == TRACE_ID and served["kind"] == "SERVER"
        assert _attribute(served, "symfonic.run_id") == TRACED
        assert _attribute(served, "symfonic.ending") == "run_ended"

        transactions = [s for s in spans if typed_transaction(s)]
        linked = {(link["traceId"], link["spanId"])
                  for s in transactions for link in s.get("links") or []}
        # A transaction links only contexts its records had (the untraced run's: none).
        assert linked and linked <= {(TRACE_ID, span(n).parent_id) for n in range(4)}
        for found in transactions:
            assert _attribute(found, "messaging.system") == "kafka"
            assert _attribute(found, "symfonic.transaction.outcome") == "committed"
        # Every span that names a run in the run's trace names the traced one.
        runs = {_attribute(s, "symfonic.run_id") for s in spans} - {None}
        assert runs == {TRACED}
        await stop_gracefully(*consumers)  # (the gateway's exit too: 0 after a clean stop)
    finally:
        for consumer in consumers:
            consumer.stop()
