"""A run as readable terminal text (rich), rendered record by record as it streams.

Text deltas flow inline, thinking is dimmed, tool calls show their arguments and results,
pauses show their questions, gaps and the end status stand on lines of their own. The
renderer keeps only what it needs to stream (whether a line is open, tool names by call id),
so ``tail`` can print each record the moment it is read.

Colour comes from rich's styles; a ``Console(no_color=True)`` (or ``NO_COLOR`` in the
environment) gives plain text, which is what the golden tests compare.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from symfonic_stream.models.envelope import (
    ChunkEventRecord,
    EndRecord,
    GapRecord,
    TypedEventRecord,
)
from symfonic_stream.models.stream_event import (
    AskUserEvent,
    ExtensionEvent,
    InterruptEvent,
    ResponseCompleteEvent,
    StreamChunk,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallDeltaEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    UsageEvent,
)
from symfonic_stream.sdk.reader import RunRecord

__all__ = ["RunRenderer", "format_ts", "question_text", "render_records"]

#: Long tool results and payloads are cut: a terminal is for reading, --json for data.
MAX_VALUE_CHARS = 400

_STYLE_THINKING = "dim italic"
_STYLE_TOOL = "cyan"
_STYLE_RESULT = "green"
_STYLE_ERROR = "bold red"
_STYLE_PAUSE = "bold yellow"
_STYLE_GAP = "bold magenta"
_STYLE_META = "dim"


def format_ts(ts: float) -> str:
    """A kernel timestamp as UTC ISO-8601 with milliseconds."""
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _compact(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


class RunRenderer:
    """Renders one run's records to ``console`` as they arrive."""

    def __init__(self, console: Console, *, show_header: bool = True) -> None:
        self.console = console
        self._show_header = show_header
        self._header_done = False
        # "text" or "thinking" while an inline stream is open (its line not ended yet).
        self._inline: str | None = None
        self._tool_names: dict[str, str] = {}

    # -- output helpers ----------------------------------------------------------------

    def _inline_text(self, mode: str, text: str, style: str = "") -> None:
        if self._inline != mode:
            self._break()
            if mode == "thinking":
                self._write(Text("thinking: ", style=_STYLE_META), end="")
            self._inline = mode
        self._write(Text(text, style=style), end="")

    def _line(self, *parts: tuple[str, str] | str) -> None:
        self._break()
        self._write(Text.assemble(*parts))

    def _break(self) -> None:
        if self._inline is not None:
            self._write(Text(""))
            self._inline = None

    def _write(self, text: Text, end: str = "\n") -> None:
        # soft_wrap: a delta is part of a longer line; rich must not wrap each piece alone.
        self.console.print(text, end=end, soft_wrap=True, highlight=False)

    # -- records -----------------------------------------------------------------------

    def render(self, record: RunRecord) -> None:
        """Render one record (typed or chunk)."""
        if self._show_header and not self._header_done:
            self._header_done = True
            self._line(
                ("run ", "bold"),
                (record.run_id, "bold"),
                (f"  (from seq {record.seq}, {format_ts(record.ts)})", _STYLE_META),
            )
        if isinstance(record, TypedEventRecord):
            self._typed(record.event)
        elif isinstance(record, ChunkEventRecord):
            self._chunk(record.event)
        elif isinstance(record, GapRecord):
            gap = record.gap
            span = (
                f"index {gap.from_index}"
                if gap.from_index == gap.to_index
                else f"indexes {gap.from_index}..{gap.to_index}"
            )
            self._line(("⚠ gap: ", _STYLE_GAP), (f"kernel {span} never arrived", _STYLE_GAP))
        elif isinstance(record, EndRecord):
            self._end(record)

    def finish(self) -> None:
        """End an open inline line (call once after the last record)."""
        self._break()

    def _typed(self, event: Any) -> None:
        handler = _TYPED.get(type(event))
        if handler is not None:
            handler(self, event)

    # One handler per typed event type (the types: models/event_types.py, which says which
    # continue a line and which stand on their own; tests/unit/test_event_types.py checks).

    def _text_delta(self, event: TextDeltaEvent) -> None:
        self._inline_text("text", event.text)

    def _thinking_delta(self, event: ThinkingDeltaEvent) -> None:
        self._inline_text("thinking", event.text, _STYLE_THINKING)

    def _tool_call_start(self, event: ToolCallStartEvent) -> None:
        self._tool_names[event.tool_call_id] = event.tool_name
        self._line(
            ("→ tool ", _STYLE_TOOL),
            (event.tool_name, f"bold {_STYLE_TOOL}"),
            (f" [{event.tool_call_id}]", _STYLE_META),
        )

    def _tool_call_delta(self, event: ToolCallDeltaEvent) -> None:
        self._line(("  arguments ", _STYLE_META), _compact(event.args_delta))

    def _tool_result(self, event: ToolResultEvent) -> None:
        name = self._tool_names.get(event.tool_call_id, "?")
        self._line(
            ("← ", _STYLE_RESULT),
            (name, f"bold {_STYLE_RESULT}"),
            (f" [{event.tool_call_id}] ", _STYLE_META),
            _compact(event.result),
        )

    def _usage(self, event: UsageEvent) -> None:
        self._line(
            (f"usage: {event.input_tokens} input, {event.output_tokens} output tokens",
             _STYLE_META)
        )

    def _response_complete(self, event: ResponseCompleteEvent) -> None:
        took = f" in {event.duration_ms} ms"
        self._line(("✓ response complete", "bold"), (took, _STYLE_META))
        if event.text:
            self._line(("  final: ", _STYLE_META), _compact(event.text))

    def _ask_user(self, event: AskUserEvent) -> None:
        self._line(
            ("⏸ ask_user", _STYLE_PAUSE),
            (f" [{event.interrupt_id}] expires {format_ts(event.expires_at)}", _STYLE_META),
        )
        for question in event.questions or ["(no questions)"]:
            self._line(("  ? ", _STYLE_PAUSE), question_text(question))

    def _interrupt(self, event: InterruptEvent) -> None:
        self._line(
            ("⏸ interrupt ", _STYLE_PAUSE),
            (event.name, _STYLE_PAUSE),
            (f" [{event.interrupt_id}] expires {format_ts(event.expires_at)}", _STYLE_META),
        )
        self._line(("  payload ", _STYLE_META), _compact(event.payload))

    def _extension(self, event: ExtensionEvent) -> None:
        if event.name == "tool_timing":
            payload = event.payload
            outcome = "error" if payload.get("is_error") else "ok"
            style = _STYLE_ERROR if outcome == "error" else _STYLE_META
            duration = payload.get("duration_ms")
            took = f"{duration} ms" if duration is not None else "time unknown"
            self._line((f"  {outcome}, {took}", style))
        else:
            self._line((f"extension {event.name}: ", _STYLE_META), _compact(event.payload))

    def _chunk(self, chunk: StreamChunk) -> None:
        if chunk.type == "text":
            self._inline_text("text", chunk.content)
        elif chunk.type == "thinking":
            self._inline_text("thinking", chunk.content, _STYLE_THINKING)
        elif chunk.type == "tool_call":
            self._line(("→ tool ", _STYLE_TOOL), (chunk.name or "?", f"bold {_STYLE_TOOL}"))
            if chunk.content:
                self._line(("  arguments ", _STYLE_META), _compact(chunk.content))
        elif chunk.type == "tool_result":
            self._line(
                ("← ", _STYLE_RESULT),
                (chunk.name or "?", f"bold {_STYLE_RESULT}"),
                " ",
                _compact(chunk.content),
            )
        elif chunk.type == "final":
            self._line(("✓ final: ", "bold"), _compact(chunk.content))
        elif chunk.type == "interrupt":
            self._line(("⏸ interrupt ", _STYLE_PAUSE), (chunk.name or "?", _STYLE_PAUSE))
            self._line(("  payload ", _STYLE_META), _compact(chunk.content))

    def _end(self, record: EndRecord) -> None:
        status = record.end.status
        if status == "completed":
            self._line(("■ run completed", "bold green"))
        elif status == "error":
            error = record.end.error or {}
            detail = ": ".join(str(error[k]) for k in ("type", "message") if k in error)
            self._line(("■ run failed", _STYLE_ERROR), (f": {detail}" if detail else "", "red"))
        elif status == "cancelled":
            self._line(("■ run cancelled", "bold yellow"))
        else:
            self._line(("⏸ run paused", _STYLE_PAUSE), (" (waiting for an answer)", _STYLE_META))


_TYPED: dict[type[Any], Callable[[RunRenderer, Any], None]] = {
    TextDeltaEvent: RunRenderer._text_delta,
    ThinkingDeltaEvent: RunRenderer._thinking_delta,
    ToolCallStartEvent: RunRenderer._tool_call_start,
    ToolCallDeltaEvent: RunRenderer._tool_call_delta,
    ToolResultEvent: RunRenderer._tool_result,
    ExtensionEvent: RunRenderer._extension,
    UsageEvent: RunRenderer._usage,
    ResponseCompleteEvent: RunRenderer._response_complete,
    AskUserEvent: RunRenderer._ask_user,
    InterruptEvent: RunRenderer._interrupt,
}


def question_text(question: Any) -> str:
    """A question as the kernel sent it: text plus options when it has that shape."""
    if isinstance(question, dict) and isinstance(question.get("question"), str):
        text: str = question["question"]
        options = question.get("options")
        if isinstance(options, list) and options:
            text += "  [" + " / ".join(str(option) for option in options) + "]"
        return text
    return _compact(question)


def render_records(records: list[RunRecord], console: Console) -> None:
    """Render a whole run (already read) at once."""
    renderer = RunRenderer(console)
    for record in records:
        renderer.render(record)
    renderer.finish()
