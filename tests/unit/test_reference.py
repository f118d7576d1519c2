"""The reference oracle (tests/reference/oracle.py), checked three ways.

(a) against the hand-written expectations of test_typed_projection, test_chunk_projection,
    test_guard, test_offline and test_decoding (their literal values, re-stated here, fed
    to the oracle as JSON bytes so that its validation runs too);
(b) on the golden run, byte for byte against ``symfonic-stream project`` (a subprocess);
(c) differentially against ``symfonic_stream``: generated multi-run raw streams through
    ``symfonic_stream.tools.offline.project_lines`` (envelopes compared as parsed JSON values
    *and* as exact bytes, dead letters as (reason, line), and the duplicate / gap /
    unknown-kind counters); single events and a deterministic one-field-at-a-time matrix
    (both projections, exact bytes); and validation verdicts against
    ``decode_agent_event``. Where the two sides disagree and the contract sides with the oracle,
    the input shape is excluded by name and the disagreement pinned in its own test.

This module is the one place that puts the oracle next to ``symfonic_stream``.
"""

from __future__ import annotations

import copy
import io
import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symfonic_stream.models.decoding import DecodeError, decode_agent_event
from symfonic_stream.processors.projector import GuardLimits
from symfonic_stream.tools.offline import project_lines
from tests.reference import oracle
from tests.reference.oracle import (
    ReferenceGuard,
    chunks,
    compact_json,
    encode,
    envelopes_by_run,
    project,
    typed,
    validate,
)
from tests.unit.helpers import interrupt, raw, tool_call
from tests.unit.test_guard import damaged_delivery

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_RUN = ROOT / "tests" / "golden" / "golden_run.jsonl"


def valid(event: dict[str, Any]) -> dict[str, Any]:
    """The oracle's validation of one raw dict (sent as JSON bytes), which must pass."""
    parsed, reason = validate(json.dumps(event).encode())
    assert reason is None, event
    assert parsed is not None
    return parsed


def o_typed(kind: str, **fields: Any) -> list[dict[str, Any]]:
    return typed(valid(raw(kind, **fields)))


def o_chunks(kind: str, **fields: Any) -> list[dict[str, Any]]:
    return chunks(valid(raw(kind, **fields)))


def reason(value: bytes) -> str | None:
    return validate(value)[1]


# -- (a) contract §2: the cases of test_decoding.py -------------------------------------------


def test_valid_event_ignores_unknown_fields_and_accepts_integer_timestamps() -> None:
    event = valid(raw("text_delta", 3, text="hi", shiny_new_field=1))
    assert (event["run_id"], event["index"], event["kind"], event["text"]) == (
        "run-1", 3, "text_delta", "hi",
    )
    assert reason(b'{"run_id":"r","index":0,"kind":"done","timestamp":17}') is None
    assert reason(orjson.dumps(raw("brand_new_kind"))) is None


