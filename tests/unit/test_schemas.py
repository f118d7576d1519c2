"""schemas/ (contract §8): generated from the models, valid, faithful, and not drifted."""

from __future__ import annotations

import copy
import functools
import importlib
import json
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel, TypeAdapter, ValidationError

import symfonic_stream.models
from symfonic_stream.cli import main
from symfonic_stream.cli.schemas import drift
from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.dead_letter import (
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
    DeadLetterReason,
)
from symfonic_stream.models.envelope import (
    ChunkEventRecord,
    EndRecord,
    GapRecord,
    IndexRange,
    RunEnd,
    TypedEventRecord,
)
from symfonic_stream.models.event_types import STREAM_EVENT_TYPES
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import (
    RejectionReason,
    Resume,
    ResumeRejection,
    ResumeRequest,
    Ticket,
)
from symfonic_stream.models.stream_event import (
    STREAM_CHUNK_TYPES,
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
from symfonic_stream.processors.pauses import router
from symfonic_stream.tools.offline import project_lines
from symfonic_stream.tools.schemas import (
    ASYNCAPI_FILE,
    JSON_SCHEMA_DIALECT,
    RECORD_SCHEMAS,
    REGENERATE_HINT,
    SCHEMA_ID_BASE,
    generate,
)
from tests.unit.helpers import interrupt, raw, tool_call

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"
#: The deployment's consumers, each with a changelog and a group of its name.
CONSUMERS = ("typed", "chunks", "pauses", "resumes")
GENERATED = generate()
JSON_FILES = sorted(name for name in GENERATED if name.endswith(".json"))
NAMES = TopicNames("symfonic")


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(GENERATED[name])
    return loaded


@functools.cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(schema(name))


def is_valid(name: str, instance: Any) -> bool:
    return bool(validator(name).is_valid(instance))


@functools.cache
def asyncapi() -> dict[str, Any]:
    """The parsed document (cached: tests read it, never change it)."""
    loaded: dict[str, Any] = yaml.safe_load(GENERATED[ASYNCAPI_FILE])
    return loaded


# -- drift --------------------------------------------------------------------------------


def test_committed_schemas_match_the_models() -> None:
    problems = drift(SCHEMAS_DIR, GENERATED)
    assert not problems, (
        "schemas/ has drifted from the models:\n  "
        + "\n  ".join(problems)
        + f"\nTo fix: {REGENERATE_HINT}."
    )


def test_generation_is_deterministic_and_formatted() -> None:
    again = generate()
    assert again == GENERATED
    for name, text in GENERATED.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), name
        if name.endswith(".json"):
            parsed = json.loads(text)
            assert text == json.dumps(parsed, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_every_record_type_has_its_file() -> None:
    assert set(GENERATED) == {
        "agent-event.json",
        "stream-event.json",
        "stream-chunk.json",
        "stream-events-record.json",
        "stream-chunks-record.json",
        "end-record.json",
        "gap-record.json",
        "ticket.json",
        "resume-request.json",
        "resume.json",
        "resume-rejection.json",
        "claim-request.json",
        "review-ticket.json",
        "dead-letter-headers.json",
        "asyncapi.yaml",
    }


# -- the JSON Schemas themselves ----------------------------------------------------------


@pytest.mark.parametrize("name", JSON_FILES)
def test_every_json_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    loaded = schema(name)
    Draft202012Validator.check_schema(loaded)
    assert loaded["$schema"] == JSON_SCHEMA_DIALECT
    assert loaded["$id"] == SCHEMA_ID_BASE + name
    assert loaded["title"] and loaded["description"]


def test_agent_event_schema_types_match_strict_validation() -> None:
    properties = schema("agent-event.json")["properties"]
    assert properties["index"]["type"] == "integer"
    assert properties["index"]["minimum"] == 0
    assert properties["timestamp"]["type"] == "number"
    assert properties["run_id"] == {**properties["run_id"], "minLength": 1, "maxLength": 256}
    # Forward compatibility: unknown fields are ignored, so the schema allows them.
    assert schema("agent-event.json").get("additionalProperties", True) is True
    assert "kind" in schema("agent-event.json")["required"]


def test_output_records_require_every_field_written_on_the_wire() -> None:
    gap = schema("gap-record.json")
    assert set(gap["required"]) == {"run_id", "seq", "source_index", "ts", "gap"}
    assert gap["properties"]["source_index"]["type"] == "null"
    events = schema("stream-event.json")["$defs"]
    for definition in events.values():
        if "type" in definition.get("properties", {}):
            assert "type" in definition["required"], definition["title"]
    assert "error" in schema("end-record.json")["$defs"]["RunEnd"]["required"]


# -- valid samples, built with the models -------------------------------------------------

_STREAM_EVENTS: list[Any] = [
    ThinkingDeltaEvent(text="hmm"),
    TextDeltaEvent(text="Hello"),
    ToolCallStartEvent(tool_name="search", tool_call_id="call-1"),
    ToolCallDeltaEvent(tool_call_id="call-1", args_delta='{"q":"kafka"}'),
    ToolResultEvent(tool_call_id="call-1", result={"hits": 3}),
    ExtensionEvent(
        name="tool_timing",
        event_id="call-1",
        payload={
            "tool_call_id": "call-1",
            "tool_name": "search",
            "duration_ms": 5.0,
            "is_error": False,
        },
    ),
    UsageEvent(input_tokens=12, output_tokens=3),
    ResponseCompleteEvent(text="Hello", duration_ms=1250.1),
    AskUserEvent(
        questions=[{"question": "Continue?"}],
        token="tok",
        tool_call_id=None,
        interrupt_id="intr-1",
        run_id="run-1",
        session_id=None,
        expires_at=4000.0,
        resumable=True,
    ),
    InterruptEvent(
        name="approval",
        payload={"amount": 10},
        token="tok",
        tool_call_id="call-9",
        interrupt_id="intr-2",
        run_id=None,
        session_id="sess-1",
        expires_at=4000,
        resumable=False,
    ),
]


def _dump(model: Any) -> Any:
    return orjson.loads(orjson.dumps(model.model_dump(mode="json")))


def test_samples_cover_every_stream_event_type() -> None:
    assert [_dump(event)["type"] for event in _STREAM_EVENTS] == list(STREAM_EVENT_TYPES)


@pytest.mark.parametrize("event", _STREAM_EVENTS, ids=lambda event: event.type)
def test_every_stream_event_type_validates_in_its_envelope(event: Any) -> None:
    record = TypedEventRecord(run_id="run-1", seq=4, source_index=7, ts=100.5, event=event)
    assert is_valid("stream-event.json", _dump(event))
    assert is_valid("stream-events-record.json", _dump(record))
    # …and not on the other topic: a StreamEvent is not a StreamChunk.
    assert not is_valid("stream-chunks-record.json", _dump(record))


@pytest.mark.parametrize("chunk_type", STREAM_CHUNK_TYPES)
def test_every_chunk_type_validates_in_its_envelope(chunk_type: str) -> None:
    chunk = StreamChunk.model_validate({"type": chunk_type, "content": "x", "name": None})
    record = ChunkEventRecord(run_id="run-1", seq=0, source_index=0, ts=1.0, event=chunk)
    assert is_valid("stream-chunk.json", _dump(chunk))
    assert is_valid("stream-chunks-record.json", _dump(record))


@pytest.mark.parametrize("status", ["completed", "error", "cancelled", "paused"])
def test_end_records_validate_on_both_topics(status: str) -> None:
    error = {"type": "Boom", "message": "it broke"} if status == "error" else None
    run_end = RunEnd.model_validate({"status": status, "error": error})
    end = _dump(EndRecord(run_id="r", seq=9, source_index=3, ts=2.0, end=run_end))
    for name in ("end-record.json", "stream-events-record.json", "stream-chunks-record.json"):
        assert is_valid(name, end), name


def test_gap_records_validate_on_both_topics() -> None:
    gap = _dump(GapRecord(run_id="r", seq=2, ts=3.0, gap=IndexRange(from_index=2, to_index=4)))
    assert gap["source_index"] is None
    for name in ("gap-record.json", "stream-events-record.json", "stream-chunks-record.json"):
        assert is_valid(name, gap), name


def _ticket(**overrides: Any) -> dict[str, Any]:
    ticket = Ticket(
        ticket_id="intr-1",
        queue="default",
        kind="ask_user",
        name="ask_user",
        questions=["Continue?"],
        payload={"questions": ["Continue?"]},
        token="tok",
        run_id="run-1",
        root_run_id=None,
        session_id="sess-1",
        thread_id=None,
        tool_call_id="call-9",
        tenant="acme",
        principal=None,
        expires_at=4000.0,
        resumable=True,
        routed_at=3000.0,
        source="symfonic.agent-events/0/5",
    )
    return {**_dump(ticket), **overrides}


def test_pause_records_validate() -> None:
    assert is_valid("ticket.json", _ticket())
    assert is_valid("ticket.json", _ticket(kind="interrupt", questions=None))
    request = ResumeRequest(ticket_id="intr-1", token="tok", answer={"ok": True})
    assert is_valid("resume-request.json", _dump(request))
    assert is_valid("resume-request.json", {"ticket_id": "t", "token": "x", "answer": None})
    resume = Resume(
        ticket_id="intr-1",
        run_id="run-1",
        tool_call_id=None,
        interrupt_id="intr-1",
        answer="yes",
        responder="alice",
        answered_at=3100.0,
    )
    assert is_valid("resume.json", _dump(resume))
    for reason in RejectionReason:
        rejection = ResumeRejection(
            ticket_id="intr-1", reason=reason, detail="no", responder=None, rejected_at=1.0
        )
        assert is_valid("resume-rejection.json", _dump(rejection)), reason


def _headers(**overrides: str) -> dict[str, str]:
    headers = {
        HEADER_REASON: "invalid_json",
        HEADER_DETAIL: "unexpected character",
        HEADER_SOURCE: "symfonic.agent-events/11/42",
        HEADER_CONSUMER: "symfonic-typed",
        "traceparent": "00-abc-def-01",
    }
    headers.update(overrides)
    return headers


def test_dead_letter_headers() -> None:
    for reason in DeadLetterReason:
        assert is_valid("dead-letter-headers.json", _headers(**{HEADER_REASON: reason.value}))
    assert schema("dead-letter-headers.json")["$defs"]["DeadLetterReason"]["enum"] == [
        reason.value for reason in DeadLetterReason
    ]
    assert not is_valid("dead-letter-headers.json", _headers(**{HEADER_REASON: "bored"}))
    assert not is_valid("dead-letter-headers.json", _headers(**{HEADER_SOURCE: "no-offsets"}))
    assert not is_valid("dead-letter-headers.json", _headers(**{HEADER_DETAIL: "x" * 1025}))
    missing = _headers()
    del missing[HEADER_CONSUMER]
    assert not is_valid("dead-letter-headers.json", missing)


# -- what the projectors really write validates -------------------------------------------


def _run_lines() -> list[bytes]:
    """Three runs covering every kind, a pause, an error end and a gap."""
    events = [
        raw("thinking", 0, text="let me see"),
        raw("text_delta", 1, text="Hello"),
        raw("tool_call", 2, tool_call=tool_call(arguments={"q": "kafka", "n": 2})),
        raw("tool_result", 3, tool_call=tool_call(result={"hits": [1, 2]}, duration_ms=4.2)),
        raw("tool_call", 4, tool_call=tool_call(id="call-2", name="fail")),
        raw("tool_result", 5, tool_call=tool_call(id="call-2", name="fail", error="boom")),
        raw("ask_user", 6, interrupt=interrupt("ask_user")),
        raw("interrupt", 7, interrupt=interrupt("interrupt", interrupt_id="intr-2")),
        raw("mystery", 8),
        raw(
            "done",
            9,
            result={
                "text": "Hi",
                "duration_ms": 12.345,
                "usage": {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12},
            },
        ),
        raw("text_delta", 0, run_id="run-2", text="x"),
        raw("error", 1, run_id="run-2", error={"type": "Boom", "message": "bad"}),
        raw("text_delta", 0, run_id="run-3", text="a"),
        raw("text_delta", 3, run_id="run-3", text="d"),  # indexes 1 and 2 never come: a gap
        raw("cancelled", 4, run_id="run-3"),
    ]
    return [orjson.dumps(event) for event in events]


def _project(projection: str) -> Iterator[dict[str, Any]]:
    for released in project_lines(_run_lines(), projection):  # type: ignore[arg-type]
        assert not released.dead_letters
        for output in released.outputs:
            yield orjson.loads(output.value or b"")


@pytest.mark.parametrize(
    ("projection", "name"),
    [("typed", "stream-events-record.json"), ("chunks", "stream-chunks-record.json")],
)
def test_projector_output_validates_against_its_topic_schema(projection: str, name: str) -> None:
    check = validator(name)
    records = list(_project(projection))
    for record in records:
        errors = [error.message for error in check.iter_errors(record)]
        assert not errors, (record, errors)
    kinds = {next(iter(set(record) & {"event", "end", "gap"})) for record in records}
    assert kinds == {"event", "end", "gap"}
    if projection == "typed":
        types = {record["event"]["type"] for record in records if "event" in record}
        assert types == set(STREAM_EVENT_TYPES)


# -- invalid samples ----------------------------------------------------------------------

_VALID_EVENT = raw("text_delta", 3, text="hi")


def _without(event: dict[str, Any], field: str) -> dict[str, Any]:
    return {key: value for key, value in event.items() if key != field}


_INVALID_EVENTS = {
    "index as a string": {**_VALID_EVENT, "index": "3"},
    "index as a fraction": {**_VALID_EVENT, "index": 1.5},
    "index as a boolean": {**_VALID_EVENT, "index": True},
    "negative index": {**_VALID_EVENT, "index": -1},
    "missing run_id": _without(_VALID_EVENT, "run_id"),
    "missing index": _without(_VALID_EVENT, "index"),
    "missing kind": _without(_VALID_EVENT, "kind"),
    "missing timestamp": _without(_VALID_EVENT, "timestamp"),
    "empty run_id": {**_VALID_EVENT, "run_id": ""},
    "run_id too long": {**_VALID_EVENT, "run_id": "r" * 257},
    "run_id a number": {**_VALID_EVENT, "run_id": 7},
    "timestamp as a string": {**_VALID_EVENT, "timestamp": "100.0"},
    "timestamp as a boolean": {**_VALID_EVENT, "timestamp": False},
    "text a number": {**_VALID_EVENT, "text": 5},
    "scope not an object": {**_VALID_EVENT, "scope": "acme"},
    "tool_call without id": {**_VALID_EVENT, "tool_call": {"name": "search"}},
    "tool_call arguments a list": {
        **_VALID_EVENT,
        "tool_call": tool_call(arguments=[1, 2]),
    },
    "usage tokens as a fraction": {
        **_VALID_EVENT,
        "kind": "done",
        "result": {"usage": {"input_tokens": 1.5}},
    },
    "interrupt of an unknown kind": {**_VALID_EVENT, "interrupt": interrupt("pause")},
    "interrupt with an empty id": {**_VALID_EVENT, "interrupt": interrupt(interrupt_id="")},
    "interrupt resumable a string": {**_VALID_EVENT, "interrupt": interrupt(resumable="yes")},
    "ask_user questions not a list": {
        **_VALID_EVENT,
        "kind": "ask_user",
        "interrupt": interrupt(payload={"questions": "Continue?"}),
    },
    "error without a message": {**_VALID_EVENT, "kind": "error", "error": {"type": "Boom"}},
}

_VALID_EVENTS = {
    "minimal": _VALID_EVENT,
    "integer timestamp": {**_VALID_EVENT, "timestamp": 100},
    "unknown kind": {**_VALID_EVENT, "kind": "telepathy"},
    "unknown extra field": {**_VALID_EVENT, "kernel_version": "9", "scope": {"tenant": "a"}},
    "every optional field null": {
        **_VALID_EVENT,
        **dict.fromkeys(
            [
                "root_run_id",
                "session_id",
                "thread_id",
                "scope",
                "text",
                "tool_call",
                "interrupt",
                "result",
                "error",
            ]
        ),
    },
    "tool call": raw("tool_call", 0, tool_call=tool_call(arguments={"q": 1}, duration_ms=3)),
    "ask_user": raw("ask_user", 0, interrupt=interrupt()),
    "ask_user with null questions": raw(
        "ask_user", 0, interrupt=interrupt(payload={"questions": None})
    ),
    "questions not a list outside ask_user": raw(
        "interrupt", 0, interrupt=interrupt("interrupt", payload={"questions": "free text"})
    ),
    "done": raw("done", 0, result={"text": None, "usage": {"total_tokens": 4}}),
}


def _pydantic_accepts(event: dict[str, Any]) -> bool:
    try:
        AgentEvent.model_validate(event)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("case", sorted(_INVALID_EVENTS))
def test_invalid_agent_events_fail_the_schema_and_the_model(case: str) -> None:
    event = _INVALID_EVENTS[case]
    assert not is_valid("agent-event.json", event)
    assert not _pydantic_accepts(event)


@pytest.mark.parametrize("case", sorted(_VALID_EVENTS))
def test_valid_agent_events_pass_the_schema_and_the_model(case: str) -> None:
    event = _VALID_EVENTS[case]
    assert is_valid("agent-event.json", event)
    assert _pydantic_accepts(event)


def test_an_integral_float_index_is_the_one_known_difference() -> None:
    # JSON Schema has one number type: 3.0 *is* the integer 3 to a schema validator, while
    # the decoder sees a float and rejects it (strict). Nothing a schema can say closes this.
    event = {**_VALID_EVENT, "index": 3.0}
    assert is_valid("agent-event.json", event)
    assert not _pydantic_accepts(event)


_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer())
    | st.text(max_size=5)
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
_FULL_EVENT = raw(
    "ask_user",
    1,
    root_run_id="root",
    session_id="s",
    thread_id="t",
    scope={"tenant": "acme", "principal": "bob"},
    text="hi",
    tool_call=tool_call(arguments={"a": 1}, result=[1], error="e", duration_ms=1.5),
    interrupt=interrupt(),
    result={
        "text": "ok",
        "duration_ms": 2.5,
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    },
    error={"type": "Boom", "message": "bad"},
)


