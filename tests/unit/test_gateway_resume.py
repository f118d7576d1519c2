"""Answering a pause through the gateway, without a broker (issue 38): the scopes, the ticket
token kept from the streams, the AG-UI contract a resume is checked against, an AG-UI
response ending at its pause, the review store, and the console's and POST's refusals."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import Event as AgUiEvent
from ag_ui.core import RunAgentInput
from pydantic import TypeAdapter

from symfonic_stream.config import Settings
from symfonic_stream.gateway.agui import AgUiRun
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.auth import TokenCheck
from symfonic_stream.gateway.resume import Pause, ResumeError, answered_pause, run_error
from symfonic_stream.gateway.reviews import ReviewStore
from symfonic_stream.gateway.runs import Held, RunStore
from symfonic_stream.gateway.sse import read_envelope, without_token
from symfonic_stream.gateway.viewer import Item, Viewing, agui_messages
from symfonic_stream.observability.gateway import GatewayMetrics
from tests.integration.gateway_harness import jwt_settings, mint
from tests.unit.test_gateway_agui import RUN, _event, _pause, envelopes

AG_UI = TypeAdapter(AgUiEvent)


def _token(tenant: str, scope: str | None, sub: str | None = "ana") -> str:
    return mint(tenant, sub, scope, queues=["*"])


def test_the_ticket_token_never_leaves_in_an_envelope_or_an_agui_interrupt() -> None:
    run = envelopes([_event(0, "text_delta", text="hi"), _pause(1)])
    translation, events = AgUiRun(RUN), []
    for envelope in run:
        data = orjson.dumps(envelope)
        parsed = read_envelope(data)
        assert parsed is not None
        sent = without_token(parsed, data)
        if parsed.name == "ask_user":
            assert "token" not in orjson.loads(sent)["event"]
            assert {**orjson.loads(sent)["event"], "token": "tok"} == envelope["event"]
        else:
            assert sent is data  # every other envelope: the bytes on the topic
        events += translation.translate(orjson.loads(sent))
    assert events[-1]["outcome"]["type"] == "interrupt"
    assert '"tok"' not in orjson.dumps(events).decode()


def _input(**fields: Any) -> RunAgentInput:
    return RunAgentInput.model_validate({
        "threadId": RUN, "runId": "client-run", "state": {}, "messages": [], "tools": [],
        "context": [], "forwardedProps": {}, **fields})


PAUSES = [Pause(4, ("int-1",)), Pause(9, ("int-2", "int-3"))]


def _resume(*ids: str, status: str = "resolved") -> list[dict[str, Any]]:
    return [{"interruptId": i, "status": status, "payload": {"approved": True}} for i in ids]


@pytest.mark.parametrize(("given", "code"), [
    ({"threadId": "another", "resume": _resume("int-2", "int-3")}, "wrong_thread"),
    ({"resume": _resume("int-9")}, "unknown_interrupt"),
    ({"resume": _resume("int-2")}, "resume_incomplete"),
    ({"resume": _resume("int-2", "int-3", "int-1")}, "unknown_interrupt"),
    ({"resume": _resume("int-2", "int-2", "int-3")}, "duplicate_interrupt"),
    ({"resume": _resume("int-2", "int-3", status="cancelled")}, "cancel_unsupported"),
])
def test_a_resume_that_breaks_the_agui_contract_is_a_run_error(
        given: dict[str, Any], code: str) -> None:
    with pytest.raises(ResumeError) as refused:
        answered_pause(PAUSES, _input(**given), RUN)
    assert refused.value.code == code
    AG_UI.validate_python(orjson.loads(run_error(code, refused.value.message)[6:]))


def test_a_resume_names_the_pause_it_answers_the_last_or_an_earlier_one() -> None:
    assert answered_pause(PAUSES, _input(resume=_resume("int-3", "int-2")), RUN).seq == 9
    assert answered_pause(PAUSES, _input(resume=_resume("int-1")), RUN).seq == 4  # a replay


async def _items(run: list[dict[str, Any]]) -> AsyncGenerator[list[Item], None]:
    yield [Held(e["seq"], "end" if "end" in e else "event", orjson.dumps(e), False) for e in run]


async def test_an_agui_response_ends_at_the_pause_and_the_next_one_goes_on() -> None:
    run = envelopes([_event(0, "text_delta", text="a"), _pause(1),
                     _event(2, "text_delta", text="b"), _event(3, "done", result={
                         "text": "ab", "duration_ms": 1.0})])
    paused = next(e["seq"] for e in run if e.get("end", {}).get("status") == "paused")

    async def sent(after: int, started: bool = False) -> list[dict[str, Any]]:
        viewing = Viewing()
        parts = [p async for p in agui_messages(_items(run), RUN, after, viewing,
                                                started=started)]
        assert viewing.run_ended
        return [orjson.loads(line[6:]) for p in parts for line in p.split(b"\n")
                if line.startswith(b"data: ")]

    first = await sent(-1)
    assert first[-1]["type"] == "RUN_FINISHED" and first[-1]["outcome"]["type"] == "interrupt"
    assert "b" not in [e.get("delta") for e in first]
    then = await sent(paused)
    assert then[0]["type"] == "RUN_STARTED" and then[-1]["outcome"] == {"type": "success"}
    resumed = await sent(paused, started=True)  # a resume sent RUN_STARTED itself
    assert resumed == then[1:]
    verdict = {"type": "CUSTOM", "name": "verdict",
               "value": {"interruptId": "int-1", "outcome": "accepted", "replayed": False}}
    for event in [*first, *then, verdict]:
        AG_UI.validate_python(event)


def _review(tenant: str | None, ticket_id: str, **state: Any) -> tuple[bytes, bytes]:
    ticket = {"ticket_id": ticket_id, "tenant": tenant, "token": "secret", "run_id": "r",
              "queue": "q", "routed_at": 1.0, "expires_at": time.time() + 60}
    value = {"ticket": ticket, "claim": None, "escalated": None, "answered": None,
             "history": [{"at": 1.0, "event": "routed", "request": None}], **state}
    return orjson.dumps([tenant, ticket_id]), orjson.dumps(value)


def test_the_review_store_keeps_the_latest_state_and_shows_no_token() -> None:
    store = ReviewStore()
    assert store.file(*_review("acme", "t-1"))
    assert store.file(*_review("acme", "t-2", claim={"by": "bo", "until": time.time() + 60}))
    assert not store.file(orjson.dumps(["globex", "t-1"]), _review("acme", "t-1")[1])
    assert not store.file(b"not json", b"{}")
    shown = [r.shown(time.time()) for r in store.of_tenant("acme")]
    assert [(s["ticket"]["ticket_id"], s["holder"]) for s in shown] == [("t-1", None),
                                                                      ("t-2", "bo")]
    assert all("token" not in s["ticket"] for s in shown)
    assert store.of_tenant("globex") == []
    assert store.file(orjson.dumps(["acme", "t-1"]), None)  # a tombstone: forgotten
    assert store.get("acme", "t-1") is None


def _state() -> GatewayState:
    settings = Settings(**jwt_settings(), gateway_run_wait_s=5.0)
    runs = RunStore(cache_bytes=10**6, max_runs=10)
    tails: Any = {stream: SimpleNamespace(store=runs) for stream in ("events", "chunks")}
    reviews = ReviewStore()
    reviews.file(*_review("acme", "t-1"))
    sender: Any = SimpleNamespace()  # (never reached: every request here is refused first)
    return GatewayState(settings, tails, GatewayMetrics(), TokenCheck.from_settings(settings),
                        reviews, sender)


async def test_reading_and_answering_are_rights_of_their_own() -> None:
    app = create_app(_state())
    resume = orjson.dumps(_input(resume=_resume("int-1")).model_dump(by_alias=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gateway") as client:
        def bearer(scope: str | None, tenant: str = "acme", sub: str | None = "ana"
                   ) -> dict[str, str]:
            return {"Authorization": f"Bearer {_token(tenant, scope, sub)}"}

        # Before any wait for the run: a resume without reviews:answer, or without a subject.
        for who in (bearer("runs:read"), bearer(None), bearer("runs:read reviews:answer",
                                                              sub=None)):
            answer = await client.post(f"/v1/runs/{RUN}/events", content=resume, headers=who)
            assert answer.status_code == 403, answer.text
        answer = await client.get(f"/v1/runs/{RUN}/events", headers=bearer("reviews:answer"))
        assert answer.status_code == 403  # answering is not reading
        answer = await client.post(f"/v1/runs/{RUN}/events", content=b"{}",
                                   headers=bearer("runs:read"))
        assert answer.status_code == 400 and "RunAgentInput" in answer.json()["detail"]
        # The console: both scopes and a subject; a tenant's own tickets only.
        listed = await client.get("/v1/reviews/tickets", headers=bearer("runs:read"))
        assert listed.status_code == 403
        listed = await client.get("/v1/reviews/tickets",
                                  headers=bearer("runs:read reviews:answer"))
        assert [t["ticket"]["ticket_id"] for t in listed.json()["tickets"]] == ["t-1"]
        assert "secret" not in listed.text
        other = bearer("runs:read reviews:answer", tenant="globex")
        assert (await client.get("/v1/reviews/tickets", headers=other)).json() == {"tickets": []}
        claimed = await client.post("/v1/reviews/tickets/t-1/claim", headers=other)
        assert claimed.status_code == 404  # another tenant's ticket: as no ticket at all


async def test_a_consoles_stream_holds_a_client_slot_of_its_tenant() -> None:
    state = _state()
    state.slots.per_tenant = 0  # acme has no slot left
    app = create_app(state)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gateway") as client:
        token = _token("acme", "runs:read reviews:answer")
        refused = await client.get(f"/v1/reviews/events?access_token={token}")
    assert refused.status_code == 503 and refused.json()["error"] == "too_many_tenant_clients"
    assert state.slots.taken == 0
