"""A run's typed envelopes as AG-UI events (``?format=ag-ui``): pure, no I/O.

The mapping table is in docs/gateway.md ("AG-UI"). The translation is deterministic from
the run's first envelope: message ids are made of the run id and the seq that opened the
message, so a viewer resuming at seq n gets the same events a viewer from the start got
after n (the gateway replays 0..n through a fresh :class:`AgUiRun` and sends nothing of
them). Events are dicts in AG-UI's wire form (camelCase); the tests validate each against
the ``ag-ui-protocol`` package's models.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import orjson

from symfonic_stream.models.event_types import ABANDONED, GAP

Event = dict[str, Any]
#: AG-UI timestamps are JSON-safe integers (milliseconds).
_MAX_SAFE_INTEGER = 2**53 - 1


def iso_time(seconds: Any) -> str | None:
    if type(seconds) not in (int, float):
        return None
    try:
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def as_object(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


def as_text(value: Any) -> str:
    return value if type(value) is str else orjson.dumps(value).decode()


class AgUiRun:
    """One viewer's translation of one run: what is open (a text message, reasoning, a tool
    call), and the pause or usage the run's end reports."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._started = False
        self._text: str | None = None  # the open text message's id
        self._reasoning: str | None = None
        self._tool: str | None = None  # the tool call whose args may still come
        self._interrupts: list[Event] = []
        self._usage: Event | None = None
        self._result: Event | None = None

    def translate(self, envelope: dict[str, Any]) -> list[Event]:
        """The AG-UI events of one envelope, in order (maybe none)."""
        seq, ts = envelope.get("seq"), envelope.get("ts")
        stamp = ({"timestamp": int(ts * 1000)}
                 if isinstance(ts, int | float) and 0 <= ts * 1000 <= _MAX_SAFE_INTEGER else {})
        out: list[Event] = []
        if not self._started:
            self._started = True
            out.append({"type": "RUN_STARTED", "threadId": self.run_id, "runId": self.run_id})
        if type(envelope.get("event")) is dict:
            out += self._event(envelope["event"], seq)
        elif type(envelope.get("end")) is dict:
            out += self._close_all() + self._end(envelope["end"])
        elif type(envelope.get("gap")) is dict:
            out.append({"type": GAP.type, "name": GAP.name, "value": envelope["gap"]})
        return [{**event, **stamp} for event in out]

    def _event(self, event: dict[str, Any], seq: Any) -> list[Event]:
        kind = event.get("type")
        handler = _HANDLERS.get(kind) if type(kind) is str else None
        return (handler or AgUiRun._on_custom)(self, event, seq)

    # One handler per typed event type (the types: models/event_types.py, which says what
    # each becomes; tests/unit/test_event_types.py holds every handler to it).

    def _on_text_delta(self, event: dict[str, Any], seq: Any) -> list[Event]:
        out = self._close_tool() + self._close_reasoning()
        if self._text is None:
            self._text = f"{self.run_id}:{seq}"
            out.append({"type": "TEXT_MESSAGE_START", "messageId": self._text,
                        "role": "assistant"})
        return [*out, {"type": "TEXT_MESSAGE_CONTENT", "messageId": self._text,
                       "delta": as_text(event.get("text"))}]

    def _on_thinking_delta(self, event: dict[str, Any], seq: Any) -> list[Event]:
        out = self._close_tool() + self._close_text()
        if self._reasoning is None:
            self._reasoning = f"{self.run_id}:{seq}"
            out += [{"type": "REASONING_START", "messageId": self._reasoning},
                    {"type": "REASONING_MESSAGE_START", "messageId": self._reasoning,
                     "role": "reasoning"}]
        return [*out, {"type": "REASONING_MESSAGE_CONTENT", "messageId": self._reasoning,
                       "delta": as_text(event.get("text"))}]

    def _on_tool_call_start(self, event: dict[str, Any], seq: Any) -> list[Event]:
        out = self._close_all()
        self._tool = as_text(event.get("tool_call_id"))
        return [*out, {"type": "TOOL_CALL_START", "toolCallId": self._tool,
                       "toolCallName": as_text(event.get("tool_name"))}]

    def _on_tool_call_delta(self, event: dict[str, Any], seq: Any) -> list[Event]:
        if event.get("tool_call_id") != self._tool:  # not the open call's: as it is
            return self._on_custom(event, seq)
        return [{"type": "TOOL_CALL_ARGS", "toolCallId": self._tool,
                 "delta": as_text(event.get("args_delta"))}]

    def _on_tool_result(self, event: dict[str, Any], seq: Any) -> list[Event]:
        call = as_text(event.get("tool_call_id"))
        return [*self._close_all(), {"type": "TOOL_CALL_RESULT", "messageId": f"{call}:result",
                                     "toolCallId": call, "content": as_text(event.get("result")),
                                     "role": "tool"}]

    def _on_usage(self, event: dict[str, Any], seq: Any) -> list[Event]:
        self._usage = {"inputTokens": event.get("input_tokens"),
                       "outputTokens": event.get("output_tokens")}
        return [*self._close_all(), {"type": "CUSTOM", "name": "usage",
                                     "value": {k: v for k, v in event.items() if k != "type"}}]

    def _on_response_complete(self, event: dict[str, Any], seq: Any) -> list[Event]:
        self._result = {"text": event.get("text"), "duration_ms": event.get("duration_ms")}
        return self._close_all()

    def _on_pause(self, event: dict[str, Any], seq: Any) -> list[Event]:
        self._interrupts.append(_interrupt(event))
        return self._close_all()

    def _on_extension(self, event: dict[str, Any], seq: Any) -> list[Event]:
        return [*self._close_all(), {"type": "CUSTOM", "name": as_text(event.get("name")),
                                     "value": event.get("payload")}]

    def _on_custom(self, event: dict[str, Any], seq: Any) -> list[Event]:
        """A type this version does not know: as it is."""
        return [*self._close_all(), {"type": "CUSTOM", "name": as_text(event.get("type")),
                                     "value": event}]

    def _end(self, end: dict[str, Any]) -> list[Event]:
        status = end.get("status")
        finished: Event = {"type": "RUN_FINISHED", "threadId": self.run_id, "runId": self.run_id}
        self._started = False  # a paused run that goes on starts a new AG-UI run
        if status == "paused" and self._interrupts:
            interrupts, self._interrupts = self._interrupts, []
            return [{**finished, "outcome": {"type": "interrupt", "interrupts": interrupts}}]
        if status == "completed":
            usage = [self._usage] if self._usage is not None else None
            result, self._result, self._usage = self._result, None, None
            return [{**finished, "outcome": {"type": "success"},
                     **({"result": result} if result is not None else {}),
                     **({"usage": usage} if usage else {})}]
        if status == "cancelled":
            return [{**finished, "outcome": {"type": "cancelled"}}]
        error = as_object(end.get("error"))
        if status == "error":
            return [{"type": "RUN_ERROR", "message": as_text(error.get("message", "error")),
                     "code": as_text(error.get("type", "error"))}]
        if status == "abandoned":
            return [{"type": ABANDONED.type, "code": ABANDONED.name, "message": ABANDONED.means}]
        return [finished]  # paused without an interrupt: nothing to answer, a plain finish

    def _close_text(self) -> list[Event]:
        if self._text is None:
            return []
        message, self._text = self._text, None
        return [{"type": "TEXT_MESSAGE_END", "messageId": message}]

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning is None:
            return []
        message, self._reasoning = self._reasoning, None
        return [{"type": "REASONING_MESSAGE_END", "messageId": message},
                {"type": "REASONING_END", "messageId": message}]

    def _close_tool(self) -> list[Event]:
        if self._tool is None:
            return []
        call, self._tool = self._tool, None
        return [{"type": "TOOL_CALL_END", "toolCallId": call}]

    def _close_all(self) -> list[Event]:
        return self._close_text() + self._close_reasoning() + self._close_tool()


