"""Tickets per tenant on the real broker (issue 33 item 5): two tenants' kernels use the
same interrupt id in runs of their own, the real pause router and resume validator run as
processes, and each tenant's reviewer answers its own ticket with the reviewer SDK. (Both
kernels under one run id: tests/integration/test_tenants_live.py.)

Which answer resumes which run is the reference's (tests/reference/pauses.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.sdk.reviewer import Reviewer
from tests.reference.pauses import ACCEPTED, ReferenceReview

from .harness import ConsumerProcess, produce, settings_for, unique_prefix
from .observe import quiesce
from .test_pauses_live import EVENTS_AT, pause, read_after_resumes, read_tickets, records, setup

pytestmark = pytest.mark.slow


def _pause(run_id: str, tenant: str, interrupt_id: str, token: str,
           index: int = 0) -> dict[str, Any]:
    event = pause(run_id, index, tenant=tenant, interrupt_id=interrupt_id)
    event["interrupt"]["token"] = token
    return event


#: acme's kernel pauses first, globex's second with the same interrupt id: with another
#: token, and with the same token.
EVENTS = [
    _pause("acme-a", "acme", "same-id", "acme-secret"),
    _pause("globex-a", "globex", "same-id", "globex-secret"),
    _pause("acme-b", "acme", "same-token", "shared-secret"),
    _pause("globex-b", "globex", "same-token", "shared-secret"),
]
QUEUES = (("acme", "acme-desk"), ("globex", "globex-questions"))
#: (tenant, ticket id, whether the answer names its tenant as the SDK's answer() does; else
#: it is an older tool's, without one), in the order answered.
Answers = list[tuple[str, str, bool]]


async def _answered(tmp_path: Path, events: list[dict[str, Any]],
                    answers: Answers) -> tuple[list[dict[str, Any]], list[tuple[str, str | None]]]:
    """Route ``events`` and answer the tickets: the requests sent, the verdicts given."""
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=True)
    env = {"routing_rules": str(rules_path), "tenant_queues": "true"}
    router = ConsumerProcess("pauses", prefix, tmp_path, **env).start()
    validator = ConsumerProcess("resumes", prefix, tmp_path).start()
    asked: list[dict[str, Any]] = []
    verdicts: list[tuple[str, str | None]] = []
    try:
        await asyncio.gather(router.wait_ready(), validator.wait_ready())
        await produce(names.agent_events, records(events))
        await quiesce(names.group("pauses"), names.agent_events, [router])
        tickets = {(tenant, t.ticket_id): t for tenant, queue in QUEUES
                   for t in await read_tickets(names.human_queue(queue, tenant), names, [router])}
        assert sorted(tickets) == sorted({(tenant, ticket_id) for tenant, ticket_id, _ in answers})
        async with Reviewer("review-ui", settings_for(prefix)) as reviewer:
            for tenant, ticket_id, named in answers:
                ticket = tickets[tenant, ticket_id]
                asked.append({"ticket_id": ticket_id, "token": ticket.token,
                              **({"tenant": tenant} if named else {})})
                if named:
                    outcome = await reviewer.answer(ticket, ticket.run_id)
                else:
                    await reviewer.submit(ticket_id, ticket.token, ticket.run_id)
                    outcome = await reviewer.outcome(ticket_id)
                verdicts.append((ACCEPTED, outcome.record["run_id"]) if outcome.accepted
                                else (str(outcome.reason), None))
        [resumes] = await read_after_resumes(names, [validator], names.resumes)
    finally:
        router.stop()
        validator.stop()
    # Each resume carries the answer its own run's reviewer gave (the answer is the run id).
    bodies = [orjson.loads(r.value or b"") for r in resumes]
    assert sorted((b["run_id"], b["answer"]) for b in bodies) == sorted(
        (run, run) for verdict, run in verdicts if verdict == ACCEPTED)
    return asked, verdicts


def _reference(events: list[dict[str, Any]],
               asked: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    reference = ReferenceReview()
    for event in events:
        reference.pause(event)
    return [reference.answer(request, EVENTS_AT) for request in asked]


async def test_two_tenants_tickets_with_one_interrupt_id_are_answered_on_their_own(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    asked, verdicts = await _answered(tmp_path, EVENTS, [
        ("globex", "same-id", True), ("acme", "same-id", False),
        ("globex", "same-token", False), ("globex", "same-token", True),
        ("acme", "same-token", True)])
    assert verdicts == _reference(EVENTS, asked) == [
        (ACCEPTED, "globex-a"), (ACCEPTED, "acme-a"), ("bad_token", None),
        (ACCEPTED, "globex-b"), (ACCEPTED, "acme-b")]
