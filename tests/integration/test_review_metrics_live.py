"""The human queues' metrics on the real broker (docs/metrics.md, "Metrics"): tickets routed
by a real pause router and registered by a real resume validator move its open-ticket
gauges, a claim moves its claims counter, an answer closes the ticket, and a validator that
starts again on the same changelog shows the same gauges; all read through /metrics."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.app.topics import required_topics
from symfonic_stream.app.topologies import router_topology, topologies
from symfonic_stream.kafka.admin import ensure_topics
from symfonic_stream.observability.families import CLAIM_OUTCOMES
from symfonic_stream.observability.health import server_port, start_health_server

from .harness import (
    InProcessEngine,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    settings_for,
)
from .observe import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

RULES = """
rules:
  - match: {name: approve}
    queue: payments
"""
LIFETIME_S = 3600.0
SAMPLE = re.compile(r'^(symfonic_stream_review_\w+)\{([^}]*)\} (\S+)$', re.MULTILINE)


def _pause(ticket: str) -> dict[str, Any]:
    run_id = f"run-{ticket}"
    pending = {"name": "approve", "kind": "interrupt", "token": f"tok-{ticket}",
               "interrupt_id": ticket, "tool_call_id": None, "run_id": run_id,
               "session_id": None, "expires_at": time.time() + LIFETIME_S, "resumable": True,
               "payload": {}}
    return {"run_id": run_id, "index": 0, "kind": "interrupt", "timestamp": time.time(),
            "scope": {"tenant": "acme"}, "interrupt": pending}


def _request(ticket: str, **fields: Any) -> tuple[bytes, bytes, list[Any]]:
    body = {"ticket_id": ticket, "token": f"tok-{ticket}", "tenant": "acme",
            "responder": "ana", **fields}
    return ticket.encode(), orjson.dumps(body), []


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


class Scrape:
    """The validator's /metrics, as Prometheus reads them: its review_ series by queue."""

    def __init__(self, validator: InProcessEngine) -> None:
        self._validator = validator
        self.base = ""

    async def __aenter__(self) -> Scrape:
        self._server = await start_health_server(0, self._validator.registry,
                                                 self._validator.health, host="127.0.0.1")
        self.base = f"http://127.0.0.1:{server_port(self._server)}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def read(self) -> dict[tuple[str, str, str], float]:
        """(metric, queue, outcome) -> value."""
        text = await asyncio.to_thread(_get, self.base + "/metrics")
        out: dict[tuple[str, str, str], float] = {}
        for name, labels, value in SAMPLE.findall(text):
            pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            assert pairs["consumer"] == "resumes"
            out[name, pairs["queue"], pairs.get("outcome", "")] = float(value)
        return out


def _open(seen: dict[tuple[str, str, str], float], queue: str = "payments") -> float | None:
    return seen.get(("symfonic_stream_review_open_tickets", queue, ""))


async def _until(scrape: Scrape, check: Any, what: str) -> dict[tuple[str, str, str], float]:
    seen: dict[tuple[str, str, str], float] = {}

    async def done() -> bool:
        nonlocal seen
        seen = await scrape.read()
        return bool(check(seen))

    await wait_until(done, what, within=90.0)
    return seen


async def test_a_ticket_routed_claimed_and_answered_moves_the_queue_metrics(
    prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = settings_for(prefix, routing_rules=rules)
    assert (await ensure_topics(settings, required_topics(settings))).ok  # human.payments
    intake, validating = topologies("resumes", settings)
    async with InProcessEngine(router_topology(settings), settings), \
            InProcessEngine(intake, settings):
        async with InProcessEngine(validating, settings) as validator, \
                Scrape(validator) as scrape:
            # Ready, nothing routed: the rules' queues are there at 0, with their claims.
            seen = await scrape.read()
            assert (_open(seen), _open(seen, "default")) == (0, 0)
            assert {outcome for (name, queue, outcome) in seen
                    if name == "symfonic_stream_review_claims_total"
                    and queue == "payments"} == set(CLAIM_OUTCOMES)
            routed_at = time.time()
            await produce(f"{prefix}.agent-events",
                          [(f"run-{t}".encode(), orjson.dumps(_pause(t)), []) for t in "ab"])
            seen = await _until(scrape, lambda s: _open(s) == 2, "two tickets open")
            age = seen["symfonic_stream_review_oldest_open_ticket_seconds", "payments", ""]
            assert 0 <= age <= time.time() - routed_at
            left = seen["symfonic_stream_review_next_expiry_seconds", "payments", ""]
            assert LIFETIME_S - (time.time() - routed_at) <= left <= LIFETIME_S
            assert ("symfonic_stream_review_next_expiry_seconds", "default", "") not in seen

            await produce(f"{prefix}.resume-requests", [_request("a", action="claim")])
            seen = await _until(
                scrape, lambda s: s["symfonic_stream_review_claims_total", "payments",
                                    "granted"] == 1, "the claim counted")
            assert _open(seen) == 2  # a claim is not an answer
            await produce(f"{prefix}.resume-requests", [_request("b", action="claim"),
                                                        _request("a", answer="yes")])
            seen = await _until(scrape, lambda s: _open(s) == 1, "a answered")
            assert seen["symfonic_stream_review_claims_total", "payments", "granted"] == 2
            assert validator.sample("resumes_total", outcome="accepted") == 1
        # A validator that starts again restores the same tickets from the changelog.
        async with InProcessEngine(validating, settings) as again, Scrape(again) as scrape:
            seen = await scrape.read()
            assert _open(seen) == 1
            age = seen["symfonic_stream_review_oldest_open_ticket_seconds", "payments", ""]
            assert 0 <= age <= time.time() - routed_at
            await produce(f"{prefix}.resume-requests", [_request("b", answer="no")])
            seen = await _until(scrape, lambda s: _open(s) == 0, "b answered")
            assert ("symfonic_stream_review_oldest_open_ticket_seconds", "payments",
                    "") not in seen