def _paths(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from _paths(inner, (*prefix, key))


_EVENT_PATHS = sorted(_paths(_FULL_EVENT))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(_EVENT_PATHS), st.none() | st.just("<delete>") | _JSON_VALUES),
        min_size=1,
        max_size=3,
    )
)
def test_schema_and_model_agree_on_agent_events(
    changes: list[tuple[tuple[str, ...], Any]],
) -> None:
    """Differential: the schema accepts exactly what the strict model accepts."""
    event = copy.deepcopy(_FULL_EVENT)
    for path, value in changes:
        parent: Any = event
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if value == "<delete>":
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value
    assert is_valid("agent-event.json", event) == _pydantic_accepts(event), event


def _typed(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = _dump(
        TypedEventRecord(
            run_id="run-1", seq=0, source_index=0, ts=1.0, event=TextDeltaEvent(text="a")
        )
    )
    record.update(overrides)
    return record


@pytest.mark.parametrize(
    ("case", "record"),
    [
        ("both event and end", _typed(end={"status": "completed", "error": None})),
        ("both event and gap", _typed(gap={"from_index": 0, "to_index": 1})),
        ("neither event nor end", {k: v for k, v in _typed().items() if k != "event"}),
        ("unknown event type", _typed(event={"type": "telepathy", "text": "a"})),
        ("event without its type", _typed(event={"text": "a"})),
        ("extra field in the event", _typed(event={"type": "text_delta", "text": "a", "x": 1})),
        ("seq negative", _typed(seq=-1)),
        ("seq a string", _typed(seq="0")),
        ("missing ts", {k: v for k, v in _typed().items() if k != "ts"}),
        ("event null", {**_typed(), "event": None}),
        (
            "gap with a source_index",
            {
                "run_id": "r",
                "seq": 0,
                "source_index": 3,
                "ts": 1.0,
                "gap": {"from_index": 1, "to_index": 2},
            },
        ),
        (
            "end with an unknown status",
            {
                "run_id": "r",
                "seq": 0,
                "source_index": 3,
                "ts": 1.0,
                "end": {"status": "exploded", "error": None},
            },
        ),
        (
            "end without error",
            {
                "run_id": "r",
                "seq": 0,
                "source_index": 3,
                "ts": 1.0,
                "end": {"status": "paused"},
            },
        ),
        (
            "a chunk on the typed topic",
            _typed(event={"type": "text", "content": "a", "name": None}),
        ),
    ],
)
def test_invalid_stream_event_records(case: str, record: dict[str, Any]) -> None:
    assert not is_valid("stream-events-record.json", record), case


def test_invalid_pause_records() -> None:
    assert not is_valid("ticket.json", _ticket(kind="pause"))
    assert not is_valid("ticket.json", _ticket(expires_at="soon"))
    assert not is_valid("ticket.json", {k: v for k, v in _ticket().items() if k != "token"})
    assert not is_valid("ticket.json", _ticket(extra="field"))
    assert not is_valid("resume-request.json", {"ticket_id": "", "token": "t", "answer": 1})
    assert not is_valid("resume-request.json", {"ticket_id": "t", "answer": 1})
    assert not is_valid("resume-request.json", {"ticket_id": "t", "token": 5, "answer": 1})
    rejection = {
        "ticket_id": "t",
        "reason": "bored",
        "detail": "",
        "responder": None,
        "rejected_at": 1.0,
    }
    assert not is_valid("resume-rejection.json", rejection)
    assert not is_valid("resume.json", {"ticket_id": "t"})


# -- every schema describes JSON objects, as its models do --------------------------------
#
# Each file is checked against behaviour, not against how it was built: its top level only
# admits JSON objects; every object it defines forbids unknown fields exactly when the
# model of that name does (``extra="forbid"``: additionalProperties false; the models that
# ignore them for forward compatibility: not false); and one known-good and one known-bad
# instance per record type are accepted and refused alike by the schema and the model.


def _all_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model in symfonic_stream.models, by class name (its schema title)."""
    found: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(symfonic_stream.models.__path__):
        module = importlib.import_module(f"symfonic_stream.models.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel:
                known = found.setdefault(value.__name__, value)
                assert known is value, f"two models named {value.__name__}: titles are ambiguous"
    return found


MODELS = _all_models()
TARGETS = {spec.filename: spec.target for spec in RECORD_SCHEMAS}


def _forbids_extra(model: type[BaseModel]) -> bool:
    return model.model_config.get("extra") == "forbid"


def _resolve_local(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/$defs/"), ref
    resolved: dict[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
    return resolved


def _top_alternatives(loaded: dict[str, Any]) -> list[dict[str, Any]]:
    """What an instance of the file is: the top level itself, or each branch of its union."""
    branches = loaded.get("oneOf") or loaded.get("anyOf")
    if branches is None:
        return [loaded]
    return [_resolve_local(loaded, branch) for branch in branches]


def _accepts(name: str, instance: Any) -> bool:
    """Whether the file's model accepts ``instance`` (its validation, JSON input)."""
    try:
        TypeAdapter(TARGETS[name]).validate_json(orjson.dumps(instance))
    except ValidationError:
        return False
    return True


def _known_instances() -> dict[str, tuple[Any, Any]]:
    """One known-good and one known-bad instance of every JSON Schema file."""
    chunk = StreamChunk.model_validate({"type": "text", "content": "x", "name": None})
    end = _dump(
        EndRecord(run_id="r", seq=9, source_index=3, ts=2.0,
                  end=RunEnd.model_validate({"status": "completed", "error": None}))
    )
    gap = _dump(GapRecord(run_id="r", seq=2, ts=3.0, gap=IndexRange(from_index=2, to_index=4)))
    chunk_record = _dump(ChunkEventRecord(run_id="r", seq=0, source_index=0, ts=1.0, event=chunk))
    request = _dump(ResumeRequest(ticket_id="intr-1", token="tok", answer={"ok": True}))
    resume = _dump(Resume(ticket_id="intr-1", run_id="run-1", tool_call_id=None,
                          interrupt_id="intr-1", answer="yes", responder="alice",
                          answered_at=3100.0))
    rejection = _dump(ResumeRejection(ticket_id="intr-1", reason=RejectionReason.BAD_TOKEN,
                                      detail="no", responder=None, rejected_at=1.0))
    claim = {"action": "claim", "ticket_id": "intr-1", "token": "tok", "responder": "ana"}
    review = {"ticket": _ticket(), "claim": {"by": "ana", "until": 9.0}, "escalated": None,
              "answered": None, "history": [{"at": 1.0, "event": "routed", "by": None,
                                             "request": None, "reason": None, "detail": None}]}
    return {
        "agent-event.json": (_VALID_EVENT, {**_VALID_EVENT, "index": "3"}),
        "stream-event.json": (_dump(TextDeltaEvent(text="a")), {"type": "text_delta"}),
        "stream-chunk.json": (_dump(chunk), {**_dump(chunk), "content": 5}),
        "stream-events-record.json": (_typed(), _typed(seq=-1)),
        "stream-chunks-record.json": (chunk_record, _typed()),  # a typed event: wrong topic
        "end-record.json": (end, {**end, "end": {"status": "exploded", "error": None}}),
        "gap-record.json": (gap, {**gap, "source_index": 3}),
        "ticket.json": (_ticket(), _ticket(kind="pause")),
        "resume-request.json": (request, {k: v for k, v in request.items() if k != "token"}),
        "resume.json": (resume, {"ticket_id": "t"}),
        "resume-rejection.json": (rejection, {**rejection, "reason": "bored"}),
        "claim-request.json": (claim, {**claim, "action": "steal"}),
        "review-ticket.json": (review, {**review, "history": [{"at": 1.0, "event": "won"}]}),
        "dead-letter-headers.json": (_headers(), _headers(**{HEADER_REASON: "bored"})),
    }


def test_every_json_schema_has_a_known_good_and_a_known_bad_instance() -> None:
    assert set(_known_instances()) == set(JSON_FILES)
    assert set(TARGETS) == set(JSON_FILES) - {"dead-letter-headers.json"}


@pytest.mark.parametrize("name", JSON_FILES)
def test_every_json_schema_admits_only_objects(name: str) -> None:
    loaded = schema(name)
    alternatives = _top_alternatives(loaded)
    assert alternatives and all(a.get("type") == "object" for a in alternatives), alternatives
    good, _ = _known_instances()[name]
    for not_an_object in ([good], "text", 1, None, True):
        assert not is_valid(name, not_an_object), not_an_object


@pytest.mark.parametrize("name", JSON_FILES)
def test_every_object_schema_forbids_unknown_fields_as_its_model_does(name: str) -> None:
    loaded = schema(name)
    objects = [loaded] if loaded.get("type") == "object" else []
    objects += [d for d in loaded.get("$defs", {}).values() if d.get("type") == "object"]
    assert objects
    for definition in objects:
        title = definition["title"]
        if name == "dead-letter-headers.json":
            # No model: the original record's headers stay beside the four added ones.
            assert definition["additionalProperties"] is True
            continue
        target = TARGETS[name] if definition is loaded else None
        is_model = isinstance(target, type) and issubclass(target, BaseModel)
        model = target if is_model else MODELS.get(title)
        assert model is not None, f"{name}: {title} names no model"
        closed = definition.get("additionalProperties", True) is False
        assert closed == _forbids_extra(model), (name, title, model.model_config)


@pytest.mark.parametrize("name", JSON_FILES)
def test_schema_and_model_agree_on_a_known_good_and_a_known_bad_instance(name: str) -> None:
    good, bad = _known_instances()[name]
    assert is_valid(name, good)
    assert not is_valid(name, bad)
    with_unknown = {**good, "x-unknown-field": 1}
    if name == "dead-letter-headers.json":
        assert is_valid(name, with_unknown)  # any other header is the original record's
        return
    assert _accepts(name, good)
    assert not _accepts(name, bad)
    # An unknown field: refused by both, or (read from outside, forward compatible) by none.
    assert is_valid(name, with_unknown) == _accepts(name, with_unknown)
    parsed = TypeAdapter(TARGETS[name]).validate_json(orjson.dumps(good))
    assert is_valid(name, with_unknown) != _forbids_extra(type(parsed))


# -- AsyncAPI -----------------------------------------------------------------------------


def test_asyncapi_is_version_3_with_a_local_kafka_server() -> None:
    doc = asyncapi()
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] and doc["info"]["version"]
    assert doc["servers"]["local"] == {
        **doc["servers"]["local"],
        "host": "127.0.0.1:9092",
        "protocol": "kafka",
    }


