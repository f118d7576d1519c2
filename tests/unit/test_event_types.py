"""The typed event types' registry (symfonic_stream/models/event_types.py) and the output
formats: each format has a handler for every type, and does what the registry says.

A new event type in the StreamEvent union without its entry, or an entry some format does
not handle (or handles otherwise: the envelope's SSE name, AG-UI, the AI SDK's stream, the
page, the terminal), fails here, and so does docs/gateway.md's table when it is not the one
the registry generates.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest
from rich.console import Console

from symfonic_stream.gateway import agui, aisdk
from symfonic_stream.gateway.sse import read_envelope
from symfonic_stream.models.envelope import TypedEventRecord
from symfonic_stream.models.event_types import (
    AI_SDK_PARTS,
    EVENT_TYPES,
    GATEWAY_EVENTS,
    RESUME_ERROR_CODES,
    STREAM_EVENT_TYPES,
    TABLE_END,
    TABLE_START,
    EventType,
    mapping_table,
)
from symfonic_stream.models.pauses import RejectionReason
from symfonic_stream.models.stream_event import StreamEvent
from symfonic_stream.tools import render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "symfonic_stream" / "gateway" / "static" / "index.html"
GATEWAY_DOC = ROOT / "docs" / "gateway.md"

_START = {"type": "tool_call_start", "tool_name": "search", "tool_call_id": "c1",
          "phase": "executing"}
_PAUSE = {"token": "tok", "tool_call_id": "c2", "interrupt_id": "i1", "run_id": "r",
          "session_id": None, "expires_at": 1767229200.0, "resumable": True}
#: Per type, the events a run gets, in order: the last is the type's own.
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "thinking_delta": [{"type": "thinking_delta", "text": "hmm"}],
    "text_delta": [{"type": "text_delta", "text": "Hello"}],
    "tool_call_start": [_START],
    "tool_call_delta": [_START, {"type": "tool_call_delta", "tool_call_id": "c1",
                                 "args_delta": '{"q":1}'}],
    "tool_result": [_START, {"type": "tool_result", "tool_call_id": "c1", "result": "ok"}],
    "extension": [{"type": "extension", "name": "trace", "event_id": "e1", "payload": {"a": 1}}],
    "usage": [{"type": "usage", "input_tokens": 3, "output_tokens": 4}],
    "response_complete": [{"type": "response_complete", "text": "done", "duration_ms": 12.5}],
    "ask_user": [{"type": "ask_user", "questions": ["Go on?"], **_PAUSE}],
    "interrupt": [{"type": "interrupt", "name": "approve", "payload": {"x": 1}, **_PAUSE}],
}
_CLOSERS = {"RUN_STARTED", "TEXT_MESSAGE_END", "REASONING_MESSAGE_END", "REASONING_END",
            "TOOL_CALL_END"}
ENTRIES = pytest.mark.parametrize("entry", EVENT_TYPES, ids=lambda entry: entry.name)


def test_the_registry_is_the_stream_event_union() -> None:
    union, _field = get_args(StreamEvent)
    assert [entry.model for entry in EVENT_TYPES] == list(get_args(union))
    assert tuple(EXAMPLES) == STREAM_EVENT_TYPES


@ENTRIES
def test_each_example_is_its_model(entry: EventType) -> None:
    entry.model.model_validate(EXAMPLES[entry.name][-1])


# -- AG-UI --------------------------------------------------------------------------------


def _translated(events: list[dict[str, Any]]) -> tuple[agui.AgUiRun, list[agui.Event]]:
    run = agui.AgUiRun("r")
    last: list[agui.Event] = []
    for seq, event in enumerate(events):
        last = run.translate({"run_id": "r", "seq": seq, "ts": 1.0, "event": event})
    return run, last


def test_ag_ui_has_a_handler_per_type() -> None:
    assert set(agui._HANDLERS) == set(STREAM_EVENT_TYPES)


@ENTRIES
def test_ag_ui_does_what_the_registry_says(entry: EventType) -> None:
    run, last = _translated(EXAMPLES[entry.name])
    assert tuple(e["type"] for e in last if e["type"] not in _CLOSERS) == entry.ag_ui
    status = "paused" if entry.ag_ui_finish == "outcome" else "completed"
    end = run.translate({"run_id": "r", "seq": 9, "ts": 2.0, "end": {"status": status}})
    [finished] = [e for e in end if e["type"] not in _CLOSERS]
    assert finished["type"] == "RUN_FINISHED"
    if entry.ag_ui_finish == "outcome":
        assert finished["outcome"]["type"] == "interrupt" and finished["outcome"]["interrupts"]
    else:
        assert finished["outcome"] == {"type": "success"}
    assert ("result" in finished) == (entry.ag_ui_finish == "result")
    assert ("usage" in finished) == (entry.ag_ui_finish == "usage")


# -- the envelope's own SSE name ---------------------------------------------------------


@ENTRIES
def test_the_envelope_is_sent_under_its_types_name(entry: EventType) -> None:
    envelope = {"run_id": "r", "seq": 0, "source_index": 0, "ts": 1.0,
                "event": EXAMPLES[entry.name][-1]}
    read = read_envelope(orjson.dumps(envelope))
    assert read is not None and read.name == entry.name


# -- the AI SDK's UI message stream -------------------------------------------------------

_AI_SDK_CLOSERS = {"start-step", "text-end", "reasoning-end", "tool-input-available"}


def _streamed(events: list[dict[str, Any]]) -> tuple[aisdk.AiSdkRun, list[aisdk.Chunk]]:
    run = aisdk.AiSdkRun("r")
    last: list[aisdk.Chunk] = []
    for seq, event in enumerate(events):
        last = run.translate({"run_id": "r", "seq": seq, "ts": 1.0, "event": event})
    return run, last


def test_ai_sdk_has_a_handler_per_type() -> None:
    assert set(aisdk._HANDLERS) == set(STREAM_EVENT_TYPES)


@ENTRIES
def test_ai_sdk_does_what_the_registry_says(entry: EventType) -> None:
    run, last = _streamed(EXAMPLES[entry.name])
    assert tuple(c["type"] for c in last if c["type"] not in _AI_SDK_CLOSERS) == entry.ai_sdk
    status = "paused" if entry.ai_sdk_finish == "reason" else "completed"
    end = [c for c in run.translate({"run_id": "r", "seq": 9, "ts": 2.0,
                                     "end": {"status": status}})
           if c["type"] not in _AI_SDK_CLOSERS]
    finish = run.paused_finish() if status == "paused" else end[-1]
    assert finish["type"] == "finish" and end[0]["type"] == "finish-step"
    assert finish["finishReason"] == ("other" if status == "paused" else "stop")
    filled = set(finish["messageMetadata"]) - {"status"}
    assert bool(filled) == (entry.ai_sdk_finish == "metadata"), finish


@pytest.mark.parametrize("name", ["ask_user", "interrupt"])
def test_a_pause_on_an_open_tool_call_is_the_ai_sdks_tool_approval(name: str) -> None:
    pause = {**EXAMPLES[name][-1], "tool_call_id": "c1"}
    run, last = _streamed([_START, pause])
    assert [c["type"] for c in last] == ["tool-input-available", "tool-approval-request"]
    assert last[-1] == {"type": "tool-approval-request", "approvalId": "i1", "toolCallId": "c1"}
    run.translate({"run_id": "r", "seq": 5, "end": {"status": "paused"}})
    assert run.paused_finish()["finishReason"] == "tool-calls"
    # A call whose result came is no approval any more: a data-pause.
    result = {"type": "tool_result", "tool_call_id": "c1", "result": "ok"}
    _run, last = _streamed([_START, result, pause])
    assert [c["type"] for c in last] == ["data-pause"]


# -- the gateway's page -------------------------------------------------------------------


def _page_handlers() -> dict[str, str]:
    """The page's ``typed`` handlers: each type's source text."""
    [table] = re.findall(r"\nconst typed = \{\n(.*?)\n\};\n", PAGE.read_text(), flags=re.S)
    parts = re.split(r"^  ([a-z_]+): ", table, flags=re.M)[1:]
    return dict(zip(parts[::2], parts[1::2], strict=True))


def test_the_page_has_a_handler_per_type() -> None:
    assert set(_page_handlers()) == set(STREAM_EVENT_TYPES)


@ENTRIES
def test_the_page_shows_each_type_in_its_pane(entry: EventType) -> None:
    writes_to = {"text": '$("text")', "thinking": '$("thinking")', "tools": "tool(",
                 "notes": "note("}
    assert writes_to[entry.page] in _page_handlers()[entry.name]


# -- the terminal -------------------------------------------------------------------------


def test_the_terminal_has_a_handler_per_type() -> None:
    assert set(render._TYPED) == {entry.model for entry in EVENT_TYPES}


@ENTRIES
def test_the_terminal_renders_each_type_as_the_registry_says(entry: EventType) -> None:
    text = io.StringIO()
    renderer = render.RunRenderer(Console(file=text, no_color=True, width=200),
                                  show_header=False)
    for seq, event in enumerate(EXAMPLES[entry.name]):
        before = text.tell()
        renderer.render(TypedEventRecord.model_validate(
            {"run_id": "r", "seq": seq, "source_index": seq, "ts": 1.0, "event": event}))
    own = text.getvalue()[before:]
    assert own.strip(), "nothing rendered"
    assert own.endswith("\n") == (entry.terminal == "line"), repr(own)


# -- the docs -----------------------------------------------------------------------------


def test_the_gateway_doc_holds_the_table_the_registry_generates() -> None:
    """docs/gateway.md's table of the formats is :func:`mapping_table`'s (regenerate it:
    ``python -m tests.unit.test_event_types``), and names every type."""
    text = GATEWAY_DOC.read_text()
    assert text.count(TABLE_START) == 1 and text.count(TABLE_END) == 1
    table = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip("\n") + "\n"
    assert table == mapping_table(), "run `python -m tests.unit.test_event_types`"
    for name in STREAM_EVENT_TYPES:
        assert f"| `{name}` |" in table, name


def write_table() -> None:
    """Rewrite docs/gateway.md's table from the registry."""
    text = GATEWAY_DOC.read_text()
    head, rest = text.split(TABLE_START, 1)
    GATEWAY_DOC.write_text(f"{head}{TABLE_START}\n{mapping_table()}{TABLE_END}"
                           f"{rest.split(TABLE_END, 1)[1]}")