@pytest.mark.parametrize(
    "value",
    [
        b"not json", b"{", b'{"run_id": NaN}', b"", b"\xff\xfe", b'{"a":1}trailing',
        b'{"run_id":"r","index":0,"kind":"x","timestamp":Infinity}',
        b'{"run_id":"r","index":0,"kind":"x","timestamp":1e400}',
        b'{"run_id":"r\\ud800","index":0,"kind":"x","timestamp":1}',
        b'\xef\xbb\xbf{"run_id":"r","index":0,"kind":"x","timestamp":1}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_invalid_json(value: bytes) -> None:
    assert reason(value) == "invalid_json"


_BAD_PATCHES: list[dict[str, Any]] = [
    {"index": "3"}, {"index": 1.5}, {"index": 1.0}, {"index": True}, {"index": -1},
    {"timestamp": "now"}, {"timestamp": True}, {"run_id": ""}, {"run_id": "r" * 257},
    {"run_id": 7}, {"kind": None}, {"text": 5}, {"scope": "acme"},
    {"tool_call": {"id": "c", "name": "n", "arguments": [1, 2]}}, {"tool_call": {"id": "c"}},
    {"interrupt": {"name": "x", "kind": "weird", "token": "t", "interrupt_id": "i",
                   "expires_at": 1.0}},
    {"interrupt": {"name": "x", "kind": "ask_user", "token": "t", "interrupt_id": "i",
                   "expires_at": "soon"}},
    {"result": {"usage": {"input_tokens": 1.5}}}, {"error": {"type": "E"}},
    # docs/contract.md decision 6: what may not be null, and a non-empty interrupt_id.
    {"interrupt": interrupt(payload=None)}, {"interrupt": interrupt(resumable=None)},
    {"interrupt": interrupt(interrupt_id="")}, {"result": {"usage": None}},
    {"result": {"usage": {"output_tokens": None}}}, {"scope": {"tenant": 1}},
]


@pytest.mark.parametrize("patch", _BAD_PATCHES)
def test_invalid_event_types_are_never_coerced(patch: dict[str, Any]) -> None:
    assert reason(orjson.dumps({**raw("text_delta"), **patch})) == "invalid_event"


@pytest.mark.parametrize("missing", ["run_id", "index", "kind", "timestamp"])
def test_missing_required_field_is_invalid_event(missing: str) -> None:
    event = raw("text_delta")
    del event[missing]
    assert reason(orjson.dumps(event)) == "invalid_event"


@pytest.mark.parametrize("value", [b"[1,2]", b'"text"', b"42", b"null", b"true"])
def test_json_that_is_not_an_object_is_invalid_event(value: bytes) -> None:
    assert reason(value) == "invalid_event"


def test_ask_user_questions_must_be_a_list_but_only_for_ask_user() -> None:
    pending = interrupt(payload={"questions": "why?"})
    assert reason(orjson.dumps(raw("ask_user", interrupt=pending))) == "invalid_event"
    assert reason(orjson.dumps(raw("interrupt", interrupt=pending))) is None


def test_nullable_fields_accept_null() -> None:
    nulls: dict[str, Any] = dict.fromkeys(
        ["root_run_id", "session_id", "thread_id", "scope", "text", "tool_call", "interrupt",
         "result", "error"]
    )
    assert reason(orjson.dumps(raw("x", **nulls))) is None
    assert reason(orjson.dumps(raw("x", result={"text": None, "duration_ms": None}))) is None
    assert reason(orjson.dumps(raw("x", run_id="é" * 256))) is None


# -- (a) contract §3: the cases of test_typed_projection.py -----------------------------------

_ASK_USER = {
    "type": "ask_user",
    "questions": [{"question": "Continue?"}],
    "token": "tok-1",
    "tool_call_id": "call-9",
    "interrupt_id": "intr-1",
    "run_id": "run-1",
    "session_id": "sess-1",
    "expires_at": 4000.0,
    "resumable": True,
}
_START = {"type": "tool_call_start", "tool_name": "search", "tool_call_id": "call-1",
          "phase": "executing"}


def test_ask_user_interrupt_becomes_ask_user_event() -> None:
    assert o_typed("ask_user", interrupt=interrupt("ask_user")) == [_ASK_USER]


def test_ask_user_without_questions_gives_empty_list() -> None:
    [body] = o_typed("ask_user", interrupt=interrupt("ask_user", payload={"note": "x"}))
    assert body["questions"] == []


def test_ask_user_is_decided_by_the_agent_event_kind_not_the_interrupt_kind() -> None:
    assert [b["type"] for b in o_typed("ask_user", interrupt=interrupt("interrupt"))] == [
        "ask_user"
    ]
    assert [b["type"] for b in o_typed("interrupt", interrupt=interrupt("ask_user"))] == [
        "interrupt"
    ]


def test_interrupt_becomes_interrupt_event() -> None:
    pending = interrupt("interrupt", payload={"action": "pay", "amount": 3})
    assert o_typed("interrupt", interrupt=pending) == [
        {
            "type": "interrupt",
            "name": "approval",
            "payload": {"action": "pay", "amount": 3},
            "token": "tok-1",
            "tool_call_id": "call-9",
            "interrupt_id": "intr-1",
            "run_id": "run-1",
            "session_id": "sess-1",
            "expires_at": 4000.0,
            "resumable": True,
        }
    ]


@pytest.mark.parametrize("kind", ["text_delta", "thinking", "tool_call", "tool_result"])
def test_interrupt_is_checked_first_whatever_the_kind(kind: str) -> None:
    bodies = o_typed(kind, text="hello", tool_call=tool_call(), interrupt=interrupt("interrupt"))
    assert [body["type"] for body in bodies] == ["interrupt"]


@pytest.mark.parametrize(("kind", "out"), [("thinking", "thinking_delta"),
                                           ("text_delta", "text_delta")])
def test_text_kinds_with_and_without_text(kind: str, out: str) -> None:
    assert o_typed(kind, text="Hello") == [{"type": out, "text": "Hello"}]
    assert o_typed(kind, text="") == []
    assert o_typed(kind, text=None) == []


def test_tool_call_with_arguments_starts_then_sends_compact_arguments_in_order() -> None:
    arguments = {"zeta": 1, "alpha": {"b": [1, 2], "a": "é"}, "mid": None}
    assert o_typed("tool_call", tool_call=tool_call(arguments=arguments)) == [
        _START,
        {
            "type": "tool_call_delta",
            "tool_call_id": "call-1",
            "args_delta": '{"zeta":1,"alpha":{"b":[1,2],"a":"é"},"mid":null}',
        },
    ]


@pytest.mark.parametrize("arguments", [None, {}])
def test_tool_call_without_arguments_only_starts(arguments: dict[str, Any] | None) -> None:
    assert o_typed("tool_call", tool_call=tool_call(arguments=arguments)) == [_START]


def _timing(duration_ms: float | None, is_error: bool) -> dict[str, Any]:
    return {
        "type": "extension",
        "name": "tool_timing",
        "event_id": "call-1",
        "payload": {"tool_call_id": "call-1", "tool_name": "search",
                    "duration_ms": duration_ms, "is_error": is_error},
    }


def test_tool_result_with_result_then_timing() -> None:
    assert o_typed("tool_result", tool_call=tool_call(result={"hits": 3}, duration_ms=12.5)) == [
        {"type": "tool_result", "tool_call_id": "call-1", "result": {"hits": 3}},
        _timing(12.5, False),
    ]


def test_tool_result_falls_back_to_error_then_empty_string() -> None:
    bodies = o_typed("tool_result", tool_call=tool_call(error="boom", duration_ms=3))
    assert bodies == [{"type": "tool_result", "tool_call_id": "call-1", "result": "boom"},
                      _timing(3.0, True)]
    assert type(bodies[1]["payload"]["duration_ms"]) is float  # an int arrives, a float is due
    assert o_typed("tool_result", tool_call=tool_call()) == [
        {"type": "tool_result", "tool_call_id": "call-1", "result": ""},
        _timing(None, False),
    ]


def test_tool_result_keeps_falsy_result_and_is_error_follows_error() -> None:
    [result, _] = o_typed("tool_result", tool_call=tool_call(result=0, error="ignored"))
    assert result["result"] == 0
    [result, timing] = o_typed("tool_result", tool_call=tool_call(result="partial", error="late"))
    assert result["result"] == "partial"
    assert timing["payload"]["is_error"] is True


@pytest.mark.parametrize("kind", ["tool_call", "tool_result"])
def test_tool_kinds_without_tool_call_emit_nothing(kind: str) -> None:
    assert o_typed(kind) == []
    assert o_chunks(kind) == []


def _done(**usage: int) -> dict[str, Any]:
    return {"text": "All set.", "duration_ms": 1234.5678, "usage": usage}


def test_done_usage_rules() -> None:
    assert o_typed("done", result=_done(input_tokens=10, output_tokens=5, total_tokens=15)) == [
        {"type": "usage", "input_tokens": 10, "output_tokens": 5},
        {"type": "response_complete", "text": "All set.", "duration_ms": 1234.6},
    ]
    [usage, _] = o_typed("done", result=_done(input_tokens=0, output_tokens=7))
    assert usage == {"type": "usage", "input_tokens": 0, "output_tokens": 7}
    assert o_typed("done", result=_done(total_tokens=1200)) == [
        {"type": "response_complete", "text": "All set.", "duration_ms": 1234.6}
    ]


def test_done_without_usage_or_result() -> None:
    assert o_typed("done", result={"text": "ok", "duration_ms": 0.04}) == [
        {"type": "response_complete", "text": "ok", "duration_ms": 0.0}
    ]
    assert o_typed("done") == [{"type": "response_complete", "text": "", "duration_ms": 0.0}]


def test_response_complete_rounds_to_a_tenth_of_a_millisecond() -> None:
    [body] = o_typed("done", result={"text": "t", "duration_ms": 2.25})
    assert body["duration_ms"] == round(2.25, 1)
    [body] = o_typed("done", result={"text": "t", "duration_ms": 99.96})
    assert body["duration_ms"] == 100.0


def test_done_with_an_interrupt_gives_the_pause_then_done_events() -> None:
    bodies = o_typed("done", interrupt=interrupt("interrupt"), result=_done(input_tokens=1))
    assert [b["type"] for b in bodies] == ["interrupt", "usage", "response_complete"]


@pytest.mark.parametrize("kind", ["error", "cancelled"])
def test_error_and_cancelled_emit_no_typed_event(kind: str) -> None:
    fields: dict[str, Any] = {"error": {"type": "E", "message": "m"}} if kind == "error" else {}
    assert o_typed(kind, text="ignored", **fields) == []


@pytest.mark.parametrize("kind", ["mystery", "ask_user", "interrupt", ""])
def test_unknown_kinds_and_pauses_without_interrupt_emit_nothing(kind: str) -> None:
    assert o_typed(kind, text="hello") == []


# -- (a) contract §4: the cases of test_chunk_projection.py -----------------------------------


def test_text_and_thinking_chunks() -> None:
    assert o_chunks("text_delta", text="Hi") == [{"type": "text", "content": "Hi", "name": None}]
    assert o_chunks("thinking", text="hm") == [
        {"type": "thinking", "content": "hm", "name": None}
    ]


@pytest.mark.parametrize("kind", ["text_delta", "thinking"])
@pytest.mark.parametrize("text", ["", None])
def test_empty_text_emits_no_chunk(kind: str, text: str | None) -> None:
    assert o_chunks(kind, text=text) == []


def test_tool_call_chunk() -> None:
    call = tool_call(arguments={"q": "kafka", "limit": 3})
    assert o_chunks("tool_call", tool_call=call) == [
        {"type": "tool_call", "content": '{"q":"kafka","limit":3}', "name": "search"}
    ]
    empty: list[dict[str, Any] | None] = [None, {}]
    for arguments in empty:
        assert o_chunks("tool_call", tool_call=tool_call(arguments=arguments)) == [
            {"type": "tool_call", "content": "", "name": "search"}
        ]


@pytest.mark.parametrize(
    ("result", "content"),
    [("3 hits", "3 hits"), ({"b": 1, "a": [True, None]}, '{"b":1,"a":[true,null]}'),
     (0, "0"), (False, "false")],
)
def test_tool_result_chunk_content(result: Any, content: str) -> None:
    assert o_chunks("tool_result", tool_call=tool_call(result=result, error="x")) == [
        {"type": "tool_result", "content": content, "name": "search"}
    ]


def test_tool_result_chunk_falls_back_to_error_then_empty() -> None:
    assert o_chunks("tool_result", tool_call=tool_call(error="boom")) == [
        {"type": "tool_result", "content": "boom", "name": "search"}
    ]
    assert o_chunks("tool_result", tool_call=tool_call()) == [
        {"type": "tool_result", "content": "", "name": "search"}
    ]


def test_done_is_final_with_result_text_or_empty() -> None:
    result = {"text": "Answer.", "duration_ms": 5, "usage": {"input_tokens": 3}}
    assert o_chunks("done", result=result) == [
        {"type": "final", "content": "Answer.", "name": None}
    ]
    assert o_chunks("done") == [{"type": "final", "content": "", "name": None}]


@pytest.mark.parametrize("kind", ["ask_user", "interrupt", "text_delta", "done"])
def test_interrupt_present_is_an_interrupt_chunk(kind: str) -> None:
    pending = interrupt("interrupt", payload={"action": "pay", "amount": 3})
    assert o_chunks(kind, text="t", interrupt=pending) == [
        {"type": "interrupt", "content": '{"action":"pay","amount":3}', "name": "approval"}
    ]


@pytest.mark.parametrize("kind", ["error", "cancelled", "mystery", "ask_user"])
def test_anything_else_emits_no_chunk(kind: str) -> None:
    assert o_chunks(kind) == []


# -- compact JSON: orjson's text ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-05, "0.00001"), (-1.2345e-05, "-0.000012345"), (2.5e-06, "2.5e-6"), (1e16, "1e+16"),
        (1e15, "1000000000000000.0"), (17.0, "17.0"), (-0.0, "-0.0"), (5e-324, "5e-324"),
        ({"é": "日本\n\"\\\x00\x7f"}, '{"é":"日本\\n\\"\\\\\\u0000\x7f"}'),
        ([2**64 - 1, -(2**63), True, None],
         "[18446744073709551615,-9223372036854775808,true,null]"),
    ],
)
def test_compact_json_is_orjsons_text(value: Any, text: str) -> None:
    assert compact_json(value) == text
    assert orjson.dumps(value).decode() == text


