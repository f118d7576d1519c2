"""The typed vocabulary: StreamEvent, a union discriminated on ``type`` (contract §3)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThinkingDeltaEvent(_Event):
    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class TextDeltaEvent(_Event):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallStartEvent(_Event):
    type: Literal["tool_call_start"] = "tool_call_start"
    tool_name: str
    tool_call_id: str
    phase: Literal["executing"] = "executing"


class ToolCallDeltaEvent(_Event):
    type: Literal["tool_call_delta"] = "tool_call_delta"
    tool_call_id: str
    args_delta: str = Field(description="The call's arguments as compact JSON text.")


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    result: Any = Field(description="The result when not null, else the error, else ''.")


class ExtensionEvent(_Event):
    type: Literal["extension"] = "extension"
    name: str
    event_id: str
    payload: dict[str, Any]


class UsageEvent(_Event):
    type: Literal["usage"] = "usage"
    input_tokens: int
    output_tokens: int


class ResponseCompleteEvent(_Event):
    type: Literal["response_complete"] = "response_complete"
    text: str
    duration_ms: float = Field(description="Rounded to 0.1 ms.")


class AskUserEvent(_Event):
    type: Literal["ask_user"] = "ask_user"
    questions: list[Any]
    token: str
    tool_call_id: str | None
    interrupt_id: str
    run_id: str | None
    session_id: str | None
    expires_at: float
    resumable: bool


class InterruptEvent(_Event):
    type: Literal["interrupt"] = "interrupt"
    name: str
    payload: dict[str, Any]
    token: str
    tool_call_id: str | None
    interrupt_id: str
    run_id: str | None
    session_id: str | None
    expires_at: float
    resumable: bool


StreamEvent = Annotated[
    ThinkingDeltaEvent
    | TextDeltaEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolResultEvent
    | ExtensionEvent
    | UsageEvent
    | ResponseCompleteEvent
    | AskUserEvent
    | InterruptEvent,
    Field(discriminator="type"),
]

#: Every StreamEvent type with what each output format does with it, and the list of their
#: names: :mod:`symfonic_stream.models.event_types`.


class StreamChunk(_Event):
    """The simple, lossy vocabulary for text-only consumers (contract §4)."""

    type: Literal["text", "thinking", "tool_call", "tool_result", "final", "interrupt"]
    content: str
    name: str | None


STREAM_CHUNK_TYPES = ("text", "thinking", "tool_call", "tool_result", "final", "interrupt")