def test_asyncapi_names_every_topic() -> None:
    addresses = {channel["address"] for channel in asyncapi()["channels"].values()}
    for topic in (
        NAMES.agent_events,
        NAMES.stream_events,
        NAMES.stream_chunks,
        NAMES.dead_letter,
        NAMES.resume_requests,
        NAMES.resumes,
        NAMES.resume_rejections,
        NAMES.expired_queue,
        "symfonic.human.{queue}",
        "symfonic.human.{tenant}.{queue}",
        *(NAMES.changelog(consumer) for consumer in CONSUMERS),
    ):
        assert topic in addresses, topic


def test_asyncapi_channel_parameters_match_their_addresses() -> None:
    for channel_id, channel in asyncapi()["channels"].items():
        placeholders = set(re.findall(r"{([^}]+)}", channel["address"]))
        assert placeholders == set(channel.get("parameters", {})), channel_id


def _refs(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield where, value
            else:
                yield from _refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for position, value in enumerate(node):
            yield from _refs(value, f"{where}/{position}")


def _resolve(document: Any, pointer: str) -> Any:
    node = document
    for part in pointer.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _load(ref: str) -> Any:
    """What a reference of the AsyncAPI document points at (file beside it, or inside it)."""
    target, _, fragment = ref.partition("#")
    document: Any = asyncapi() if not target else json.loads(GENERATED[target.removeprefix("./")])
    return _resolve(document, fragment) if fragment else document


def test_every_asyncapi_ref_resolves() -> None:
    refs = list(_refs(asyncapi()))
    assert refs
    for where, ref in refs:
        target = ref.partition("#")[0]
        if target:
            assert target.startswith("./") and target[2:] in GENERATED, (where, ref)
            assert (SCHEMAS_DIR / target[2:]).is_file() or target[2:] in GENERATED
        try:
            _load(ref)
        except (KeyError, IndexError, ValueError) as exc:
            pytest.fail(f"{where}: $ref {ref} does not resolve ({exc!r})")


def test_asyncapi_operations_use_their_channel_messages() -> None:
    doc = asyncapi()
    for op_id, operation in doc["operations"].items():
        assert operation["action"] in {"send", "receive"}, op_id
        channel_ref = operation["channel"]["$ref"]
        assert channel_ref.startswith("#/channels/"), op_id
        for message in operation["messages"]:
            assert message["$ref"].startswith(channel_ref + "/messages/"), op_id


def test_every_consumer_group_receives_with_its_group_id() -> None:
    operations = asyncapi()["operations"].values()
    groups = {
        operation["bindings"]["kafka"]["groupId"]["enum"][0]: operation
        for operation in operations
        if "bindings" in operation
    }
    assert set(groups) == {NAMES.group(consumer) for consumer in (*CONSUMERS, "resume-intake")}
    for operation in groups.values():
        assert operation["action"] == "receive"
    assert groups["symfonic-resumes"]["channel"]["$ref"] == "#/channels/pauseRegistrations"
    intake = groups["symfonic-resume-intake"]
    assert intake["channel"]["$ref"] == "#/channels/resumeRequests"
    for consumer in ("symfonic-typed", "symfonic-chunks", "symfonic-pauses"):
        assert groups[consumer]["channel"]["$ref"] == "#/channels/agentEvents"


def test_every_message_has_a_kafka_key_and_a_payload_or_headers_schema() -> None:
    doc = asyncapi()
    for message_id, message in doc["components"]["messages"].items():
        key = message["bindings"]["kafka"]["key"]
        assert key["type"] == "string", message_id
        if message_id not in {"deadLetter", "stateChange"}:
            assert message["payload"]["schema"]["$ref"].endswith(".json"), message_id
    dead_letter = doc["components"]["messages"]["deadLetter"]
    assert dead_letter["headers"]["schema"]["$ref"] == "./dead-letter-headers.json"


def _message_schema(part: dict[str, Any]) -> Any:
    """A message's payload or headers schema: a referenced file, or inline."""
    return _load(part["schema"]["$ref"]) if "schemaFormat" in part else part


def test_asyncapi_examples_validate_against_their_schemas() -> None:
    checked = 0
    for message_id, message in asyncapi()["components"]["messages"].items():
        for example in message.get("examples", []):
            for part in ("payload", "headers"):
                if part in example:
                    target = Draft202012Validator(_message_schema(message[part]))
                    errors = [error.message for error in target.iter_errors(example[part])]
                    assert not errors, (message_id, example.get("name"), errors)
                    checked += 1
    assert checked >= 12


def test_the_pause_routers_tickets_validate() -> None:
    for kind in ("ask_user", "interrupt"):
        event = AgentEvent.model_validate(
            raw(kind, 4, interrupt=interrupt(kind), scope={"tenant": "acme"})
        )
        assert event.interrupt is not None
        ticket = router.build_ticket(event, event.interrupt, "default", 3000.0, "t/0/4",
                                     event.interrupt.expires_at)
        errors = [
            e.message
            for e in validator("ticket.json").iter_errors(orjson.loads(orjson.dumps(ticket)))
        ]
        assert not errors, (kind, errors)


# -- the command --------------------------------------------------------------------------


def test_generate_then_check(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "schemas"
    result = runner.invoke(main, ["schemas", "generate", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert {path.name for path in out.iterdir()} == set(GENERATED)
    for name, text in GENERATED.items():
        assert (out / name).read_text(encoding="utf-8") == text
    result = runner.invoke(main, ["schemas", "check", "--dir", str(out)])
    assert result.exit_code == 0, result.output


def test_check_lists_drifted_files_and_exits_1(tmp_path: Path) -> None:
    runner = CliRunner()
    runner.invoke(main, ["schemas", "generate", "--out", str(tmp_path)])
    (tmp_path / "ticket.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "gap-record.json").unlink()
    (tmp_path / "old-record.json").write_text("{}\n", encoding="utf-8")
    result = runner.invoke(main, ["schemas", "check", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "ticket.json: differs" in result.output
    assert "gap-record.json: missing" in result.output
    assert "old-record.json: not generated" in result.output
    assert "agent-event.json" not in result.output
    assert "symfonic-stream schemas generate" in result.output
    # generate repairs what it owns and leaves the stale file alone, with a warning.
    result = runner.invoke(main, ["schemas", "generate", "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert "old-record.json" in result.output
    assert (tmp_path / "old-record.json").exists()
    assert drift(tmp_path, GENERATED) == ["old-record.json: not generated any more (stale)"]