# -- (a) contract §5: the cases of test_guard.py ---------------------------------------------


class Harness:
    """The oracle's guard fed raw dicts (as JSON lines), like test_guard's Harness."""

    def __init__(self, buffer_max: int = 5) -> None:
        self.guard = ReferenceGuard("typed", buffer_max)
        self.line = 0

    def feed(self, event: dict[str, Any]) -> None:
        self.line += 1
        self.guard.accept(valid(event), self.line)

    def records(self) -> list[dict[str, Any]]:
        return self.guard.envelopes

    def shapes(self) -> list[str]:
        words = []
        for record in self.records():
            if "event" in record:
                words.append(record["event"]["type"])
            elif "end" in record:
                words.append("end:" + record["end"]["status"])
            else:
                words.append(f"gap:{record['gap']['from_index']}-{record['gap']['to_index']}")
        return words

    def reasons(self) -> list[str]:
        return [letter for letter, _ in self.guard.dead_letters]


def text(index: int, run_id: str = "run-1") -> dict[str, Any]:
    return raw("text_delta", index, run_id, text=f"t{index}")


def done(index: int, run_id: str = "run-1") -> dict[str, Any]:
    return raw("done", index, run_id, result={"text": "fin", "duration_ms": 1.0})


def test_in_order_run_gets_dense_seq_and_one_completed_end() -> None:
    h = Harness()
    for event in [text(0), text(1), done(2)]:
        h.feed(event)
    records = h.records()
    assert [r["seq"] for r in records] == [0, 1, 2, 3]
    assert [r["source_index"] for r in records] == [0, 1, 2, 2]
    assert [r["ts"] for r in records] == [100.0, 101.0, 102.0, 102.0]
    assert h.shapes() == ["text_delta", "text_delta", "response_complete", "end:completed"]
    assert records[-1]["end"] == {"status": "completed", "error": None}
    assert [list(r) for r in records] == [["run_id", "seq", "source_index", "ts", "event"]] * 3 + [
        ["run_id", "seq", "source_index", "ts", "end"]
    ]


def test_error_end_carries_the_kernels_error_object() -> None:
    h = Harness()
    h.feed(text(0))
    h.feed(raw("error", 1, error={"type": "ProviderError", "message": "rate limited"}))
    assert h.records()[-1] == {
        "run_id": "run-1",
        "seq": 1,
        "source_index": 1,
        "ts": 101.0,
        "end": {"status": "error", "error": {"type": "ProviderError", "message": "rate limited"}},
    }