_HANDLERS: dict[str, Callable[[AgUiRun, dict[str, Any], Any], list[Event]]] = {
    "text_delta": AgUiRun._on_text_delta,
    "thinking_delta": AgUiRun._on_thinking_delta,
    "tool_call_start": AgUiRun._on_tool_call_start,
    "tool_call_delta": AgUiRun._on_tool_call_delta,
    "tool_result": AgUiRun._on_tool_result,
    "usage": AgUiRun._on_usage,
    "response_complete": AgUiRun._on_response_complete,
    "ask_user": AgUiRun._on_pause,
    "interrupt": AgUiRun._on_pause,
    "extension": AgUiRun._on_extension,
}


def _interrupt(event: dict[str, Any]) -> Event:
    """An ask_user or interrupt StreamEvent as an AG-UI interrupt of RUN_FINISHED."""
    payload = as_object(event.get("payload"))
    questions = event.get("questions") if type(event.get("questions")) is list else None
    interrupt: Event = {
        "id": as_text(event.get("interrupt_id")),
        "reason": as_text(event.get("name") or event.get("type")),
        # (never the token: the gateway answers with it on a reviewer's behalf)
        "metadata": {k: event.get(k) for k in ("resumable", "session_id") if k in event},
    }
    if questions:
        interrupt["message"] = "\n".join(as_text(q) for q in questions)
        interrupt["metadata"]["questions"] = questions
    elif payload:
        interrupt["metadata"]["payload"] = payload
    if type(event.get("tool_call_id")) is str:
        interrupt["toolCallId"] = event["tool_call_id"]
    if type(payload.get("response_schema")) is dict:
        interrupt["responseSchema"] = payload["response_schema"]
    expires = iso_time(event.get("expires_at"))
    if expires is not None:
        interrupt["expiresAt"] = expires
    return interrupt


def sse(events: list[Event], seq: int) -> bytes:
    """The events of one envelope as SSE messages; only the last carries ``id: seq``, so a
    browser's Last-Event-ID never claims an envelope whose events it did not all get."""
    if not events:
        return b""
    parts = [b"data: %s\n\n" % orjson.dumps(e) for e in events[:-1]]
    parts.append(b"id: %d\ndata: %s\n\n" % (seq, orjson.dumps(events[-1])))
    return b"".join(parts)
