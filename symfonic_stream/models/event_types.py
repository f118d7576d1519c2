"""Every typed event type once, with what each output format does with it.

A new StreamEvent type is its model (:mod:`.stream_event`, in the ``StreamEvent`` union),
its projection rule (``projections/typed.py``) and its entry here. Each output format has a
handler per type: the AG-UI translation (``gateway/agui.py``), the AI SDK's UI message
stream (``gateway/aisdk.py``), the gateway's page (``gateway/static/index.html``) and the
terminal renderer (``tools/render.py``). ``tests/unit/test_event_types.py`` drives each
format with each type and fails when one has no handler or does something else than its
entry says. docs/gateway.md's table of what each envelope becomes in each wire format (the
envelope's SSE ``event:``, AG-UI, AI SDK) is generated from these entries
(:func:`mapping_table`; the same test fails when the page's copy differs).

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

    ENVELOPE = "envelope"
    AG_UI = "ag-ui"
    AI_SDK = "ai-sdk"
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
    #: The AI SDK UI message chunks it becomes at once (after closing the parts it
    #: interrupts; a ``tool_call_delta`` after its ``tool_call_start``).
    ai_sdk: tuple[str, ...]
    #: What of the ``finish`` that ends the response (at the run's end or pause) it fills:
    #: ``metadata`` (the message metadata), ``reason`` (the finish reason); ``""``: nothing.
    ai_sdk_finish: Literal["", "metadata", "reason"]
    #: docs/gateway.md's cells: what it becomes in AG-UI and in the AI SDK's stream.
    ag_ui_doc: str
    ai_sdk_doc: str

    @property
    def name(self) -> str:
        """Its ``type`` on the wire."""
        default = self.model.model_fields["type"].default
        assert isinstance(default, str)
        return default


#: A pause's ticket answered as the AI SDK's tool approval: when the pause names a tool call
#: of the run whose result has not come (else a ``data-pause`` part: :data:`PAUSE`).
TOOL_APPROVAL = "tool-approval-request"
_PAUSE_AG_UI = ("nothing of its own: an interrupt of the `RUN_FINISHED` of the pause (`id`: the "
                "interrupt id, `reason`: its name, `message`: the questions, `toolCallId`, "
                "`responseSchema`: `payload.response_schema`, `expiresAt` ISO 8601, "
                "`metadata`: resumable, session, questions or payload; never the token)")
_PAUSE_AI_SDK = ("`tool-approval-request` (`approvalId`: the interrupt id) when its "
                 "`tool_call_id` names a tool call of the run still without a result, else "
                 "`data-pause` (`id`: the interrupt id; `data`: `interruptId`, `kind`, `name`, "
                 "`questions` or `payload`, `responseSchema`, `toolCallId`, `expiresAt`, "
                 "`resumable`, `sessionId`; never the token); the response's `finish` says "
                 "`tool-calls` (a tool approval) or `other`")

EVENT_TYPES: tuple[EventType, ...] = (
    EventType(ThinkingDeltaEvent, ("REASONING_START", "REASONING_MESSAGE_START",
                                   "REASONING_MESSAGE_CONTENT"), "", "thinking", "inline",
              ("reasoning-start", "reasoning-delta"), "",
              "`REASONING_START` + `REASONING_MESSAGE_START` when none is open, "
              "`REASONING_MESSAGE_CONTENT`",
              "`reasoning-start` when none is open, `reasoning-delta`"),
    EventType(TextDeltaEvent, ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"), "", "text",
              "inline", ("text-start", "text-delta"), "",
              "`TEXT_MESSAGE_START` (role `assistant`) when no message is open, "
              "`TEXT_MESSAGE_CONTENT`",
              "`text-start` when no text part is open, `text-delta`"),
    EventType(ToolCallStartEvent, ("TOOL_CALL_START",), "", "tools", "line",
              ("tool-input-start",), "", "`TOOL_CALL_START` (`toolCallName`)",
              "`tool-input-start` (`toolName`: a static tool part `tool-<name>`)"),
    EventType(ToolCallDeltaEvent, ("TOOL_CALL_ARGS",), "", "tools", "line",
              ("tool-input-delta",), "", "`TOOL_CALL_ARGS` (the compact JSON arguments)",
              "`tool-input-delta` (`inputTextDelta`); when the call's input ends (at any "
              "other event), `tool-input-available` with the arguments parsed (the text "
              "when they are no JSON)"),
    EventType(ToolResultEvent, ("TOOL_CALL_RESULT",), "", "tools", "line",
              ("tool-output-available",), "",
              "`TOOL_CALL_RESULT` (`content`: the result as text, compact JSON if it is not "
              "a string; `messageId` `<tool_call_id>:result`)",
              "`tool-output-available` (`output`: the result as it is); a result of a call "
              "the run never opened is `data-tool-result` (`toolCallId`, `result`)"),
    EventType(ExtensionEvent, ("CUSTOM",), "", "notes", "line", ("data-extension",), "",
              "`CUSTOM` with its `name` and `payload` as `value`",
              "`data-extension` (`id`: its `event_id`; `data`: `name`, `payload`)"),
    EventType(UsageEvent, ("CUSTOM",), "usage", "notes", "line", ("message-metadata",),
              "metadata", "`CUSTOM` `usage`; also `usage` of the `RUN_FINISHED` that follows",
              "`message-metadata` `{\"usage\": {\"inputTokens\", \"outputTokens\"}}`; "
              "also the `messageMetadata` of the `finish` that follows"),
    EventType(ResponseCompleteEvent, (), "result", "notes", "line", (), "metadata",
              "nothing of its own: its text and duration are `RUN_FINISHED`'s `result`",
              "nothing of its own: its duration is `durationMs` of the `finish`'s "
              "`messageMetadata` (its text is the text parts')"),
    EventType(AskUserEvent, (), "outcome", "notes", "line", ("data-pause",), "reason",
              _PAUSE_AG_UI, _PAUSE_AI_SDK),
    EventType(InterruptEvent, (), "outcome", "notes", "line", ("data-pause",), "reason",
              _PAUSE_AG_UI, _PAUSE_AI_SDK),
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

    @property
    def ai_sdk(self) -> str:
        """What it is in the AI SDK's UI message stream: a ``CUSTOM`` event is the data
        part ``data-<name>``; a ``RUN_ERROR`` is an ``error`` chunk whose ``errorText`` is
        ``<code>: <message>``."""
        return f"data-{self.name}" if self.type == "CUSTOM" else "error"


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

NOTHING_TO_ANSWER = GatewayEvent("RUN_ERROR", "nothing_to_answer", "an AI SDK chat request "
                                 "answers no pause of the run (neither a tool approval nor "
                                 "`answers`); nothing was written")

#: Every AG-UI event the gateway makes of something else than a typed event: the
#: resume path's refusals are the contract's codes above, then the validator's reasons.
GATEWAY_EVENTS: tuple[GatewayEvent, ...] = (
    GAP, TRUNCATED, VERDICT, ABANDONED, WRONG_THREAD, DUPLICATE_INTERRUPT, UNKNOWN_INTERRUPT,
    RESUME_INCOMPLETE, CANCEL_UNSUPPORTED, NO_VERDICT, NOT_PERMITTED, NOTHING_TO_ANSWER,
    *(GatewayEvent("RUN_ERROR", reason.value, "the validator refused the answer (contract §7; "
                   "docs/pauses.md)") for reason in RejectionReason),
)
#: The ``code`` of every RUN_ERROR a resume can end with.
RESUME_ERROR_CODES: frozenset[str] = frozenset(
    e.name for e in GATEWAY_EVENTS if e.type == "RUN_ERROR" and e is not ABANDONED)


@dataclass(frozen=True, slots=True)
class AiSdkPart:
    """A data part of the AI SDK's stream made of a typed event that has no part of its own
    in the SDK (the gateway's other data parts are :data:`GATEWAY_EVENTS`' ``ai_sdk``)."""

    type: str
    means: str


PAUSE = AiSdkPart("data-pause", "a pause whose ticket is no tool approval (`id`: the "
                  "interrupt id); answered with `answers` in the chat request's body")
EXTENSION = AiSdkPart("data-extension", "an `extension` event (`name`, `payload`)")
ORPHAN_RESULT = AiSdkPart("data-tool-result", "a tool result of a call the run never "
                          "opened (`toolCallId`, `result`): the SDK has no tool part for it")
AI_SDK_PARTS: tuple[AiSdkPart, ...] = (PAUSE, EXTENSION, ORPHAN_RESULT)


@dataclass(frozen=True, slots=True)
class Row:
    """A row of docs/gateway.md's mapping table for what is no typed event."""

    envelope: str
    ag_ui: str
    ai_sdk: str