def test_cancelled_ends_without_any_event() -> None:
    h = Harness()
    h.feed(raw("cancelled", 0))
    assert h.shapes() == ["end:cancelled"]


def test_duplicates_are_dropped_and_counted() -> None:
    h = Harness()
    for event in [text(0), text(0), text(2), text(2), text(1)]:
        h.feed(event)
    assert h.shapes() == ["text_delta"] * 3
    assert h.guard.duplicates == 2


def test_out_of_order_events_wait_for_the_hole_then_release_in_order() -> None:
    h = Harness()
    h.feed(text(2))
    h.feed(text(1))
    assert h.records() == []
    h.feed(text(0))
    assert [r["source_index"] for r in h.records()] == [0, 1, 2]


def test_gap_at_end_of_input_reports_the_missing_range_with_next_events_timestamp() -> None:
    h = Harness()
    h.feed(text(0))
    h.feed(text(3))
    assert h.shapes() == ["text_delta"]
    h.guard.finish()
    records = h.records()
    assert records[1] == {
        "run_id": "run-1",
        "seq": 1,
        "source_index": None,
        "ts": 103.0,
        "gap": {"from_index": 1, "to_index": 2},
    }
    assert records[2]["source_index"] == 3 and records[2]["seq"] == 2
    assert h.guard.gaps == 1
    h.feed(text(1))  # the lost event arrives after all: it is a duplicate now
    assert h.guard.duplicates == 1


def test_buffer_past_its_bound_fills_the_first_hole() -> None:
    h = Harness()  # buffer_max=5
    for index in range(2, 7):
        h.feed(text(index))
    assert h.records() == []
    h.feed(text(7))  # the sixth buffered event exceeds the bound
    assert h.shapes() == ["gap:0-1"] + ["text_delta"] * 6


def test_run_closed_dead_letters_new_indexes_and_drops_old_ones() -> None:
    h = Harness()
    for event in [text(0), done(1), text(5), text(1)]:
        h.feed(event)
    assert h.guard.dead_letters == [("run_closed", 3)]
    assert h.guard.duplicates == 1
    assert h.shapes()[-1] == "end:completed"


def test_events_buffered_when_the_run_closes_are_dead_lettered_in_index_order() -> None:
    h = Harness()
    for event in [text(4), text(3), text(0), done(1)]:
        h.feed(event)
    assert h.shapes() == ["text_delta", "response_complete", "end:completed"]
    assert h.guard.dead_letters == [("run_closed", 2), ("run_closed", 1)]
    h.guard.finish()  # nothing is left waiting
    assert h.shapes()[-1] == "end:completed"


def test_pause_ends_the_segment_and_the_run_continues_its_seq() -> None:
    h = Harness()
    for event in [text(0), raw("ask_user", 1, interrupt=interrupt("ask_user")), text(2), done(3)]:
        h.feed(event)
    assert h.shapes() == ["text_delta", "ask_user", "end:paused", "text_delta",
                          "response_complete", "end:completed"]
    assert [r["seq"] for r in h.records()] == list(range(6))
    assert h.records()[2] == {"run_id": "run-1", "seq": 2, "source_index": 1, "ts": 101.0,
                              "end": {"status": "paused", "error": None}}


def test_unknown_kind_is_counted_and_advances_the_run() -> None:
    h = Harness()
    h.feed(raw("telemetry", 0))
    h.feed(text(1))
    assert h.shapes() == ["text_delta"]
    assert h.guard.unknown_kinds == 1


def test_runs_are_independent() -> None:
    h = Harness()
    for event in [text(1, "a"), text(0, "b"), done(1, "b"), text(0, "a")]:
        h.feed(event)
    assert [(r["run_id"], r["seq"]) for r in h.records()] == [
        ("b", 0), ("b", 1), ("b", 2), ("a", 0), ("a", 1),
    ]
    by_run = envelopes_by_run(h.records())
    assert list(by_run) == ["b", "a"]
    assert [r["seq"] for r in by_run["a"]] == [0, 1]


def expected_records(run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """test_guard's statement of the contract, with the oracle's own typed projection."""
    records: list[dict[str, Any]] = []
    for raw_event in run:
        event = valid(raw_event)
        base = {"run_id": event["run_id"], "source_index": event["index"],
                "ts": float(event["timestamp"])}
        for body in typed(event):
            records.append({**base, "seq": len(records), "event": body})
        status = {"done": "completed", "error": "error", "cancelled": "cancelled"}.get(
            event["kind"]
        )
        if status is None and event.get("interrupt") is not None:
            status = "paused"
        if status is not None:
            error = raw_event.get("error") if status == "error" else None
            records.append({**base, "seq": len(records), "end": {"status": status, "error": error}})
    return records


@settings(max_examples=150, deadline=None)
@given(damaged_delivery())
def test_any_damaged_delivery_gives_the_projection_of_the_kernel_order(
    case: tuple[list[list[dict[str, Any]]], list[dict[str, Any]]],
) -> None:
    runs, delivered = case
    h = Harness(buffer_max=1000)
    for event in delivered:
        h.feed(event)
    by_run = envelopes_by_run(h.records())
    for run in runs:
        got = by_run.get(run[0]["run_id"], [])
        assert got == expected_records(run)
        closing = [r for r in got if "end" in r and r["end"]["status"] != "paused"]
        assert closing == [got[-1]]
    assert h.reasons() == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=60))
def test_any_arrival_with_losses_still_gives_dense_seq_and_every_index_once(
    arrivals: list[int],
) -> None:
    h = Harness(buffer_max=4)
    for index in arrivals:
        h.feed(text(index))
    h.guard.finish()
    records = h.records()
    assert [r["seq"] for r in records] == list(range(len(records)))
    covered: list[int] = []
    for record in records:
        if "gap" in record:
            covered.extend(range(record["gap"]["from_index"], record["gap"]["to_index"] + 1))
        else:
            covered.append(record["source_index"])
    assert covered == list(range(max(arrivals) + 1))


# -- (a) contract §8: the cases of test_offline.py -------------------------------------------


