"""Every typed event type once, with what each output format does with it.

A new StreamEvent type is its model (:mod:`.stream_event`, in the ``StreamEvent`` union),
its projection rule (``projections/typed.py``) and its entry here. Each output format has a
handler per type: the AG-UI translation (``gateway/agui.py``), the gateway's page
(``gateway/static/index.html``) and the terminal renderer (``tools/render.py``).
``tests/unit/test_event_types.py`` drives each format with each type and fails when one has
no handler or does something else than its entry says. The AG-UI mapping is explained in
docs/gateway.md ("AG-UI").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel

from symfonic_stream.models.stream_event import (
    AskUserEvent,
    ExtensionEvent,
    InterruptEvent,
    ResponseCompleteEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallDeltaEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    UsageEvent,
)


class Format(StrEnum):
    """The output formats of the typed stream."""

    AG_UI = "ag-ui"
    PAGE = "page"
    TERMINAL = "terminal"


#: The gateway page's panes (``gateway/static/index.html``).
Pane = Literal["text", "thinking", "tools", "notes"]


@dataclass(frozen=True, slots=True)
class EventType:
    """One typed event type and what each format makes of it."""

    model: type[BaseModel]
    #: The AG-UI events it becomes at once (after closing what it interrupts; a
    #: ``tool_call_delta`` after its ``tool_call_start``); ``()``: none of its own.
    ag_ui: tuple[str, ...]
    #: What of the ``RUN_FINISHED`` that ends the run (or its pause) it fills: ``result``,
    #: ``usage``, ``outcome`` (the interrupts); ``""``: nothing.
    ag_ui_finish: Literal["", "result", "usage", "outcome"]
    #: The page's pane it shows in.
    page: Pane
    #: ``inline``: it continues the line of the events of its kind before it (text,
    #: thinking); ``line``: lines of its own.
    terminal: Literal["inline", "line"]

    @property
    def name(self) -> str:
        """Its ``type`` on the wire."""
        default = self.model.model_fields["type"].default
        assert isinstance(default, str)
        return default


EVENT_TYPES: tuple[EventType, ...] = (
    EventType(ThinkingDeltaEvent, ("REASONING_START", "REASONING_MESSAGE_START",
                                   "REASONING_MESSAGE_CONTENT"), "", "thinking", "inline"),
    EventType(TextDeltaEvent, ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"), "", "text",
              "inline"),
    EventType(ToolCallStartEvent, ("TOOL_CALL_START",), "", "tools", "line"),
    EventType(ToolCallDeltaEvent, ("TOOL_CALL_ARGS",), "", "tools", "line"),
    EventType(ToolResultEvent, ("TOOL_CALL_RESULT",), "", "tools", "line"),
    EventType(ExtensionEvent, ("CUSTOM",), "", "notes", "line"),
    EventType(UsageEvent, ("CUSTOM",), "usage", "notes", "line"),
    EventType(ResponseCompleteEvent, (), "result", "notes", "line"),
    EventType(AskUserEvent, (), "outcome", "notes", "line"),
    EventType(InterruptEvent, (), "outcome", "notes", "line"),
)

#: Every StreamEvent ``type``, for metrics and docs.
STREAM_EVENT_TYPES: tuple[str, ...] = tuple(entry.name for entry in EVENT_TYPES)
