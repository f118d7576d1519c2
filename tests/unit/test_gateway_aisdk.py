"""``?format=ai-sdk`` and the AI SDK's chat requests (pure: the real typed projection, no
broker; the chunks against the ``ai`` package's own schema: tests/browser/test_ai_sdk.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from symfonic_stream.config import Settings
from symfonic_stream.gateway.app import create_app
from symfonic_stream.gateway.chat import ChatRequest, chat_answers, parse_request
from symfonic_stream.gateway.resume import Pause, ResumeError
from symfonic_stream.gateway.runs import Held
from symfonic_stream.gateway.sse import BadRequest
from symfonic_stream.gateway.viewer import Item, Viewing, aisdk_messages
from tests.unit.test_gateway_agui import RUN, _event, _pause, envelopes
from tests.unit.test_gateway_resume import _state, _token

PAUSES = [Pause(4, ("int-1",)), Pause(9, ("int-2", "int-3"))]


def _approval(interrupt_id: str, approved: Any = True, **more: Any) -> dict[str, Any]:
    return {"type": "tool-pay", "toolCallId": "c", "state": "approval-responded",
            "approval": {"id": interrupt_id, "approved": approved, **more}}


def _request(*parts: dict[str, Any], answers: list[dict[str, Any]] | None = None,
             role: str = "assistant") -> ChatRequest:
    body = {"id": RUN, "trigger": "submit-message",
            "messages": [{"id": "u", "role": "user", "parts": []},
                         {"id": RUN, "role": role, "parts": list(parts)}],
            **({"answers": answers} if answers is not None else {})}
    return parse_request(orjson.dumps(body))


def test_approvals_and_answers_answer_the_latest_pause_they_name() -> None:
    pause, answers = chat_answers(PAUSES, _request(
        _approval("int-1"),  # an earlier pause's approval: the message's history
        _approval("int-2", False, reason="too much"),
        answers=[{"interruptId": "int-3", "answer": {"city": "Paris"}}]))
    assert pause.seq == 9
    assert answers == {"int-2": {"approved": False, "reason": "too much"},
                       "int-3": {"city": "Paris"}}
    pause, answers = chat_answers(PAUSES, _request(_approval("int-1")))  # a replay
    assert (pause.seq, answers) == (4, {"int-1": {"approved": True}})


@pytest.mark.parametrize(("request_", "code"), [
    (lambda: _request(), "nothing_to_answer"),
    (lambda: _request(_approval("int-1"), role="user"), "nothing_to_answer"),
    (lambda: _request(answers=[{"interruptId": "int-9", "answer": 1}]), "unknown_interrupt"),
    (lambda: _request(_approval("int-2")), "resume_incomplete"),
    (lambda: _request(_approval("int-1"), answers=[{"interruptId": "int-1", "answer": 1}]),
     "duplicate_interrupt"),
    (lambda: _request(answers=[{"interruptId": "int-1", "answer": 1},
                               {"interruptId": "int-1", "answer": 2}]), "duplicate_interrupt"),
])
def test_a_request_that_answers_no_whole_pause_is_refused_before_anything_is_sent(
        request_: Any, code: str) -> None:
    with pytest.raises(ResumeError) as refused:
        chat_answers(PAUSES, request_())
    assert refused.value.code == code


@pytest.mark.parametrize("body", [
    b"[]", b'{"messages": []}',  # no chat id
    orjson.dumps({"id": RUN, "messages": [{"role": "assistant", "parts": [
        _approval("int-1", approved="yes")]}]}),  # an approval is a boolean, never coerced
    orjson.dumps({"id": RUN, "answers": [{"answer": 1}]}),  # an answer names its interrupt
])
def test_what_is_no_chat_request_is_a_bad_request(body: bytes) -> None:
    with pytest.raises(BadRequest, match="not an AI SDK chat request"):
        parse_request(body)


async def _items(run: list[dict[str, Any]]) -> AsyncGenerator[list[Item], None]:
    yield [Held(e["seq"], "end" if "end" in e else "event", orjson.dumps(e),
                e.get("end", {}).get("status") in ("completed",)) for e in run]


async def _sent(run: list[dict[str, Any]], after: int, next_seq: int) -> list[Any]:
    viewing = Viewing()
    held = SimpleNamespace(run_id=RUN, next_seq=next_seq)
    parts = [p async for p in aisdk_messages(_items(run), held, after,  # type: ignore[arg-type]
                                             viewing, message_id=RUN)]
    assert viewing.run_ended
    return [line[6:] if line == b"data: [DONE]" else orjson.loads(line[6:])
            for p in parts for line in p.split(b"\n") if line.startswith(b"data: ")]


async def test_a_response_ends_where_the_run_waits_and_goes_past_a_pause_it_left() -> None:
    run = envelopes([_event(0, "text_delta", text="a"), _pause(1),
                     _event(2, "text_delta", text="b"), _event(3, "done", result={
                         "text": "ab", "duration_ms": 1.0})])
    paused = next(e["seq"] for e in run if e.get("end", {}).get("status") == "paused")
    waiting = await _sent(run[:paused + 1], -1, paused + 1)  # the run waits at its pause
    assert waiting[0] == {"type": "start", "messageId": RUN} and waiting[-1] == b"[DONE]"
    assert waiting[-2] == {"type": "finish", "finishReason": "other",
                           "messageMetadata": {"status": "paused"}}
    whole = await _sent(run, -1, len(run))  # the run has gone on: one finish, at its end
    assert [c["type"] for c in whole[:-1]].count("finish") == 1
    assert whole[-2]["finishReason"] == "stop" and "b" in [c.get("delta") for c in whole[:-1]]
    then = await _sent(run, paused, len(run))  # resumed after the pause: the rest alone
    assert then[1:] == whole[len(whole) - len(then) + 1:]
    assert "a" not in [c.get("delta") for c in then[:-1]]


async def test_chat_routes_follow_the_setting_and_answering_needs_its_rights_first() -> None:
    state = _state()
    state.settings = Settings(**{**state.settings.model_dump(), "gateway_chat_api": "/chat"})
    app = create_app(state)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gateway") as client:
        def bearer(scope: str | None, sub: str | None = "ana") -> dict[str, str]:
            return {"Authorization": f"Bearer {_token('acme', scope, sub)}"}

        # Answering needs reviews:answer and a subject, before the body is read.
        for who in (bearer("runs:read"), bearer("runs:read reviews:answer", sub=None)):
            refused = await client.post("/chat", content=b"not json", headers=who)
            assert refused.status_code == 403, refused.text
        bad = await client.post("/chat", content=b"{}", headers=bearer(
            "runs:read reviews:answer"))
        assert bad.status_code == 400 and "chat request" in bad.json()["detail"]
        assert (await client.post("/api/chat", content=b"{}")).status_code == 404  # moved
        unknown = await client.get("/v1/runs/r/events?format=ai-sdk-v9",
                                   headers=bearer("runs:read"))
        assert unknown.status_code == 400 and "ai-sdk" in unknown.json()["detail"]
        stream = await client.get("/chat/r/stream", headers=bearer("reviews:answer"))
        assert stream.status_code == 403  # reading a run needs runs:read, as every stream