def test_bad_lines_are_dead_lettered_with_their_line_numbers() -> None:
    good = [
        {"run_id": "r", "index": 0, "kind": "text_delta", "timestamp": 1, "text": "a"},
        {"run_id": "r", "index": 1, "kind": "done", "timestamp": 2},
        {"run_id": "r", "index": 2, "kind": "text_delta", "timestamp": 3, "text": "late"},
    ]
    data = b"\n".join(
        [orjson.dumps(good[0]), b"{oops", b"",
         b'{"run_id": "r", "index": "1", "kind": "done", "timestamp": 2}',
         orjson.dumps(good[1]), b"   ", orjson.dumps(good[2])]
    )
    envelopes, letters = project(io.BytesIO(data), "chunks")
    assert [r.get("event", r.get("end")) for r in envelopes] == [
        {"type": "text", "content": "a", "name": None},
        {"type": "final", "content": "", "name": None},
        {"status": "completed", "error": None},
    ]
    assert letters == [("invalid_json", 2), ("invalid_event", 4), ("run_closed", 7)]


def test_end_of_input_turns_every_open_hole_into_a_gap() -> None:
    events = [
        {"run_id": "a", "index": 2, "kind": "text_delta", "timestamp": 5.0, "text": "x"},
        {"run_id": "b", "index": 0, "kind": "text_delta", "timestamp": 6.0, "text": "y"},
        {"run_id": "b", "index": 3, "kind": "cancelled", "timestamp": 7.0},
    ]
    envelopes, letters = project([orjson.dumps(e) for e in events], "typed")
    assert letters == []
    assert envelopes == [
        {"run_id": "b", "seq": 0, "source_index": 0, "ts": 6.0,
         "event": {"type": "text_delta", "text": "y"}},
        {"run_id": "a", "seq": 0, "source_index": None, "ts": 5.0,
         "gap": {"from_index": 0, "to_index": 1}},
        {"run_id": "a", "seq": 1, "source_index": 2, "ts": 5.0,
         "event": {"type": "text_delta", "text": "x"}},
        {"run_id": "b", "seq": 1, "source_index": None, "ts": 7.0,
         "gap": {"from_index": 1, "to_index": 2}},
        {"run_id": "b", "seq": 2, "source_index": 3, "ts": 7.0,
         "end": {"status": "cancelled", "error": None}},
    ]


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_empty_input_gives_empty_output(projection: oracle.ProjectionName) -> None:
    assert project([], projection) == ([], [])
    assert project([b"", b"  \n", b"\t"], projection) == ([], [])


def test_the_run_buffer_bound() -> None:
    lines = [
        orjson.dumps({"run_id": "r", "index": i, "kind": "text_delta", "timestamp": ts,
                      "text": f"t{i}"})
        for i, ts in [(0, 1.0), (3, 2.0), (5, 3.0), (2, 4.0)]
    ]
    bounded, _ = project(lines, "chunks", buffer_max=1)
    assert [(r["seq"], r["source_index"], r.get("gap")) for r in bounded] == [
        (0, 0, None), (1, None, {"from_index": 1, "to_index": 2}), (2, 3, None),
        (3, None, {"from_index": 4, "to_index": 4}), (4, 5, None),
    ]
    default, _ = project(lines, "chunks")
    assert [r["source_index"] for r in default] == [0, None, 2, 3, None, 5]


def test_readme_example() -> None:
    lines = [
        b'{"run_id":"r1","index":0,"kind":"text_delta","timestamp":1.5,"text":"Hel"}',
        b'{"run_id":"r1","index":2,"kind":"tool_call","timestamp":3,"tool_call":{"id":"c1",'
        b'"name":"search","arguments":{"q":"x"}}}',
        b'{"run_id":"r1","index":1,"kind":"thinking","timestamp":2,"text":"hmm"}',
        b'{"run_id":"r1","index":1,"kind":"thinking","timestamp":2,"text":"hmm"}',
        b"not json",
        b'{"run_id":"r1","index":3,"kind":"done","timestamp":4,"result":{"text":"Hello",'
        b'"duration_ms":123.456,"usage":{"input_tokens":10}}}',
    ]
    envelopes, letters = project(lines, "typed")
    assert [encode(e) for e in envelopes][-3:] == [
        b'{"run_id":"r1","seq":4,"source_index":3,"ts":4.0,"event":{"type":"usage",'
        b'"input_tokens":10,"output_tokens":0}}',
        b'{"run_id":"r1","seq":5,"source_index":3,"ts":4.0,"event":{"type":'
        b'"response_complete","text":"Hello","duration_ms":123.5}}',
        b'{"run_id":"r1","seq":6,"source_index":3,"ts":4.0,"end":{"status":"completed",'
        b'"error":null}}',
    ]
    assert encode(envelopes[3]) == (
        b'{"run_id":"r1","seq":3,"source_index":2,"ts":3.0,"event":{"type":"tool_call_delta",'
        b'"tool_call_id":"c1","args_delta":"{\\"q\\":\\"x\\"}"}}'
    )
    assert letters == [("invalid_json", 5)]


def test_the_oracle_imports_nothing_of_the_implementation() -> None:
    for source in (ROOT / "tests" / "reference").glob("*.py"):
        text = source.read_text()
        for banned in ("symfonic_stream", "pydantic", "orjson"):
            assert f"import {banned}" not in text and f"from {banned}" not in text, source
    probe = (
        "import sys, tests.reference.oracle\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('symfonic_stream', 'pydantic', 'orjson'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# -- (b) the golden run, against the CLI -------------------------------------------------


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_golden_run_matches_the_cli_byte_for_byte(projection: oracle.ProjectionName) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "symfonic_stream", "project", "--projection", projection,
         str(GOLDEN_RUN)],
        capture_output=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    with GOLDEN_RUN.open("rb") as source:
        envelopes, letters = project(source, projection)
    assert letters == []
    assert b"".join(encode(e) + b"\n" for e in envelopes) == done.stdout
    assert [json.loads(line) for line in done.stdout.splitlines()] == envelopes
    shapes = [next(iter(set(e) - {"run_id", "seq", "source_index", "ts"})) for e in envelopes]
    assert shapes.count("gap") == 1 and envelopes[-1]["end"]["status"] == "completed"
    assert len(envelopes) == (17 if projection == "typed" else 13)


# -- (c) differential: the oracle against symfonic_stream.tools.offline.project_lines -----------
#
# Integers are drawn from the 64-bit range: beyond ±(2**63 - 1) both dead-letter the event
# invalid_event (SYMFONIC_MAX_INTEGER), which test_big_integers_are_invalid_in_both and the
# validity differential below (its edge values hold 2**63 and 2**64 - 1) cover; drawn here,
# such integers (a boundary hypothesis likes) would make most generated events invalid.