#: Rows before the typed events' (:func:`mapping_table`).
ROWS_BEFORE: tuple[Row, ...] = (
    Row("the first of a run (or the first after a `paused` end)",
        "`RUN_STARTED` (`threadId` and `runId`: the run id)",
        "`start-step` (a response's first chunk is `start`, `messageId`: the run id)"),
)
#: Rows after them.
ROWS_AFTER: tuple[Row, ...] = (
    Row("`end` `completed` / `cancelled`",
        "`RUN_FINISHED` with outcome `success` / `cancelled`",
        "`finish-step`, `finish` (`stop` / `other`; `messageMetadata`: `status`, `usage`, "
        "`durationMs`)"),
    Row("`end` `paused`",
        "`RUN_FINISHED` with outcome `interrupt` and the pause's interrupts",
        "`finish-step`; then `finish` (`tool-calls` or `other`) when the response ends there "
        "(the run waits), nothing more when the run has gone on"),
    Row("`end` `error`", "`RUN_ERROR` (`message`, `code` = the kernel's error type)",
        "`error` (`errorText`: `<type>: <message>`), `finish-step`, `finish` (`error`)"),
    Row("`end` `abandoned`", "`RUN_ERROR` with `code` `abandoned`",
        "`error` (`errorText`: `abandoned: ...`), `finish-step`, `finish` (`error`)"),
    Row("`gap`", "`CUSTOM` `gap` with `from_index`, `to_index`",
        "`data-gap` with `from_index`, `to_index`"),
    Row("records the gateway cannot serve (as `event: truncated`)",
        "`CUSTOM` `truncated` with `from_seq`, `to_seq`, `reason`",
        "`data-truncated` with `from_seq`, `to_seq`, `reason`"),
    Row("a part still open at any other event",
        "`TEXT_MESSAGE_END`, `REASONING_MESSAGE_END` + `REASONING_END`, `TOOL_CALL_END` first",
        "`text-end`, `reasoning-end`, `tool-input-available` first"),
)

#: Where the table is in docs/gateway.md.
TABLE_START, TABLE_END = "<!-- formats-table:start -->", "<!-- formats-table:end -->"


def mapping_table() -> str:
    """docs/gateway.md's table: what each typed envelope becomes in each wire format."""
    rows = [("typed envelope (SSE `event:`)", "AG-UI events", "AI SDK chunks"),
            ("---", "---", "---")]
    rows += [(r.envelope, r.ag_ui, r.ai_sdk) for r in ROWS_BEFORE]
    rows += [(f"`{e.name}`", e.ag_ui_doc, e.ai_sdk_doc) for e in EVENT_TYPES]
    rows += [(r.envelope, r.ag_ui, r.ai_sdk) for r in ROWS_AFTER]
    return "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows) + "\n"
