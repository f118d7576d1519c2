"""One test per row of contract §3: exact typed output for each AgentEvent shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter

from symfonic_stream.models.stream_event import StreamEvent
from symfonic_stream.projections.typed import project_typed
from tests.unit.helpers import event, interrupt, raw, tool_call

_STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(StreamEvent)


def typed(kind: str, **fields: Any) -> list[dict[str, Any]]:
    bodies = project_typed(event(kind, **fields))
    for body in bodies:  # every output is a valid StreamEvent, exactly as the model dumps it
        assert _STREAM_EVENT.dump_python(_STREAM_EVENT.validate_python(body), mode="json") == body
    return bodies


def test_ask_user_interrupt_becomes_ask_user_event() -> None:
    assert typed("ask_user", interrupt=interrupt("ask_user")) == [
        {
            "type": "ask_user",
            "questions": [{"question": "Continue?"}],
            "token": "tok-1",
            "tool_call_id": "call-9",
            "interrupt_id": "intr-1",
            "run_id": "run-1",
            "session_id": "sess-1",
            "expires_at": 4000.0,
            "resumable": True,
        }
    ]


def test_ask_user_without_questions_gives_empty_list() -> None:
    [body] = typed("ask_user", interrupt=interrupt("ask_user", payload={"note": "x"}))
    assert body["questions"] == []


def test_ask_user_is_decided_by_the_agent_event_kind_not_the_interrupt_kind() -> None:
    [body] = typed("ask_user", interrupt=interrupt("interrupt"))
    assert body["type"] == "ask_user"
    [body] = typed("interrupt", interrupt=interrupt("ask_user"))
    assert body["type"] == "interrupt"


def test_interrupt_becomes_interrupt_event() -> None:
    pending = interrupt("interrupt", payload={"action": "pay", "amount": 3})
    assert typed("interrupt", interrupt=pending) == [
        {
            "type": "interrupt",
            "name": "approval",
            "payload": {"action": "pay", "amount": 3},
            "token": "tok-1",
            "tool_call_id": "call-9",
            "interrupt_id": "intr-1",
            "run_id": "run-1",
            "session_id": "sess-1",
            "expires_at": 4000.0,
            "resumable": True,
        }
    ]


@pytest.mark.parametrize("kind", ["text_delta", "thinking", "tool_call", "tool_result"])
def test_interrupt_is_checked_first_whatever_the_kind(kind: str) -> None:
    bodies = typed(kind, text="hello", tool_call=tool_call(), interrupt=interrupt("interrupt"))
    assert [body["type"] for body in bodies] == ["interrupt"]


def test_thinking_with_text() -> None:
    assert typed("thinking", text="pondering") == [{"type": "thinking_delta", "text": "pondering"}]


@pytest.mark.parametrize("text", ["", None])
def test_thinking_without_text_emits_nothing(text: str | None) -> None:
    assert typed("thinking", text=text) == []


def test_text_delta_with_text() -> None:
    assert typed("text_delta", text="Hello") == [{"type": "text_delta", "text": "Hello"}]


@pytest.mark.parametrize("text", ["", None])
def test_text_delta_without_text_emits_nothing(text: str | None) -> None:
    assert typed("text_delta", text=text) == []


def test_tool_call_with_arguments_starts_then_sends_compact_arguments_in_order() -> None:
    arguments = {"zeta": 1, "alpha": {"b": [1, 2], "a": "é"}, "mid": None}
    assert typed("tool_call", tool_call=tool_call(arguments=arguments)) == [
        {
            "type": "tool_call_start",
            "tool_name": "search",
            "tool_call_id": "call-1",
            "phase": "executing",
        },
        {
            "type": "tool_call_delta",
            "tool_call_id": "call-1",
            "args_delta": '{"zeta":1,"alpha":{"b":[1,2],"a":"é"},"mid":null}',
        },
    ]


@pytest.mark.parametrize("arguments", [None, {}])
def test_tool_call_without_arguments_only_starts(arguments: dict[str, Any] | None) -> None:
    assert typed("tool_call", tool_call=tool_call(arguments=arguments)) == [
        {
            "type": "tool_call_start",
            "tool_name": "search",
            "tool_call_id": "call-1",
            "phase": "executing",
        }
    ]


def _timing(duration_ms: float | None, is_error: bool) -> dict[str, Any]:
    return {
        "type": "extension",
        "name": "tool_timing",
        "event_id": "call-1",
        "payload": {
            "tool_call_id": "call-1",
            "tool_name": "search",
            "duration_ms": duration_ms,
            "is_error": is_error,
        },
    }


def test_tool_result_with_result_then_timing() -> None:
    call = tool_call(result={"hits": 3}, duration_ms=12.5)
    assert typed("tool_result", tool_call=call) == [
        {"type": "tool_result", "tool_call_id": "call-1", "result": {"hits": 3}},
        _timing(12.5, False),
    ]


def test_tool_result_falls_back_to_error() -> None:
    call = tool_call(error="boom", duration_ms=3)
    assert typed("tool_result", tool_call=call) == [
        {"type": "tool_result", "tool_call_id": "call-1", "result": "boom"},
        _timing(3.0, True),
    ]


def test_tool_result_falls_back_to_empty_string() -> None:
    assert typed("tool_result", tool_call=tool_call()) == [
        {"type": "tool_result", "tool_call_id": "call-1", "result": ""},
        _timing(None, False),
    ]


def test_tool_result_keeps_falsy_non_null_result() -> None:
    [result, _] = typed("tool_result", tool_call=tool_call(result=0, error="ignored"))
    assert result["result"] == 0


def test_tool_result_is_error_follows_error_presence_even_with_result() -> None:
    [result, timing] = typed("tool_result", tool_call=tool_call(result="partial", error="late"))
    assert result["result"] == "partial"
    assert timing["payload"]["is_error"] is True


@pytest.mark.parametrize("kind", ["tool_call", "tool_result"])
def test_tool_kinds_without_tool_call_emit_nothing(kind: str) -> None:
    assert typed(kind) == []


def _done(**usage: int) -> dict[str, Any]:
    return {"text": "All set.", "duration_ms": 1234.5678, "usage": usage}


def test_done_with_usage_then_response_complete() -> None:
    assert typed("done", result=_done(input_tokens=10, output_tokens=5, total_tokens=15)) == [
        {"type": "usage", "input_tokens": 10, "output_tokens": 5},
        {"type": "response_complete", "text": "All set.", "duration_ms": 1234.6},
    ]


def test_done_with_only_one_side_of_usage_still_reports_usage() -> None:
    [usage, _] = typed("done", result=_done(input_tokens=0, output_tokens=7))
    assert usage == {"type": "usage", "input_tokens": 0, "output_tokens": 7}


def test_done_with_total_alone_drops_usage() -> None:
    assert typed("done", result=_done(total_tokens=1200)) == [
        {"type": "response_complete", "text": "All set.", "duration_ms": 1234.6}
    ]


def test_done_without_usage_reports_no_zeros() -> None:
    assert typed("done", result={"text": "ok", "duration_ms": 0.04}) == [
        {"type": "response_complete", "text": "ok", "duration_ms": 0.0}
    ]


def test_done_without_result() -> None:
    assert typed("done") == [{"type": "response_complete", "text": "", "duration_ms": 0.0}]


def test_response_complete_rounds_to_a_tenth_of_a_millisecond() -> None:
    [body] = typed("done", result={"text": "t", "duration_ms": 2.25})
    assert body["duration_ms"] == round(2.25, 1)
    [body] = typed("done", result={"text": "t", "duration_ms": 99.96})
    assert body["duration_ms"] == 100.0


@pytest.mark.parametrize("kind", ["error", "cancelled"])
def test_error_and_cancelled_emit_no_typed_event(kind: str) -> None:
    fields: dict[str, Any] = {"error": {"type": "E", "message": "m"}} if kind == "error" else {}
    assert typed(kind, text="ignored", **fields) == []


@pytest.mark.parametrize("kind", ["mystery", "ask_user", "interrupt", ""])
def test_unknown_kinds_and_pauses_without_interrupt_emit_nothing(kind: str) -> None:
    assert typed(kind, text="hello") == []


def test_a_deployment_may_keep_ticket_tokens_off_stream_events() -> None:
    """Issue 43: ticket tokens ride in stream-events, as the contract's typed pause events
    have them; SYMFONIC_STREAM_TICKET_TOKENS=false makes them "" for deployments that answer
    only through the gateway, live (the typed projector's wiring) and offline alike."""
    from symfonic_stream.config import Settings
    from symfonic_stream.consumers.typed import TYPED
    from symfonic_stream.engine.processor import Collector, InputRecord
    from symfonic_stream.models.names import TopicNames
    from symfonic_stream.tools.offline import project_lines

    line = orjson.dumps(raw("ask_user", interrupt=interrupt("ask_user")))

    def pause(bodies: list[dict[str, Any]]) -> dict[str, Any]:
        return next(b for b in bodies if b["type"] == "ask_user")

    def live(settings: Settings) -> dict[str, Any]:
        processor = TYPED.engines[0].wire(settings, TopicNames("p")).make(0)
        out = Collector()
        processor.process(InputRecord("p.agent-events", 0, 0, b"run-1", line), 1.0, out)
        return pause([orjson.loads(o.value or b"")["event"] for o in out.outputs
                      if b'"event"' in (o.value or b"")])

    def offline(ticket_tokens: bool) -> dict[str, Any]:
        released = [o for c in project_lines([line], "typed", ticket_tokens=ticket_tokens)
                    for o in c.outputs]
        return pause([orjson.loads(o.value or b"")["event"] for o in released
                      if b'"event"' in (o.value or b"")])

    assert live(Settings())["token"] == offline(True)["token"] == "tok-1"
    dropped = live(Settings(stream_ticket_tokens=False))
    assert dropped["token"] == offline(False)["token"] == ""
    assert {k: v for k, v in dropped.items() if k != "token"} == {
        k: v for k, v in live(Settings()).items() if k != "token"}