_INTS = st.integers(-(2**63), 2**63 - 1)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_TEXT = st.text(max_size=8) | st.sampled_from(["", "é", "日本語", "😀", 'a"b\\c\n\t\x00\x7f\u2028'])
_JSON = st.recursive(
    st.none() | st.booleans() | _INTS | _FLOATS | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_EDGE_NUMBERS = st.sampled_from(
    [0, 0.0, -0.0, 3, 2.25, 99.96, 1e-05, 1.5e-07, 1e16, 1e15, 5e-324, 2**53 + 1, 2**63 - 1]
)
_NUMBER = _EDGE_NUMBERS | _FLOATS | st.integers(0, 2**53)
# EXCLUDED INPUT SHAPE ("negative-zero duration"): `result.duration_ms` of -0.0. contract §3
# rounds the duration to 0.1 ms, and round(-0.0, 1) is -0.0 (the oracle writes `-0.0`, as
# the implementation does for -0.01); the implementation treats -0.0 as "no duration" and
# writes `0.0`. Equal as numbers, different bytes. Pinned in
# test_negative_zero_duration_is_where_oracle_and_implementation_part.
_RESULT_DURATION = st.none() | _NUMBER.filter(lambda x: not (x == 0 and math.copysign(1, x) < 0))
_MAYBE_TEXT = st.none() | _TEXT


def _opt(**fields: st.SearchStrategy[Any]) -> dict[str, st.SearchStrategy[Any]]:
    return fields


_TOOL_CALL = st.fixed_dictionaries(
    {"id": _TEXT, "name": _TEXT},
    optional=_opt(arguments=st.none() | st.dictionaries(_TEXT, _JSON, max_size=4),
                  result=_JSON, error=_MAYBE_TEXT, duration_ms=st.none() | _NUMBER,
                  extra=_JSON),
)
_PAYLOAD = st.fixed_dictionaries(
    {}, optional=_opt(questions=st.none() | st.lists(_JSON, max_size=3), note=_JSON)
)
_INTERRUPT = st.fixed_dictionaries(
    {"name": _TEXT, "kind": st.sampled_from(["ask_user", "interrupt"]), "token": _TEXT,
     "interrupt_id": st.text(min_size=1, max_size=4), "expires_at": _NUMBER},
    optional=_opt(payload=_PAYLOAD, tool_call_id=_MAYBE_TEXT, run_id=_MAYBE_TEXT,
                  session_id=_MAYBE_TEXT, resumable=st.booleans()),
)
_USAGE = st.fixed_dictionaries(
    {}, optional=_opt(input_tokens=st.integers(0, 3), output_tokens=st.integers(0, 3),
                      total_tokens=st.integers(0, 9))
)
_RESULT = st.fixed_dictionaries(
    {}, optional=_opt(text=_MAYBE_TEXT, duration_ms=_RESULT_DURATION, usage=_USAGE)
)
_ERROR = st.fixed_dictionaries({"type": _TEXT, "message": _TEXT}, optional=_opt(code=_JSON))
_SCOPE = st.fixed_dictionaries({}, optional=_opt(tenant=_MAYBE_TEXT, principal=_MAYBE_TEXT))
_EXTRAS = st.fixed_dictionaries(
    {}, optional=_opt(root_run_id=_MAYBE_TEXT, session_id=_MAYBE_TEXT, thread_id=_MAYBE_TEXT,
                      scope=st.none() | _SCOPE, future_field=_JSON)
)
_MIDDLE_KINDS = ["text_delta", "thinking", "tool_call", "tool_result", "pause", "ask_user",
                 "interrupt", "telemetry", ""]


@st.composite
def agent_event(draw: st.DrawFn, run_id: str, index: int, kind: str) -> dict[str, Any]:
    """One valid raw event of ``kind`` ("pause": an ask_user/interrupt with an interrupt)."""
    stamp = draw(_NUMBER)
    event: dict[str, Any] = {"run_id": run_id, "index": index, "kind": kind, "timestamp": stamp}
    event.update(draw(_EXTRAS))
    if kind == "pause":
        event["kind"] = draw(st.sampled_from(["ask_user", "interrupt", "telemetry"]))
        event["interrupt"] = draw(_INTERRUPT)
    elif draw(st.integers(0, 9)) == 0:
        event["interrupt"] = draw(st.none() | _INTERRUPT)  # rarely: an interrupt on any kind
    if kind in ("text_delta", "thinking") or draw(st.booleans()):
        event["text"] = draw(_MAYBE_TEXT)
    if kind in ("tool_call", "tool_result") or draw(st.integers(0, 4)) == 0:
        event["tool_call"] = draw(_TOOL_CALL if kind.startswith("tool") else st.none())
        if kind.startswith("tool") and draw(st.integers(0, 5)) == 0:
            event["tool_call"] = None
    if kind == "done":
        event["result"] = draw(st.none() | _RESULT)
    if kind == "error":
        event["error"] = draw(st.none() | _ERROR)
    keys = list(event)
    return {key: event[key] for key in draw(st.permutations(keys))}


@st.composite
def kernel_run(draw: st.DrawFn, run_id: str) -> list[dict[str, Any]]:
    """A run in kernel order: events, maybe a terminal, maybe events after it."""
    kinds = draw(st.lists(st.sampled_from(_MIDDLE_KINDS), max_size=10))
    terminal = draw(st.sampled_from(["done", "error", "cancelled", None]))
    if terminal is not None:
        kinds.append(terminal)
        kinds.extend(draw(st.lists(st.sampled_from(["text_delta", "done"]), max_size=2)))
    return [draw(agent_event(run_id, index, kind)) for index, kind in enumerate(kinds)]


_BAD_LINES = [
    b"not json", b"{", b'{"run_id": NaN}', b"\xff\xfe", b'{"a":1}trailing', b"[1,2]", b"42",
    b"null", b'"text"', b"{'a': 1}", b'{"run_id":"r","index":0,"kind":"x","timestamp":1,}',
    b'{"run_id":"run-a","index":0,"kind":"x","timestamp":1e400}',
    b'{"run_id":"run-a\\udc00","index":0,"kind":"x","timestamp":1}',
    b'\xef\xbb\xbf{"run_id":"run-a","index":0,"kind":"x","timestamp":1}',
]
_ENCODERS: list[Callable[[dict[str, Any]], bytes]] = [
    orjson.dumps,
    lambda e: json.dumps(e).encode(),  # \u escapes, surrogate pairs, ", " and ": "
    lambda e: json.dumps(e, ensure_ascii=False, indent=None).encode(),
    lambda e: b" \t" + orjson.dumps(e) + b" \r",
]


@st.composite
def raw_stream(draw: st.DrawFn) -> list[bytes]:
    """Several runs' raw lines: holes, duplicates, shuffles, bad lines and blank lines."""
    run_ids = draw(st.lists(st.sampled_from(["run-a", "run-b", "ü-run", "r" * 256]),
                            min_size=1, max_size=3, unique=True))
    rng = draw(st.randoms(use_true_random=False))
    delivered: list[tuple[float, dict[str, Any]]] = []
    for run_id in run_ids:
        for position, event in enumerate(draw(kernel_run(run_id))):
            if rng.random() < 0.1:
                continue  # a hole: lost upstream
            for _ in range(2 if rng.random() < 0.15 else 1):
                delivered.append((position + rng.uniform(0, draw(st.sampled_from([0, 3, 50]))),
                                  event))
    delivered.sort(key=lambda pair: pair[0])
    lines = [rng.choice(_ENCODERS)(event) for _, event in delivered]
    for _ in range(draw(st.integers(0, 3))):
        if delivered and rng.random() < 0.5:  # a valid event made invalid by one bad field
            bad = {**rng.choice(delivered)[1], **rng.choice(_BAD_PATCHES)}
            line = orjson.dumps(bad)
        else:
            line = rng.choice([*_BAD_LINES, b"", b"   "])
        lines.insert(rng.randint(0, len(lines)), line)
    return lines


def implementation(
    lines: list[bytes], projection: oracle.ProjectionName, buffer_max: int
) -> tuple[list[bytes], list[tuple[str, int]], Counter[str]]:
    values: list[bytes] = []
    letters: list[tuple[str, int]] = []
    counts: Counter[str] = Counter()
    for released in project_lines(lines, projection, GuardLimits(run_buffer_max=buffer_max)):
        values.extend(output.value or b"" for output in released.outputs)
        letters.extend((d.reason.value, d.record.offset) for d in released.dead_letters)
        counts.update(released.counts)
    return values, letters, counts


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_stream(), st.sampled_from(["typed", "chunks"]), st.sampled_from([1, 2, 3, 1000]))
def test_oracle_and_implementation_agree_on_any_raw_stream(
    lines: list[bytes], projection: oracle.ProjectionName, buffer_max: int
) -> None:
    values, letters, counts = implementation(lines, projection, buffer_max)
    guard = oracle.project_guard(lines, projection, buffer_max)
    # Parsed JSON values first (a readable diff), then the exact bytes of every envelope.
    assert [orjson.loads(value) for value in values] == guard.envelopes
    assert values == [encode(envelope) for envelope in guard.envelopes]
    assert letters == guard.dead_letters
    assert (counts["duplicates"], counts["gaps"], counts["unknown_kind"]) == (
        guard.duplicates, guard.gaps, guard.unknown_kinds,
    )


