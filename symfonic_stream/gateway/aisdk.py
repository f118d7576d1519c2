"""A run's typed envelopes as the AI SDK's UI message stream (``?format=ai-sdk``): pure.

The AI SDK (npm's ``ai``, ``useChat`` of ``@ai-sdk/react``) reads a response as SSE ``data:``
lines of JSON chunks, ending ``data: [DONE]``. **A run is one UI message** (its id the run
id), its segments between pauses the message's steps: the SDK keeps one assistant message
across a tool approval's round trip (the client continues it with the answer's response),
and a run's pauses are those round trips (docs/gateway.md, "AI SDK").

The translation is deterministic from the run's first envelope, as AG-UI's is (:mod:`.agui`):
part ids are made of the run id and the seq that opened the part, so a response resumed
after seq n sends exactly what a response from the start sent after n. The chunks are dicts
in the SDK's wire form; the tests check each against the SDK's own chunk schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from symfonic_stream.gateway.agui import as_object, as_text, iso_time
from symfonic_stream.gateway.sse import CLOSING_STATUSES
from symfonic_stream.models.event_types import (
    ABANDONED,
    EXTENSION,
    GAP,
    ORPHAN_RESULT,
    PAUSE,
    TOOL_APPROVAL,
)

Chunk = dict[str, Any]

#: The header that names the stream's protocol (the SDK's ``UI_MESSAGE_STREAM_HEADERS``).
HEADER = ("x-vercel-ai-ui-message-stream", "v1")
#: The stream's last line: the response is over (a stream cut without it was cut).
DONE = b"data: [DONE]\n\n"


def start(message_id: str | None) -> Chunk:
    """A response's first chunk. A response that continues the client's message after its
    answer names none, so the client goes on with the message it has, whatever its id."""
    return {"type": "start", **({"messageId": message_id} if message_id is not None else {})}


def error(code: str, message: str) -> Chunk:
    """An ``error`` chunk: the SDK's client throws ``errorText``, so the code leads it."""
    return {"type": "error", "errorText": f"{code}: {message}"}


