"""Issue 43 at the gateway, without a broker: outcomes with one meaning each, narrow rights
(an AG-UI resume answers its own run's tickets, for its principal or a reviewer of the
queue; a console token reviews the queues it names), the review endpoints inside the
tenant's slots and a rate per responder, and tokens kept out of URLs, bodies and caches.

A fake validator stands in for Kafka: each request the gateway sends becomes the step the
resume validator would write on the ticket's review history, filed in the gateway's review
store as its tail would file it; an accepted answer also files the run's continuation, as
the kernel and the projector would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from symfonic_stream.config import Settings
from symfonic_stream.gateway.answers import ReviewSender, verdict_of
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.auth import TokenCheck, grant
from symfonic_stream.gateway.resume import may_answer
from symfonic_stream.gateway.reviews import Reviewed, ReviewStore
from symfonic_stream.gateway.runs import RunStore
from symfonic_stream.gateway.sse import read_envelope
from symfonic_stream.observability.gateway import GatewayMetrics
from tests.integration.gateway_harness import bearer, jwt_settings, mint, serving
from tests.unit.test_gateway_agui import RUN, _event, _pause, envelopes

TICKET = "int-1"  # (the interrupt of test_gateway_agui's _pause)
PRINCIPAL = "pat"  # whose run it is (the events' scope.principal)
#: The run to its pause, then (once answered) its continuation to its end.
WHOLE_RUN = envelopes([_event(0, "text_delta", text="Which?"), _pause(1),
                       _event(2, "text_delta", text="Lyon"),
                       _event(3, "done", result={"text": "Lyon", "duration_ms": 1.0})])
PAUSED_AT = next(e["seq"] for e in WHOLE_RUN if e.get("end", {}).get("status") == "paused")

#: What the fake validator does with a request: the step it writes (event, reason).
Decide = Callable[[dict[str, Any]], tuple[str, str | None]]


def accept(request: dict[str, Any]) -> tuple[str, str | None]:
    return ("answered", None) if "answer" in request else (f"{request['action']}ed"
                                                           .replace("releaseed", "released"),
                                                           None)


def review(ticket_id: str = TICKET, *, tenant: str = "acme", queue: str = "support",
           run_id: str = RUN, principal: str | None = PRINCIPAL) -> dict[str, Any]:
    """A ticket's review state as the validator writes it (models.pauses.ReviewTicket)."""
    ticket = {"ticket_id": ticket_id, "tenant": tenant, "token": f"secret-{ticket_id}",
              "run_id": run_id, "queue": queue, "principal": principal, "name": "ask_user",
              "kind": "ask_user", "routed_at": time.time(), "expires_at": time.time() + 600}
    return {"ticket": ticket, "claim": None, "escalated": None, "answered": None,
            "history": [{"at": time.time(), "event": "routed", "by": None, "request": None,
                         "reason": None, "detail": None}]}


def file_review(store: ReviewStore, state: dict[str, Any]) -> None:
    ticket = state["ticket"]
    assert store.file(orjson.dumps([ticket["tenant"], ticket["ticket_id"]]), orjson.dumps(state))


class Validator:
    """The producer of the gateway's ReviewSender: each request gets its step at once."""

    def __init__(self, reviews: ReviewStore, runs: RunStore, decide: Decide) -> None:
        self.reviews, self.runs, self.decide = reviews, runs, decide
        self.requests: list[dict[str, Any]] = []

    async def send_and_wait(self, topic: str, key: bytes, value: bytes) -> None:
        request = orjson.loads(value)
        self.requests.append(request)
        event, reason = self.decide(request)
        reviewed = self.reviews.get(request["tenant"], request["ticket_id"])
        assert reviewed is not None
        step = {"at": time.time(), "event": event, "by": request["responder"],
                "request": request["request_id"], "reason": reason,
                "detail": f"refused: {reason}" if reason else None}
        file_review(self.reviews, {**reviewed.state,
                                   "history": [*reviewed.state["history"], step]})
        if event == "answered":
            file_run(self.runs, after=PAUSED_AT)


def file_run(runs: RunStore, *, after: int = -1, until: int | None = None) -> None:
    for envelope in WHOLE_RUN:
        if after < envelope["seq"] <= (until if until is not None else envelope["seq"]):
            data = orjson.dumps(envelope)
            parsed = read_envelope(data)
            assert parsed is not None
            runs.append(0, envelope["seq"], parsed, data, "acme")