@settings(max_examples=1500, deadline=None)
@given(
    st.sampled_from([*_MIDDLE_KINDS, "done", "error", "cancelled"]).flatmap(
        lambda kind: agent_event("run-a", 0, kind)
    )
)
def test_oracle_and_implementation_agree_on_any_single_event(event: dict[str, Any]) -> None:
    """One event at index 0: both projections, every field shape, densely (the stream
    test above spreads its examples over the guard)."""
    lines = [rng_free_encoding(event)]
    for projection in ("typed", "chunks"):
        values, letters, _ = implementation(lines, projection, 1000)
        envelopes, dead = project(lines, projection)
        assert [orjson.loads(value) for value in values] == envelopes
        assert values == [encode(envelope) for envelope in envelopes]
        # (an integer past 64 bits in a field makes it invalid_event, in both)
        assert letters == dead and dead in ([], [("invalid_event", 1)])


def rng_free_encoding(event: dict[str, Any]) -> bytes:
    # \u escapes (surrogate pairs included) and ", " / ": " separators: not orjson's bytes.
    return json.dumps(event).encode()


_EDGE_VALUES: list[Any] = [
    None, True, False, 0, -0.0, 0.0, 1, -1, 3.0, 2.25, 99.96, 1e-05, 1e-07, 1e16, 5e-324,
    2**63 - 1, -(2**63), 2**53 + 1, "", "x", "ask_user", 'é😀\n\x00"', [], [1, "a"], {},
    {"k": [None, 1.5]}, {"questions": [{"q": 1}]},
]


