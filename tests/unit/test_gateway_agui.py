"""``?format=ag-ui``: typed envelopes as AG-UI events, each validated by the
``ag-ui-protocol`` package's own models (pure: the real typed projection, no broker)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from ag_ui.core import Event as AgUiEvent
from pydantic import TypeAdapter

from symfonic_stream.gateway.agui import AgUiRun, sse
from symfonic_stream.tools.offline import project_lines

AG_UI = TypeAdapter(AgUiEvent)
RUN = "run-agui"


def _event(index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"run_id": RUN, "index": index, "kind": kind, "timestamp": 100.0 + index, **fields}


def _call(index: int, kind: str, **call: Any) -> dict[str, Any]:
    return _event(index, kind, tool_call={"id": "call-1", "name": "search", **call})


def _pause(index: int) -> dict[str, Any]:
    return _event(index, "ask_user", interrupt={
        "name": "ask_user", "kind": "ask_user",
        "payload": {"questions": ["Which city?"], "response_schema": {"type": "string"}},
        "token": "tok", "tool_call_id": "call-9", "interrupt_id": "int-1", "run_id": RUN,
        "session_id": "s", "expires_at": 4_102_444_800.0, "resumable": True})


def envelopes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The typed projection of ``events``, exactly as the typed projector writes it."""
    out = []
    for released in project_lines([orjson.dumps(e) for e in events], "typed"):
        out += [orjson.loads(o.value or b"") for o in released.outputs]
    return out


def translate(run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    translation = AgUiRun(RUN)
    events = [e for envelope in run for e in translation.translate(envelope)]
    for event in events:
        AG_UI.validate_python(event)  # the wire form (camelCase) is what the models accept
    return events


FULL_RUN = [
    _event(0, "thinking", text="let me think"), _event(1, "thinking", text=" more"),
    _event(2, "text_delta", text="Hello"), _event(3, "text_delta", text=" world"),
    _call(4, "tool_call", arguments={"q": "x"}),
    _call(5, "tool_result", result={"hits": 2}, duration_ms=12.5),
    _event(6, "text_delta", text="Done."),
    _event(7, "done", result={"text": "Hello world Done.", "duration_ms": 40.0,
                              "usage": {"input_tokens": 5, "output_tokens": 7,
                                        "total_tokens": 12}}),
]


def test_a_whole_run_maps_to_a_valid_ag_ui_stream() -> None:
    events = translate(envelopes(FULL_RUN))
    assert [e["type"] for e in events] == [
        "RUN_STARTED",
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "CUSTOM",  # tool_timing
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "CUSTOM",  # usage
        "RUN_FINISHED",
    ]
    by_type = {e["type"]: e for e in events}
    assert by_type["TOOL_CALL_ARGS"]["delta"] == '{"q":"x"}'
    assert orjson.loads(by_type["TOOL_CALL_RESULT"]["content"]) == {"hits": 2}
    customs = {e["name"]: e["value"] for e in events if e["type"] == "CUSTOM"}
    assert customs["tool_timing"]["duration_ms"] == 12.5
    assert customs["usage"] == {"input_tokens": 5, "output_tokens": 7}
    finished = events[-1]
    assert finished["outcome"] == {"type": "success"}
    assert finished["result"] == {"text": "Hello world Done.", "duration_ms": 40.0}
    assert finished["usage"] == [{"inputTokens": 5, "outputTokens": 7}]
    # Text message ids pair up; every event carries the envelope's time in ms.
    starts = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START"]
    ends = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_END"]
    assert starts == ends and len(set(starts)) == 2
    assert all(e["timestamp"] >= 100_000 for e in events)


def test_a_pause_finishes_the_run_with_its_interrupt_and_the_continuation_starts_anew() -> None:
    run = envelopes([_event(0, "text_delta", text="Hi"), _pause(1),
                     _event(2, "text_delta", text="Paris it is"),
                     _event(3, "cancelled")])
    events = translate(run)
    assert [e["type"] for e in events] == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "RUN_FINISHED",
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    paused = events[4]["outcome"]
    assert paused["type"] == "interrupt"
    [interrupt] = paused["interrupts"]
    assert interrupt["id"] == "int-1" and interrupt["toolCallId"] == "call-9"
    assert interrupt["message"] == "Which city?"
    assert interrupt["metadata"]["questions"] == ["Which city?"]
    assert interrupt["expiresAt"].startswith("2100-01-01")
    assert events[-1]["outcome"] == {"type": "cancelled"}


def test_an_interrupt_carries_its_payload_and_answer_schema() -> None:
    approval = _pause(1)
    approval["kind"] = "tool_call"  # an interrupt on any other kind is an `interrupt` event
    approval["interrupt"] = {**approval["interrupt"], "name": "approve", "kind": "interrupt",
                             "payload": {"action": "pay", "response_schema": {"type": "boolean"}}}
    events = translate(envelopes([_event(0, "text_delta", text="a"), approval]))
    [interrupt] = events[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "approve"
    assert interrupt["responseSchema"] == {"type": "boolean"}
    assert interrupt["metadata"]["payload"]["action"] == "pay"


@pytest.mark.parametrize(("ending", "code"), [
    (_event(1, "error", error={"type": "RateLimit", "message": "slow down"}), "RateLimit"),
])
def test_an_error_end_is_run_error(ending: dict[str, Any], code: str) -> None:
    events = translate(envelopes([_event(0, "text_delta", text="a"), ending]))
    assert events[-2]["type"] == "TEXT_MESSAGE_END"
    assert events[-1] == {"type": "RUN_ERROR", "message": "slow down", "code": code,
                          "timestamp": 101_000}


def test_gaps_and_abandoned_runs() -> None:
    gap = {"run_id": RUN, "seq": 1, "source_index": None, "ts": 3.0,
           "gap": {"from_index": 1, "to_index": 2}}
    abandoned = {"run_id": RUN, "seq": 2, "source_index": None, "ts": 3.0,
                 "end": {"status": "abandoned", "error": None}}
    first = envelopes([_event(0, "text_delta", text="a")])
    events = translate([*first, gap, abandoned])
    assert events[-3] == {"type": "CUSTOM", "name": "gap",
                          "value": {"from_index": 1, "to_index": 2}, "timestamp": 3000}
    assert events[-2]["type"] == "TEXT_MESSAGE_END"
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "abandoned"


def test_resuming_gives_the_same_events_a_viewer_from_the_start_got() -> None:
    run = envelopes(FULL_RUN)
    whole = AgUiRun(RUN)
    per_seq = [whole.translate(envelope) for envelope in run]
    for after in range(len(run)):
        replay = AgUiRun(RUN)
        resumed = [replay.translate(envelope) for envelope in run][after + 1:]
        assert resumed == per_seq[after + 1:]


def test_only_the_last_message_of_an_envelope_carries_its_seq() -> None:
    raw = sse([{"type": "TEXT_MESSAGE_END", "messageId": "m"},
               {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "n"}], 7)
    blocks = raw.decode().strip().split("\n\n")
    assert not blocks[0].startswith("id:")
    assert blocks[1].startswith("id: 7\ndata: ")
    assert sse([], 3) == b""