# -- the gateway's own AG-UI events -------------------------------------------------------

#: A CUSTOM event's name or a RUN_ERROR's code spelled in the gateway's code.
_SPELLED = re.compile(r'"type": "(CUSTOM|RUN_ERROR)",[^}]*?"(?:name|code)": "([a-z_]+)"'
                      r'|"(?:name|code)": "([a-z_]+)"[^}]*?"type": "(?:CUSTOM|RUN_ERROR)"'
                      r'|ResumeError\("([a-z_]+)"')


def test_the_gateway_names_its_own_events_from_the_registry() -> None:
    """A CUSTOM name or RUN_ERROR code the gateway spells itself is a typed event's (the
    table above) or one of GATEWAY_EVENTS; the rest take the registry's names."""
    known = {e.name for e in GATEWAY_EVENTS} | set(STREAM_EVENT_TYPES)
    spelled = set()
    for path in sorted((ROOT / "symfonic_stream" / "gateway").glob("*.py")):
        for match in _SPELLED.finditer(path.read_text()):
            spelled.add(next(group for group in match.groups()[1:] if group))
    assert spelled <= known, spelled - known
    assert {"usage"} <= spelled  # (the pattern finds what it is for)


def test_a_resume_refusal_is_a_registered_code() -> None:
    assert {reason.value for reason in RejectionReason} <= RESUME_ERROR_CODES
    assert {"wrong_thread", "unknown_interrupt", "no_verdict"} <= RESUME_ERROR_CODES
    assert "abandoned" not in RESUME_ERROR_CODES  # (a run's end, not a resume's)


def test_the_gateway_doc_names_each_of_the_gateways_own_events() -> None:
    text = GATEWAY_DOC.read_text()
    for event in GATEWAY_EVENTS:
        assert f"`{event.name}`" in text, event.name
    for part in AI_SDK_PARTS:
        assert f"`{part.type}`" in text, part.type


def test_the_ai_sdk_stream_names_its_own_parts_from_the_registry() -> None:
    """Every ``data-*`` part the AI SDK translation spells is the registry's: a gateway
    event's (``data-<name>``) or one of AI_SDK_PARTS (or a type it does not know, as it is)."""
    source = (ROOT / "symfonic_stream" / "gateway" / "aisdk.py").read_text()
    assert not re.findall(r'"data-[a-z]', source)  # (all from the registry)
    assert {e.ai_sdk for e in GATEWAY_EVENTS if e.type == "CUSTOM"} == {
        "data-gap", "data-truncated", "data-verdict"}


if __name__ == "__main__":
    write_table()