def gateway(decide: Decide = accept, **overrides: Any) -> tuple[GatewayState, Validator]:
    settings = Settings(**{**jwt_settings(), "gateway_run_wait_s": 2.0,
                           "gateway_verdict_wait_s": 5.0, **overrides})
    runs = RunStore(cache_bytes=10**6, max_runs=10)
    file_run(runs, until=PAUSED_AT)
    reviews = ReviewStore()
    file_review(reviews, review())
    validator = Validator(reviews, runs, decide)
    sender = ReviewSender(settings, reviews)
    sender._producer = validator  # type: ignore[assignment]
    tails: Any = {stream: SimpleNamespace(store=runs) for stream in ("events", "chunks")}
    state = GatewayState(settings, tails, GatewayMetrics(), TokenCheck.from_settings(settings),
                         reviews, sender)
    return state, validator


def client(state: GatewayState) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)),
                             base_url="http://gateway", timeout=30)


def resume_body(payload: Any = "Lyon") -> bytes:
    return orjson.dumps({"threadId": RUN, "runId": "client-run", "state": {}, "messages": [],
                         "tools": [], "context": [], "forwardedProps": {},
                         "resume": [{"interruptId": TICKET, "status": "resolved",
                                     "payload": payload}]})


def agui_events(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


REFUSED_AS_CLAIMED: Decide = lambda request: (  # noqa: E731
    ("answer_refused", "claimed") if "answer" in request else ("claim_refused", "held"))


# -- Outcomes with one meaning each --------------------------------------------------------

def test_a_verdict_is_a_success_by_its_steps_event_never_by_its_reasons_spelling() -> None:
    """The refusal reason ``claimed`` (another holds the claim) is spelt as the claim
    outcome ``claimed``: only the step's event tells them apart."""
    refused = verdict_of({"event": "answer_refused", "reason": "claimed", "detail": "by bo"})
    assert (refused.ok, refused.outcome, refused.detail) == (False, "claimed", "by bo")
    assert not verdict_of({"event": "claim_refused", "reason": "held"}).ok
    assert not verdict_of({"event": "claim_refused", "reason": "released"}).ok
    assert not verdict_of({"event": "answer_refused", "reason": "accepted"}).ok
    for event, outcome in (("answered", "accepted"), ("claimed", "claimed"),
                           ("released", "released")):
        assert (verdict_of({"event": event}).ok, verdict_of({"event": event}).outcome) == (
            True, outcome)
    assert not verdict_of({"event": "lease_expired"}).ok


async def test_a_refused_answer_or_claim_is_409_with_the_validators_code() -> None:
    """Issue 43: the console answered ``200 {"outcome": "claimed"}`` (shown green) to a
    reviewer whose answer was refused because another held the claim."""
    state, validator = gateway(REFUSED_AS_CLAIMED)
    reviewer = bearer("acme", "ana", queues=["support"])
    async with client(state) as http:
        answered = await http.post(f"/v1/reviews/tickets/{TICKET}/answer", headers=reviewer,
                                   json={"answer": "Lyon"})
        claimed = await http.post(f"/v1/reviews/tickets/{TICKET}/claim", headers=reviewer)
    assert (answered.status_code, answered.json()["outcome"]) == (409, "claimed")
    assert (claimed.status_code, claimed.json()["outcome"]) == (409, "held")
    assert len(validator.requests) == 2
    state, _ = gateway(accept)
    async with client(state) as http:
        claimed = await http.post(f"/v1/reviews/tickets/{TICKET}/claim", headers=reviewer)
    assert (claimed.status_code, claimed.json()["outcome"]) == (200, "claimed")


async def test_a_refused_resume_is_a_run_error_with_the_validators_code_and_nothing_else() -> None:
    """Issue 43: a resume refused ``claimed`` got RUN_STARTED and a ``verdict``, then
    waited for a continuation that never came, holding a client slot."""
    state, validator = gateway(REFUSED_AS_CLAIMED)
    async with client(state) as http, asyncio.timeout(20):
        refused = await http.post(f"/v1/runs/{RUN}/events", content=resume_body(),
                                  headers=bearer("acme", PRINCIPAL))
    assert refused.status_code == 200
    [error] = agui_events(refused.text)
    assert (error["type"], error["code"]) == ("RUN_ERROR", "claimed")
    assert len(validator.requests) == 1 and state.slots.taken == 0


# -- Narrow rights -------------------------------------------------------------------------

def test_a_ticket_is_answered_by_its_runs_principal_or_a_reviewer_of_its_queue() -> None:
    reviewed = Reviewed(review())
    assert may_answer(grant({"tenant": "acme", "sub": PRINCIPAL}, unscoped_read=False),
                      reviewed)
    assert may_answer(grant({"tenant": "acme", "sub": "rev", "queues": ["support"]},
                            unscoped_read=False), reviewed)
    assert may_answer(grant({"tenant": "acme", "sub": "lead", "queues": ["*"]},
                            unscoped_read=False), reviewed)
    for claims in ({"sub": "mallory"}, {"sub": "mallory", "queues": ["payments"]}):
        assert not may_answer(grant({"tenant": "acme", **claims}, unscoped_read=False),
                              reviewed)
    nobodys = Reviewed(review(principal=None))
    assert not may_answer(grant({"tenant": "acme", "sub": PRINCIPAL}, unscoped_read=False),
                          nobodys)


async def test_a_resume_answers_its_runs_tickets_for_its_principal_or_a_queues_reviewer(
) -> None:
    """Issue 43: ``reviews:answer`` was the whole tenant: an end user resuming their own
    run could answer any ticket of the tenant, and a resume was not checked to answer a
    ticket of the run it posts to."""
    state, validator = gateway()
    async with client(state) as http, asyncio.timeout(30):
        stranger = await http.post(f"/v1/runs/{RUN}/events", content=resume_body(),
                                   headers=bearer("acme", "mallory"))
        [error] = agui_events(stranger.text)
        assert (error["type"], error["code"]) == ("RUN_ERROR", "not_permitted")
        file_review(state.reviews, review(run_id="another-run"))
        elsewhere = await http.post(f"/v1/runs/{RUN}/events", content=resume_body(),
                                    headers=bearer("acme", PRINCIPAL))
        [error] = agui_events(elsewhere.text)
        assert (error["type"], error["code"]) == ("RUN_ERROR", "unknown_interrupt")
        assert validator.requests == []  # nothing was written
        file_review(state.reviews, review())
        own = await http.post(f"/v1/runs/{RUN}/events", content=resume_body(),
                              headers=bearer("acme", PRINCIPAL))
    events = agui_events(own.text)
    assert [e["type"] for e in events[:2]] == ["RUN_STARTED", "CUSTOM"]
    assert events[1]["value"]["outcome"] == "accepted"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert [r["responder"] for r in validator.requests] == [PRINCIPAL]


async def test_a_console_token_reviews_only_the_queues_it_names() -> None:
    """Issue 43: every ticket of the tenant, in every queue (payment approvals included),
    was listed, claimed and answered by any token with ``reviews:answer``."""
    state, validator = gateway()
    file_review(state.reviews, review("pay-1", queue="payments"))
    file_review(state.reviews, review("globex-1", tenant="globex", queue="payments"))
    payments = bearer("acme", "ana", queues=["payments"])
    async with client(state) as http:
        listed = await http.get("/v1/reviews/tickets", headers=payments)
        assert [t["ticket"]["ticket_id"] for t in listed.json()["tickets"]] == ["pay-1"]
        for action in ("claim", "release", "answer"):
            outside = await http.post(f"/v1/reviews/tickets/{TICKET}/{action}",
                                      headers=payments, json={"answer": 1})
            assert (outside.status_code, outside.json()["outcome"]) == (404, "not_found")
        inside = await http.post("/v1/reviews/tickets/pay-1/claim", headers=payments)
        assert inside.status_code == 200
        nothing = await http.get("/v1/reviews/tickets", headers=bearer("acme", "ana"))
        assert nothing.json() == {"tickets": []}  # a token naming no queue reviews none
        every = await http.get("/v1/reviews/tickets", headers=bearer("acme", "lead",
                                                                    queues=["*"]))
        assert sorted(t["ticket"]["ticket_id"] for t in every.json()["tickets"]) == [
            TICKET, "pay-1"]
    assert [r["ticket_id"] for r in validator.requests] == ["pay-1"]
    assert "secret-" not in listed.text + every.text


async def test_the_console_needs_both_scopes_a_tenant_and_a_subject() -> None:
    """Issue 43: docs said the console needs ``runs:read`` too; the code checked only
    ``reviews:answer``."""
    state, _ = gateway()
    async with client(state) as http:
        for who in (bearer("acme", "ana", scope="reviews:answer", queues=["*"]),
                    bearer("acme", "ana", scope="runs:read", queues=["*"]),
                    bearer("acme", None, queues=["*"]), bearer(None, "ana", queues=["*"]),
                    bearer("acme", "ana", scope=None, queues=["*"])):
            answer = await http.get("/v1/reviews/tickets", headers=who)
            assert answer.status_code == 403, answer.text


async def test_a_token_without_a_scope_claim_reads_nothing_unless_the_setting_says() -> None:
    state, _ = gateway()
    unscoped = bearer("acme", "ana", scope=None)
    async with client(state) as http:
        assert (await http.get(f"/v1/runs/{RUN}/events", headers=unscoped)).status_code == 403
    state, _ = gateway(gateway_unscoped_tokens_read=True)
    file_run(state.tails["events"].store, after=PAUSED_AT)  # (the run ends: the read ends)
    async with client(state) as http:
        read = await http.get(f"/v1/runs/{RUN}/events", headers=unscoped)
        assert read.status_code == 200 and "event: end" in read.text
        answer = await http.post(f"/v1/runs/{RUN}/events", content=resume_body(),
                                 headers=unscoped)
        assert answer.status_code == 403  # reading, never answering


# -- The review endpoints: slots and rate --------------------------------------------------

async def test_the_review_endpoints_take_a_slot_of_the_tenant() -> None:
    """Issue 43: the review endpoints took no client slot and each may wait 30 s."""
    state, validator = gateway()
    state.slots.per_tenant = 0  # acme has no slot left
    reviewer = bearer("acme", "ana", queues=["support"])
    async with client(state) as http:
        listed = await http.get("/v1/reviews/tickets", headers=reviewer)
        claimed = await http.post(f"/v1/reviews/tickets/{TICKET}/claim", headers=reviewer)
    for refused in (listed, claimed):
        assert (refused.status_code, refused.json()["error"]) == (503, "too_many_tenant_clients")
    assert validator.requests == [] and state.slots.taken == 0


async def test_one_responders_review_requests_are_rate_limited() -> None:
    state, validator = gateway(gateway_review_requests_per_minute=3)
    ana, bo = bearer("acme", "ana", queues=["support"]), bearer("acme", "bo", queues=["*"])
    async with client(state) as http:
        sent = [await http.post(f"/v1/reviews/tickets/{TICKET}/claim", headers=ana)
                for _ in range(4)]
        other = await http.post(f"/v1/reviews/tickets/{TICKET}/claim", headers=bo)
        resumed = await http.post(f"/v1/runs/{RUN}/events", content=resume_body(),
                                  headers=bearer("acme", "ana", queues=["support"]))
    assert [s.status_code for s in sent] == [200, 200, 200, 429]
    assert int(sent[-1].headers["retry-after"]) >= 1
    assert other.status_code == 200  # per responder: bo is not held by ana's rate
    assert resumed.status_code == 429  # an AG-UI resume is ana's review request too
    assert len(validator.requests) == 4


# -- Tokens out of URLs, bodies read after them, nothing kept by a cache ------------------

async def test_a_query_string_token_is_taken_only_by_the_get_streams() -> None:
    """Issue 43: ``?access_token=`` was accepted on every route, POSTs included."""
    state, validator = gateway()
    file_run(state.tails["events"].store, after=PAUSED_AT)
    token = mint("acme", PRINCIPAL, queues=["support"])
    async with client(state) as http:
        read = await http.get(f"/v1/runs/{RUN}/events?access_token={token}")
        assert read.status_code == 200
        for method, path in (("POST", f"/v1/runs/{RUN}/events"),
                             ("POST", f"/v1/reviews/tickets/{TICKET}/claim"),
                             ("GET", "/v1/reviews/tickets")):
            refused = await http.request(method, f"{path}?access_token={token}",
                                         content=resume_body())
            assert refused.status_code == 401, (method, path)
    assert validator.requests == []


async def test_the_token_is_checked_before_any_body_is_read() -> None:
    """Issue 43: the AG-UI POST body (up to 1 MiB) was parsed before the token was
    checked: an anonymous request cost the parse."""
    state, _ = gateway()
    async with client(state) as http:
        anonymous = await http.post(f"/v1/runs/{RUN}/events", content=b"{not json")
        assert anonymous.status_code == 401
        reader = await http.post(f"/v1/runs/{RUN}/events", content=b"{not json",
                                 headers=bearer("acme", "ana", scope="reviews:answer"))
        assert reader.status_code == 403  # (a token that may not read: refused unread too)


@pytest.mark.parametrize("declared", [True, False])
async def test_a_body_over_its_cap_is_refused_without_reading_it_whole(declared: bool) -> None:
    """Issue 43: the console's answer endpoint read the whole body, then checked its size
    (a 40 MiB body peaked at 80 MiB). A body is read as it comes, never past its cap; a
    Content-Length over it is refused unread."""
    state, validator = gateway()
    reviewer = bearer("acme", "ana", queues=["support"])
    read: list[int] = []

    async def body() -> Any:
        for _ in range(64):  # 4 MiB in all, in 64 KiB pieces
            read.append(1)
            yield b"x" * 65536

    async with client(state) as http:
        headers = {**reviewer, "Content-Length": str(64 * 65536)} if declared else reviewer
        for path in (f"/v1/reviews/tickets/{TICKET}/answer", f"/v1/runs/{RUN}/events"):
            read.clear()
            refused = await http.post(path, content=body(), headers=headers)
            assert refused.status_code == 413, refused.text
            assert refused.headers["connection"] == "close"
            assert len(read) <= (1 if declared else 18), len(read)  # 1 MiB and a piece
    assert validator.requests == []


async def test_no_response_is_cached_or_referred() -> None:
    """Issue 43: the console's URL carried a token, and no response said
    ``Referrer-Policy: no-referrer`` or ``Cache-Control: no-store``."""
    state, _ = gateway()
    file_run(state.tails["events"].store, after=PAUSED_AT)
    async with client(state) as http:
        answers = [await http.get("/review"), await http.get("/"),
                   await http.get(f"/v1/runs/{RUN}/events", headers=bearer("acme", "ana")),
                   await http.get("/v1/reviews/tickets", headers=bearer("acme", "ana")),
                   await http.get(f"/v1/runs/{RUN}/events")]
    for answer in answers:
        assert answer.headers["cache-control"] == "no-store", answer.url
        assert answer.headers["referrer-policy"] == "no-referrer", answer.url


# -- One snapshot per tenant per change ----------------------------------------------------

async def test_a_tenants_console_streams_share_one_snapshot_per_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: each console stream scanned, sorted and encoded every tenant's tickets at
    each change; now a change of acme's tickets is rendered once for all acme's streams,
    and no other tenant's ticket is looked at."""
    state, _ = gateway()
    for i in range(5):
        file_review(state.reviews, review(f"globex-{i}", tenant="globex"))
    shown: list[str] = []
    real = Reviewed.shown

    def counted(self: Reviewed, now: float) -> dict[str, Any]:
        shown.append(self.ticket["ticket_id"])
        return real(self, now)

    monkeypatch.setattr(Reviewed, "shown", counted)
    token = mint("acme", "ana", queues=["support"])
    async with serving(state) as base, httpx.AsyncClient(timeout=30) as http:
        streams = [_Console(http, f"{base}/v1/reviews/events?access_token={token}")
                   for _ in range(8)]
        for stream in streams:
            assert [t["ticket"]["ticket_id"] for t in await stream.next()] == [TICKET]
        assert shown == [TICKET]  # one rendering for the eight
        file_review(state.reviews, review("int-2"))
        for stream in streams:
            assert sorted(t["ticket"]["ticket_id"] for t in await stream.next()) == [
                TICKET, "int-2"]
        assert sorted(shown) == sorted([TICKET, TICKET, "int-2"])
        for stream in streams:
            await stream.close()


class _Console:
    """One console stream, read message by message."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self._queue: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
        self._task = asyncio.create_task(self._read(http, url))

    async def _read(self, http: httpx.AsyncClient, url: str) -> None:
        async with http.stream("GET", url) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    await self._queue.put(orjson.loads(line[6:])["tickets"])

    async def next(self) -> list[dict[str, Any]]:
        async with asyncio.timeout(20):
            return await self._queue.get()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
