"""One test per row of contract §4: exact StreamChunk output."""

from __future__ import annotations

from typing import Any

import pytest

from symfonic_stream.models.stream_event import StreamChunk
from symfonic_stream.projections.chunks import project_chunks
from tests.unit.helpers import event, interrupt, tool_call


def chunks(kind: str, **fields: Any) -> list[dict[str, Any]]:
    bodies = project_chunks(event(kind, **fields))
    for body in bodies:
        assert StreamChunk.model_validate(body).model_dump() == body
    return bodies


def test_text_delta() -> None:
    assert chunks("text_delta", text="Hi") == [{"type": "text", "content": "Hi", "name": None}]


def test_thinking() -> None:
    assert chunks("thinking", text="hm") == [{"type": "thinking", "content": "hm", "name": None}]


@pytest.mark.parametrize("kind", ["text_delta", "thinking"])
@pytest.mark.parametrize("text", ["", None])
def test_empty_text_emits_nothing(kind: str, text: str | None) -> None:
    assert chunks(kind, text=text) == []


def test_tool_call_with_arguments() -> None:
    call = tool_call(arguments={"q": "kafka", "limit": 3})
    assert chunks("tool_call", tool_call=call) == [
        {"type": "tool_call", "content": '{"q":"kafka","limit":3}', "name": "search"}
    ]


@pytest.mark.parametrize("arguments", [None, {}])
def test_tool_call_without_arguments(arguments: dict[str, Any] | None) -> None:
    assert chunks("tool_call", tool_call=tool_call(arguments=arguments)) == [
        {"type": "tool_call", "content": "", "name": "search"}
    ]


def test_tool_result_string_result_is_kept_as_is() -> None:
    assert chunks("tool_result", tool_call=tool_call(result="3 hits")) == [
        {"type": "tool_result", "content": "3 hits", "name": "search"}
    ]


@pytest.mark.parametrize(
    ("result", "content"),
    [({"b": 1, "a": [True, None]}, '{"b":1,"a":[true,null]}'), (0, "0"), (False, "false")],
)
def test_tool_result_non_string_result_is_compact_json(result: Any, content: str) -> None:
    assert chunks("tool_result", tool_call=tool_call(result=result, error="x")) == [
        {"type": "tool_result", "content": content, "name": "search"}
    ]


def test_tool_result_falls_back_to_error_then_empty() -> None:
    assert chunks("tool_result", tool_call=tool_call(error="boom")) == [
        {"type": "tool_result", "content": "boom", "name": "search"}
    ]
    assert chunks("tool_result", tool_call=tool_call()) == [
        {"type": "tool_result", "content": "", "name": "search"}
    ]


def test_done_is_final_with_result_text() -> None:
    result = {"text": "Answer.", "duration_ms": 5, "usage": {"input_tokens": 3}}
    assert chunks("done", result=result) == [{"type": "final", "content": "Answer.", "name": None}]


def test_done_without_result_is_empty_final() -> None:
    assert chunks("done") == [{"type": "final", "content": "", "name": None}]


@pytest.mark.parametrize("kind", ["ask_user", "interrupt", "text_delta", "done"])
def test_interrupt_present_is_an_interrupt_chunk(kind: str) -> None:
    pending = interrupt("interrupt", payload={"action": "pay", "amount": 3})
    assert chunks(kind, text="t", interrupt=pending) == [
        {"type": "interrupt", "content": '{"action":"pay","amount":3}', "name": "approval"}
    ]


@pytest.mark.parametrize("kind", ["error", "cancelled", "mystery", "ask_user"])
def test_anything_else_emits_nothing(kind: str) -> None:
    assert chunks(kind) == []


@pytest.mark.parametrize("kind", ["tool_call", "tool_result"])
def test_tool_kinds_without_tool_call_emit_nothing(kind: str) -> None:
    assert chunks(kind) == []