class AiSdkRun:
    """One viewer's translation of one run: the step, text, reasoning and tool input open,
    the tool calls the run opened, and what the response's ``finish`` says."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._in_step = False
        self._text: str | None = None  # the open text part's id
        self._reasoning: str | None = None
        self._tool: str | None = None  # the tool call whose input may still come
        self._tool_name = ""
        self._args: list[str] = []
        #: Tool calls the run opened: True once their result came.
        self._calls: dict[str, bool] = {}
        #: The step's pause is a tool approval (its finish reason is ``tool-calls``).
        self._approval = False
        self._metadata: Chunk = {}

    def translate(self, envelope: dict[str, Any]) -> list[Chunk]:
        """The chunks of one envelope, in order (maybe none). A paused end's are the step's
        end alone: :meth:`paused_finish` is the response's end, when it ends there."""
        out: list[Chunk] = []
        if not self._in_step:
            self._in_step, self._approval = True, False
            out.append({"type": "start-step"})
        if type(envelope.get("event")) is dict:
            out += self._event(envelope["event"], envelope.get("seq"))
        elif type(envelope.get("end")) is dict:
            out += self._close_all() + self._end(envelope["end"])
        elif type(envelope.get("gap")) is dict:
            out.append({"type": GAP.ai_sdk, "data": envelope["gap"]})
        return out

    def paused_finish(self) -> Chunk:
        """The ``finish`` of a response that ends at the run's pause."""
        reason = "tool-calls" if self._approval else "other"
        return {"type": "finish", "finishReason": reason,
                "messageMetadata": {**self._metadata, "status": "paused"}}

    def _event(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        kind = event.get("type")
        handler = _HANDLERS.get(kind) if type(kind) is str else None
        return (handler or AiSdkRun._on_custom)(self, event, seq)

    # One handler per typed event type (models/event_types.py says what each becomes;
    # tests/unit/test_event_types.py holds every handler to it).

    def _on_text_delta(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        out = self._close_tool() + self._close_reasoning()
        if self._text is None:
            self._text = f"{self.run_id}:{seq}"
            out.append({"type": "text-start", "id": self._text})
        return [*out, {"type": "text-delta", "id": self._text,
                       "delta": as_text(event.get("text"))}]

    def _on_thinking_delta(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        out = self._close_tool() + self._close_text()
        if self._reasoning is None:
            self._reasoning = f"{self.run_id}:{seq}"
            out.append({"type": "reasoning-start", "id": self._reasoning})
        return [*out, {"type": "reasoning-delta", "id": self._reasoning,
                       "delta": as_text(event.get("text"))}]

    def _on_tool_call_start(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        out = self._close_all()
        self._tool, self._tool_name = as_text(event.get("tool_call_id")), as_text(
            event.get("tool_name"))
        self._args = []
        self._calls[self._tool] = False
        return [*out, {"type": "tool-input-start", "toolCallId": self._tool,
                       "toolName": self._tool_name}]

    def _on_tool_call_delta(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        if event.get("tool_call_id") != self._tool:  # not the open call's: as it is
            return self._on_custom(event, seq)
        delta = as_text(event.get("args_delta"))
        self._args.append(delta)
        return [{"type": "tool-input-delta", "toolCallId": self._tool, "inputTextDelta": delta}]

    def _on_tool_result(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        call = as_text(event.get("tool_call_id"))
        out = self._close_all()
        if call not in self._calls:  # no tool part on the client to hold it
            return [*out, {"type": ORPHAN_RESULT.type,
                           "data": {"toolCallId": call, "result": event.get("result")}}]
        self._calls[call] = True
        return [*out, {"type": "tool-output-available", "toolCallId": call,
                       "output": event.get("result")}]

    def _on_usage(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        self._metadata["usage"] = {"inputTokens": event.get("input_tokens"),
                                   "outputTokens": event.get("output_tokens")}
        return [*self._close_all(), {"type": "message-metadata",
                                     "messageMetadata": {"usage": self._metadata["usage"]}}]

    def _on_response_complete(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        if type(event.get("duration_ms")) in (int, float):
            self._metadata["durationMs"] = event["duration_ms"]
        return self._close_all()

    def _on_pause(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        out = self._close_all()
        interrupt, call = as_text(event.get("interrupt_id")), event.get("tool_call_id")
        if type(call) is str and self._calls.get(call) is False:
            self._approval = True
            return [*out, {"type": TOOL_APPROVAL, "approvalId": interrupt, "toolCallId": call}]
        return [*out, {"type": PAUSE.type, "id": interrupt, "data": _pause(event)}]

    def _on_extension(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        return [*self._close_all(), {"type": EXTENSION.type, "id": as_text(event.get("event_id")),
                                     "data": {"name": as_text(event.get("name")),
                                              "payload": event.get("payload")}}]

    def _on_custom(self, event: dict[str, Any], seq: Any) -> list[Chunk]:
        """A type this version does not know (or a delta of no open call): as it is."""
        return [*self._close_all(), {"type": f"data-{as_text(event.get('type'))}",
                                     "data": event}]

    def _end(self, end: dict[str, Any]) -> list[Chunk]:
        status = end.get("status")
        self._in_step = False
        step_end: Chunk = {"type": "finish-step"}
        if status not in CLOSING_STATUSES:  # paused: the response may end here, or go on
            return [step_end]
        self._approval = False
        metadata = {**self._metadata, "status": as_text(status)}
        if status == "completed":
            return [step_end, {"type": "finish", "finishReason": "stop",
                               "messageMetadata": metadata}]
        failed: Chunk | None = None
        if status == "error":
            reason = as_object(end.get("error"))
            failed = error(as_text(reason.get("type", "error")), as_text(reason.get("message",
                                                                                "error")))
        elif status == "abandoned":
            failed = error(ABANDONED.name, ABANDONED.means)
        if failed is not None:
            return [failed, step_end, {"type": "finish", "finishReason": "error",
                                       "messageMetadata": metadata}]
        return [step_end, {"type": "finish", "finishReason": "other",  # cancelled
                           "messageMetadata": metadata}]

    def _close_text(self) -> list[Chunk]:
        if self._text is None:
            return []
        part, self._text = self._text, None
        return [{"type": "text-end", "id": part}]

    def _close_reasoning(self) -> list[Chunk]:
        if self._reasoning is None:
            return []
        part, self._reasoning = self._reasoning, None
        return [{"type": "reasoning-end", "id": part}]

    def _close_tool(self) -> list[Chunk]:
        if self._tool is None:
            return []
        call, self._tool = self._tool, None
        text = "".join(self._args)
        try:
            parsed: Any = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError:
            parsed = text
        return [{"type": "tool-input-available", "toolCallId": call,
                 "toolName": self._tool_name, "input": parsed}]

    def _close_all(self) -> list[Chunk]:
        return self._close_text() + self._close_reasoning() + self._close_tool()


_HANDLERS: dict[str, Callable[[AiSdkRun, dict[str, Any], Any], list[Chunk]]] = {
    "text_delta": AiSdkRun._on_text_delta,
    "thinking_delta": AiSdkRun._on_thinking_delta,
    "tool_call_start": AiSdkRun._on_tool_call_start,
    "tool_call_delta": AiSdkRun._on_tool_call_delta,
    "tool_result": AiSdkRun._on_tool_result,
    "usage": AiSdkRun._on_usage,
    "response_complete": AiSdkRun._on_response_complete,
    "ask_user": AiSdkRun._on_pause,
    "interrupt": AiSdkRun._on_pause,
    "extension": AiSdkRun._on_extension,
}


def _pause(event: dict[str, Any]) -> dict[str, Any]:
    """What a ``data-pause`` part says of an ask_user or interrupt (never its token)."""
    payload = as_object(event.get("payload"))
    pause: dict[str, Any] = {"interruptId": as_text(event.get("interrupt_id")),
                             "kind": as_text(event.get("type")),
                             "name": as_text(event.get("name") or event.get("type")),
                             "toolCallId": event.get("tool_call_id"),
                             "expiresAt": iso_time(event.get("expires_at")),
                             "resumable": event.get("resumable"),
                             "sessionId": event.get("session_id")}
    if type(event.get("questions")) is list:
        pause["questions"] = event["questions"]
    elif payload:
        pause["payload"] = payload
    if type(payload.get("response_schema")) is dict:
        pause["responseSchema"] = payload["response_schema"]
    return pause


def sse(chunks: list[Chunk], seq: int | None) -> bytes:
    """The chunks of one envelope as SSE messages; only the last carries ``id: seq``, so a
    Last-Event-ID never claims an envelope whose chunks were not all received (None: a
    chunk of no envelope, as a response's ``start``)."""
    if not chunks:
        return b""
    parts = [b"data: %s\n\n" % orjson.dumps(c) for c in chunks[:-1]]
    last = orjson.dumps(chunks[-1])
    parts.append(b"data: %s\n\n" % last if seq is None else b"id: %d\ndata: %s\n\n" % (seq, last))
    return b"".join(parts)