def _full_event(kind: str, with_interrupt: bool) -> dict[str, Any]:
    event = raw(
        kind, 0, "run-a", root_run_id="root", session_id="s", thread_id="t",
        scope={"tenant": "acme", "principal": "ana"}, text="hello",
        tool_call=tool_call(arguments={"q": 1}, result={"hits": [1]}, error="e",
                            duration_ms=2.5),
        result={"text": "fin", "duration_ms": 12.34,
                "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}},
        error={"type": "E", "message": "m"},
    )
    if with_interrupt:
        event["interrupt"] = interrupt("interrupt")
    return event


def _variations(event: dict[str, Any]) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every field path of ``event`` (two levels of nesting), replaced by each edge value
    and deleted: one field changed at a time."""
    out: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def visit(path: tuple[str, ...], holder: dict[str, Any]) -> None:
        for name in [*holder, "unknown_field"]:
            for value in [*_EDGE_VALUES, KeyError]:
                changed = json.loads(json.dumps(event))
                target = changed
                for part in path:
                    target = target[part]
                if value is KeyError:
                    target.pop(name, None)
                else:
                    target[name] = copy.deepcopy(value)
                out.append(((*path, name), changed))
            if isinstance(holder.get(name), dict) and len(path) < 2:
                visit((*path, name), holder[name])

    visit((), event)
    return out


def _is_negative_zero(value: Any) -> bool:
    return type(value) is float and value == 0 and math.copysign(1, value) < 0


def test_oracle_and_implementation_agree_on_every_one_field_variation() -> None:
    """Deterministic and dense where hypothesis is sparse: for each kind (with and without
    an interrupt), every field replaced by each edge value or deleted, through validation
    and both projections."""
    cases = 0
    for kind in [*_MIDDLE_KINDS[:4], "ask_user", "interrupt", "done", "error", "cancelled", "x"]:
        for with_interrupt in (False, True):
            for path, event in _variations(_full_event(kind, with_interrupt)):
                duration = event.get("result", {}) if isinstance(event.get("result"), dict) else {}
                if path == ("result", "duration_ms") and _is_negative_zero(duration.get(path[1])):
                    continue  # EXCLUDED INPUT SHAPE "negative-zero duration" (see above)
                line = [orjson.dumps(event)]
                for projection in ("typed", "chunks"):
                    values, letters, _ = implementation(line, projection, 1000)
                    envelopes, dead = project(line, projection)
                    assert (values, letters) == ([encode(e) for e in envelopes], dead), (
                        path, event,
                    )
                cases += 1
    assert cases > 10_000


_TRICKY = st.sampled_from(
    [None, True, False, 0, -1, 1.0, 1.5, -0.0, "", "x", "3", "ask_user", [], {}, [1],
     {"a": 1}, 2**63, 2**64 - 1, "r" * 257, "é" * 256]
) | _JSON
_NESTED = {"tool_call": _TOOL_CALL, "interrupt": _INTERRUPT, "result": _RESULT,
           "error": _ERROR, "scope": _SCOPE}


@st.composite
def mutated_event(draw: st.DrawFn) -> bytes:
    """A valid event with every nested object, then 1-3 fields replaced or deleted."""
    event = draw(agent_event("run-a", draw(st.integers(0, 5)),
                             draw(st.sampled_from([*_MIDDLE_KINDS, "done", "error"]))))
    for name, strategy in _NESTED.items():
        if draw(st.booleans()):
            event[name] = draw(strategy)
    for _ in range(draw(st.integers(1, 3))):
        target: dict[str, Any] = event
        holders: list[dict[str, Any]] = [v for v in event.values() if isinstance(v, dict)]
        if len(holders) > 0 and draw(st.booleans()):
            target = draw(st.sampled_from(holders))
            inner: list[dict[str, Any]] = [v for v in target.values() if isinstance(v, dict)]
            if len(inner) > 0 and draw(st.booleans()):
                target = draw(st.sampled_from(inner))  # result.usage, interrupt.payload
        names = sorted({*target, "questions", "usage", "payload", "id", "index"})
        name = draw(st.sampled_from(names))
        if draw(st.integers(0, 3)) == 0:
            target.pop(name, None)
        else:
            target[name] = copy.deepcopy(draw(_TRICKY))  # never share a sampled {} or []
    return orjson.dumps(event)


def implementation_reason(value: bytes) -> str | None:
    try:
        decode_agent_event(value)
    except DecodeError as rejected:
        return rejected.reason.value
    return None


@settings(max_examples=1000, deadline=None)
@given(mutated_event() | st.binary(max_size=60))
def test_oracle_and_implementation_agree_on_what_is_a_valid_event(value: bytes) -> None:
    assert reason(value) == implementation_reason(value)


def test_big_integers_are_invalid_in_both() -> None:
    """Integers beyond 64 bits (docs/configuration.md, SYMFONIC_MAX_INTEGER) are dead-
    lettered invalid_event by both, wherever they are: orjson would read them as floats."""
    big_index = b'{"run_id":"r","index":18446744073709551616,"kind":"x","timestamp":1}'
    assert (reason(big_index), implementation_reason(big_index)) == ("invalid_event",) * 2
    line = (b'{"run_id":"r","index":0,"kind":"tool_call","timestamp":1,'
            b'"tool_call":{"id":"c","name":"n","arguments":{"n":12345678901234567890123}}}')
    for projection in ("typed", "chunks"):
        values, letters, _ = implementation([line], projection, 1000)
        envelopes, dead = project([line], projection)
        assert values == [] and envelopes == []
        assert letters == dead == [("invalid_event", 1)]


def test_negative_zero_duration_is_where_oracle_and_implementation_part() -> None:
    """The excluded shape, pinned: the contract's rounding keeps -0.0, the implementation
    drops it."""
    line = b'{"run_id":"r","index":0,"kind":"done","timestamp":1,"result":{"duration_ms":-0.0}}'
    values, _, _ = implementation([line], "typed", 1000)
    envelopes, _ = project([line], "typed")
    assert b'"duration_ms":0.0}' in values[0]
    assert b'"duration_ms":-0.0}' in encode(envelopes[0])
    assert orjson.loads(values[0]) == envelopes[0]  # equal as JSON numbers


def test_values_nested_past_the_depth_limit_are_invalid_in_both() -> None:
    """orjson parses up to 1024 levels but writes at most 254: an event nested deeper than
    SYMFONIC_MAX_JSON_DEPTH (64) is dead-lettered when it arrives, by both, and the run's
    next event is still projected (contract §6: a record never stops the consumer)."""
    for levels, accepted in ((62, True), (63, False), (300, False)):  # + event, tool_call
        deep = b"[" * levels + b"]" * levels
        lines = [b'{"run_id":"r","index":0,"kind":"tool_result","timestamp":1,'
                 b'"tool_call":{"id":"a","name":"b","result":' + deep + b"}}",
                 b'{"run_id":"r","index":1,"kind":"done","timestamp":2}']
        values, letters, _ = implementation(lines, "typed", 1000)
        envelopes, dead = project(lines, "typed")
        assert [orjson.loads(value) for value in values] == envelopes
        assert letters == dead == ([] if accepted else [("invalid_event", 1)])


def test_duplicate_keys_are_invalid_in_both() -> None:
    """A second ``run_id`` would silently win in orjson: a key twice is invalid_event."""
    twice = b'{"run_id":"r1","index":0,"kind":"done","timestamp":1,"run_id":"r2"}'
    assert (reason(twice), implementation_reason(twice)) == ("invalid_event",) * 2
    nested = b'{"run_id":"r","index":0,"kind":"x","timestamp":1,"metadata":{"a":1,"a":2}}'
    assert (reason(nested), implementation_reason(nested)) == ("invalid_event",) * 2
    colon_in_a_string = b'{"run_id":"r:1","index":0,"kind":"x","timestamp":1}'
    assert (reason(colon_in_a_string), implementation_reason(colon_in_a_string)) == (None,) * 2


def test_the_differential_strategy_reaches_every_output_shape() -> None:
    """Guards the generator: a run of it must produce gaps, ends of each status, dead
    letters of every offline reason, and events of many types (else (c) proves little)."""
    seen: set[str] = set()

    # 1,000 examples: at 300 a usage event came up twice, too close to none to be a guard.
    @settings(max_examples=1000, deadline=None, database=None, derandomize=True)
    @given(raw_stream(), st.sampled_from([1, 3]))
    def collect(lines: list[bytes], buffer_max: int) -> None:
        for projection in ("typed", "chunks"):
            guard = oracle.project_guard(lines, projection, buffer_max)
            for envelope in guard.envelopes:
                if "event" in envelope:
                    seen.add("event:" + envelope["event"]["type"])
                elif "end" in envelope:
                    seen.add("end:" + envelope["end"]["status"])
                else:
                    seen.add("gap")
            seen.update("dead:" + letter for letter, _ in guard.dead_letters)

    collect()
    wanted = {"gap", "end:completed", "end:error", "end:cancelled", "end:paused",
              "dead:invalid_json", "dead:invalid_event", "dead:run_closed",
              "event:text_delta", "event:tool_call_delta", "event:ask_user", "event:interrupt",
              "event:usage", "event:extension", "event:text", "event:final"}
    assert wanted <= seen, wanted - seen
