"""Every typed event type once, with what each output format does with it.

A new StreamEvent type is its model (:mod:`.stream_event`, in the ``StreamEvent`` union),
its projection rule (``projections/typed.py``) and its entry here. Each output format has a
handler per type: the AG-UI translation (``gateway/agui.py``), the gateway's page
(``gateway/static/index.html``) and the terminal renderer (``tools/render.py``).
``tests/unit/test_event_types.py`` drives each format with each type and fails when one has
no handler or does something else than its entry says. The AG-UI mapping is explained in
docs/gateway.md ("AG-UI").

The AG-UI events the gateway makes of something else than a typed event (a gap, a record
too large to send, an AG-UI resume's verdicts and refusals) are here too, once each
(:data:`GATEWAY_EVENTS`): the gateway's code takes their names from these entries, and the
tests hold docs/gateway.md to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel

from symfonic_stream.models.pauses import RejectionReason
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


@dataclass(frozen=True, slots=True)
class GatewayEvent:
    """An AG-UI event of the gateway's own: a ``CUSTOM`` event's ``name``, or a
    ``RUN_ERROR``'s ``code`` (a kernel's error keeps its own type as its code)."""

    type: Literal["CUSTOM", "RUN_ERROR"]
    name: str
    #: What it tells the client (docs/gateway.md says it too).
    means: str


GAP = GatewayEvent("CUSTOM", "gap", "records of the run never came (`from_index`, `to_index`)")
TRUNCATED = GatewayEvent("CUSTOM", "truncated", "records the gateway cannot serve, said rather "
                         "than skipped (`from_seq`, `to_seq`, `reason`)")
VERDICT = GatewayEvent("CUSTOM", "verdict", "an AG-UI resume's verdict on one interrupt "
                       "(`interruptId`, `outcome`, `replayed`), before the continuation")
ABANDONED = GatewayEvent("RUN_ERROR", "abandoned", "the run had no event within the idle "
                         "timeout")
WRONG_THREAD = GatewayEvent("RUN_ERROR", "wrong_thread", "a resume's `threadId` is not the run "
                            "id; nothing was written")
DUPLICATE_INTERRUPT = GatewayEvent("RUN_ERROR", "duplicate_interrupt", "a resume answers an "
                                   "interrupt twice; nothing was written")
UNKNOWN_INTERRUPT = GatewayEvent("RUN_ERROR", "unknown_interrupt", "a resume names an "
                                 "interrupt the run has not opened (or no ticket of it is "
                                 "known); nothing was written")
RESUME_INCOMPLETE = GatewayEvent("RUN_ERROR", "resume_incomplete", "a resume leaves an open "
                                 "interrupt of the pause unanswered; nothing was written")
CANCEL_UNSUPPORTED = GatewayEvent("RUN_ERROR", "cancel_unsupported", "a resume entry is not "
                                  "`resolved`: decline inside the payload; nothing was written")
NO_VERDICT = GatewayEvent("RUN_ERROR", "no_verdict", "the validator's verdict did not come "
                          "within `SYMFONIC_GATEWAY_VERDICT_WAIT_S`")
NOT_PERMITTED = GatewayEvent("RUN_ERROR", "not_permitted", "the token is neither the run's "
                             "principal (`sub`) nor a reviewer of the ticket's queue "
                             "(`queues`); nothing was written")

#: Every AG-UI event the gateway makes of something else than a typed event: the
#: resume path's refusals are the contract's codes above, then the validator's reasons.
GATEWAY_EVENTS: tuple[GatewayEvent, ...] = (
    GAP, TRUNCATED, VERDICT, ABANDONED, WRONG_THREAD, DUPLICATE_INTERRUPT, UNKNOWN_INTERRUPT,
    RESUME_INCOMPLETE, CANCEL_UNSUPPORTED, NO_VERDICT, NOT_PERMITTED,
    *(GatewayEvent("RUN_ERROR", reason.value, "the validator refused the answer (contract §7; "
                   "docs/pauses.md)") for reason in RejectionReason),
)
#: The ``code`` of every RUN_ERROR a resume can end with.
RESUME_ERROR_CODES: frozenset[str] = frozenset(
    e.name for e in GATEWAY_EVENTS if e.type == "RUN_ERROR" and e is not ABANDONED)
