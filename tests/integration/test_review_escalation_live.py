"""A ticket's escalation on the real broker (issue 38): a ticket nobody answers moves to its
queue's escalation queue once, after its timeout, also when the validator process holding
the timer is SIGKILLed before it fires, and again right after it fired (its replacement
neither loses the timer nor fires it twice: the timer is a deadline in the changelog, and
the escalated ticket and its record are one transaction)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.app.topics import required_topics
from symfonic_stream.app.topologies import router_topology, topologies
from symfonic_stream.kafka.admin import ensure_topics
from tests.integration.harness import (
    ConsumerProcess,
    InProcessEngine,
    Record,
    TopicReader,
    count_records,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    settings_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

#: Long enough for the test to kill the first validator before it fires (the deadline is
#: the router's routed_at + this).
AFTER_S = 15.0
RULES = f"""
escalations:
  - {{queue: default, after_minutes: {AFTER_S / 60}, to: oversight}}
"""


def _pause(prefix: str) -> dict[str, Any]:
    pending = {"name": "approve", "kind": "interrupt", "token": "tok-esc", "interrupt_id": "esc-1",
               "tool_call_id": None, "run_id": "run-esc", "session_id": None,
               "expires_at": time.time() + 3600, "resumable": True, "payload": {}}
    return {"run_id": "run-esc", "index": 0, "kind": "interrupt", "timestamp": time.time(),
            "scope": {"tenant": "acme"}, "interrupt": pending}


def _steps(records: list[Record]) -> list[str]:
    """The review history of the ticket's latest review-tickets record."""
    latest = [r for r in records if r.key == b'["acme","esc-1"]'][-1]
    return [step["event"] for step in orjson.loads(latest.value or b"")["history"]]


async def _until(reader: TopicReader, done: Callable[[list[Record]], bool], what: str,
                 within: float = 90.0) -> list[Record]:
    deadline = time.monotonic() + within
    while not (reader.records and done(reader.records)):
        assert time.monotonic() < deadline, f"never saw {what}: {reader.records[-3:]}"
        await reader.poll()
    return reader.records


async def test_a_ticket_escalates_once_across_sigkills_of_the_timers_holder(
    prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = settings_for(prefix, routing_rules=rules)
    assert (await ensure_topics(settings, required_topics(settings))).ok  # human.oversight
    validator_env = {"routing_rules": str(rules), "review_claim_lease_s": 2}

    def validator(name: str) -> ConsumerProcess:
        return ConsumerProcess("resumes", prefix, tmp_path, name, **validator_env).start()

    intake, _ = topologies("resumes", settings)  # (the validator runs as processes)
    async with InProcessEngine(router_topology(settings), settings), \
            InProcessEngine(intake, settings), \
            TopicReader(f"{prefix}.review-tickets") as reviews, \
            TopicReader(f"{prefix}.human.oversight") as oversight:
        first = validator("-1")
        try:
            await first.wait_ready()
            await produce(f"{prefix}.agent-events",
                          [(b"run-esc", orjson.dumps(_pause(prefix)), [])])
            await _until(reviews, lambda r: _steps(r) == ["routed"], "the ticket registered")
            first.kill()  # holding the timer, well before it is due
        finally:
            first.stop()
        assert "escalated" not in _steps(reviews.records)

        second = validator("-2")
        try:
            await second.wait_ready()
            await _until(oversight, lambda r: len(r) >= 1, "the escalated ticket")
            await _until(reviews, lambda r: "escalated" in _steps(r), "the escalation recorded")
            second.kill()  # right after it fired
        finally:
            second.stop()

        third = validator("-3")
        try:
            await third.wait_ready()
            # A witness that the third has punctuated past the escalation's deadline: a
            # claim whose 2 s lease its punctuation ends.
            claim = {"action": "claim", "ticket_id": "esc-1", "token": "tok-esc",
                     "tenant": "acme", "responder": "ana", "request_id": "witness"}
            await produce(f"{prefix}.resume-requests", [(b"esc-1", orjson.dumps(claim), [])])
            await _until(reviews, lambda r: _steps(r)[-1] == "lease_expired", "the lease's end")
        finally:
            third.stop()
    assert await count_records(f"{prefix}.human.oversight") == 1
    [moved] = oversight.records
    assert orjson.loads(moved.value or b"")["queue"] == "oversight"
    assert _steps(reviews.records) == ["routed", "escalated", "claimed", "lease_expired"]
    latest = orjson.loads(reviews.records[-1].value or b"")
    assert latest["escalated"]["from_queue"] == "default"
    assert latest["ticket"]["queue"] == "oversight"
