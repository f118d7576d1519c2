"""A ticket's response_schema is untrusted: what answer_schema refuses, and what it keeps.

Hostile schemas are refused by kind (outside refs, size, depth, width, patterns RE2 cannot
run, work past the CPU budget) and never make the validator read, fetch or show anything;
ordinary schemas decide as jsonschema does, and a refusal names where and which keyword,
never the answer. Outcomes only: no timing is asserted (test_answer_bounds.py holds the
bounds of time and memory with a clock of its own and tracemalloc; what a check costs is
bench/answers.py's).
"""

from __future__ import annotations

import itertools
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import Draft202012Validator

from bench.answers import CASES
from symfonic_stream.processors.pauses.answer_schema import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_PATTERNS,
    NOWHERE,
    OUTSIDE,
    TOO_LONG,
    answer_problem,
    schema_problem,
)


def checked(answer: Any, schema: dict[str, Any] | None) -> str | None:
    """What the validator does: the schema checked (once, at registration), then the
    answer against it."""
    return (schema_problem(schema) if schema is not None else None) or answer_problem(
        answer, schema
    )


SECRET = "s3cr3t-contents-of-the-file"
#: The machine's CPU clock, for the one test whose verdict needs the budget spent.
THREAD_TIME = time.thread_time


@pytest.fixture(autouse=True)
def cpu_standing_still(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks' CPU clock stands still: no verdict here depends on how fast the machine
    is (issue 45: an ordinary schema was refused as taking too long on a loaded one). The
    budget's own tests drive it with clocks of their own (test_answer_bounds.py)."""
    monkeypatch.setattr(time, "thread_time", lambda: 0.0)


@pytest.fixture(autouse=True)
def no_retrieval(monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonschema's default retriever opens URLs (file: too) with urlopen: never here."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"urlopen called: {args!r}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A local TCP port that records whether anything connected to it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def connected(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def url_of(server: socket.socket, path: str = "/schema.json") -> str:
    return f"http://127.0.0.1:{server.getsockname()[1]}{path}"


APPROVAL = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "answer", "problem"),
    [
        (APPROVAL, {"approved": True}, None),
        (APPROVAL, {"approved": "yes"}, 'approved: fails \'type\': "boolean"'),
        (APPROVAL, {}, "answer: fails 'required': [\"approved\"]"),
        (APPROVAL, {"approved": True, "x": 1}, "answer: fails 'additionalProperties': false"),
        ({"enum": ["red", "green"]}, "green", None),
        ({"enum": ["red", "green"]}, "blue", 'answer: fails \'enum\': ["red","green"]'),
        ({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}, 3, None),
        ({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}, "3",
         'answer: fails \'type\': "integer"'),
        ({"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "$ref": "#num"}, "3", "answer:"),
        (
            {"$id": "https://tickets.example.test/a", "$ref": "b",
             "$defs": {"b": {"$id": "b", "type": "integer"}}},
            "3",
            'answer: fails \'type\': "integer"',
        ),
        ({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, "abc-12", None),
        ({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, "abc-1",
         'answer: fails \'pattern\': "^[a-z]+-[0-9]{2}$"'),
        (
            {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
            {"x-a": 1},
            None,
        ),
        (
            {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
            {"x-a": "one"},
            'x-a: fails \'type\': "integer"',
        ),
        (
            {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
            {"x-a": 1, "b": 2},
            "answer: fails 'additionalProperties': false",
        ),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"}, 1, None),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 3}, 4,
         "answer: fails 'maximum': 3"),
        ({"unevaluatedProperties": False, "properties": {"a": {}}}, {"a": 1}, None),
        ({"unevaluatedProperties": False, "properties": {"a": {}}}, {"b": 1},
         "answer: fails 'unevaluatedProperties': false"),
        ({"type": "array", "uniqueItems": True}, list(range(5000)), None),
        ({"type": "array", "uniqueItems": True}, [*range(5000), 7],
         "answer: fails 'uniqueItems': true"),
        ({"type": "array", "uniqueItems": True}, [{"n": n} for n in range(5000)], None),
        ({"anyOf": [{"type": "string"}, False]}, 1, "answer: fails 'anyOf': [{\"type\""),
        ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, 1, "answer: fails 'oneOf': "),
        ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, -1, None),
        ({"allOf": [False]}, 1, "answer: fails the schema false"),
    ],
)
def test_ordinary_schemas_decide_as_before(schema: Any, answer: Any,
                                           problem: str | None) -> None:
    found = checked(answer, schema)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_no_schema_takes_any_answer() -> None:
    assert checked({"anything": [1, 2]}, None) is None


def test_an_invalid_schema_is_refused_as_such() -> None:
    assert checked(1, {"type": "objekt"}) == (
        "the ticket's response_schema is not a valid JSON Schema: type: fails 'anyOf'"
    )


def test_a_file_ref_is_refused_and_the_file_never_shown(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(orjson.dumps({"const": SECRET}).decode())
    uri = secret.as_uri()
    # The second hides the URI as an $id in data, so only the registry stands in the way.
    for schema in ({"$ref": uri}, {"properties": {"x": {"const": {"$id": uri}}},
                                   "anyOf": [{"$ref": uri}]}):
        reason = checked(SECRET, schema)
        assert reason == OUTSIDE
        assert SECRET not in reason and "secret" not in reason


def test_an_http_ref_is_refused_without_connecting(listener: socket.socket) -> None:
    url = url_of(listener)
    for schema in ({"$ref": url}, {"properties": {"x": {"const": {"$id": url}}},
                                   "anyOf": [{"$ref": url}]},
                   {"properties": {"a": {"$ref": url + "#/x"}}}):
        assert checked({"a": 1}, schema) == OUTSIDE
    assert not connected(listener)


def test_an_unknown_schema_dialect_is_refused_without_connecting(
    listener: socket.socket,
) -> None:
    reason = checked(1, {"$schema": url_of(listener), "type": "integer"})
    assert reason is not None and "its $schema is not draft 4, 6, 7" in reason
    assert not connected(listener)


@pytest.mark.parametrize(
    "ref",
    [
        "https://json-schema.org/draft/2020-12/schema",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2020-12/meta/core#meta",
        "other.json",
        "http://[broken",
    ],
)
def test_refs_to_other_documents_even_bundled_metaschemas_are_refused(ref: str) -> None:
    assert checked({}, {"$ref": ref}) == OUTSIDE


def test_an_id_naming_a_bundled_metaschema_is_refused() -> None:
    schema = {"$defs": {"m": {"$id": "https://json-schema.org/draft/2020-12/schema"}},
              "$ref": "https://json-schema.org/draft/2020-12/schema"}
    assert checked({}, schema) == OUTSIDE


def test_a_ref_to_nowhere_inside_the_schema_cannot_be_applied() -> None:
    assert checked(1, {"$ref": "#/$defs/missing"}) == NOWHERE


def test_a_schema_over_the_size_cap_is_refused() -> None:
    schema = {"enum": ["x" * 1000 for _ in range(70)]}  # ~70 KiB
    assert len(orjson.dumps(schema)) > MAX_SCHEMA_BYTES
    assert checked("x", schema) == (
        f"the ticket's response_schema is too large (over {MAX_SCHEMA_BYTES} bytes)"
    )


def test_a_schema_over_the_depth_cap_is_refused() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(40):
        schema = {"items": schema}
    assert checked([], schema) == (
        f"the ticket's response_schema is too deep (over {MAX_SCHEMA_DEPTH} levels of nesting)"
    )


def test_catastrophic_backtracking_is_answered_at_once() -> None:
    # On Python's re this match takes minutes, in C, where no budget can stop it.
    schema = {"type": "string", "pattern": "^(a+)+$"}
    assert checked("a" * 40 + "!", schema) == "answer: fails 'pattern': \"^(a+)+$\""
    assert checked("a" * 40, schema) is None
    by_name = {"patternProperties": {"^(a+)+$": {"type": "integer"}},
               "additionalProperties": False}
    assert checked({"a" * 40 + "!": 1}, by_name) is not None
    # A $ref to the root (which names its draft) stays on RE2 too.
    rooted = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "properties": {"again": {"$ref": "#"}}, "pattern": "^(a+)+$"}
    assert checked({"again": "a" * 40 + "!"}, rooted) is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "(a)\\1"},
        {"patternProperties": {"(?=x)": {}}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "patternProperties": {"(a)\\1": {}}},
    ],
)
def test_a_pattern_re2_cannot_compile_refuses_the_schema(schema: dict[str, Any]) -> None:
    reason = checked({"a": "aa"}, schema)
    assert reason is not None
    assert reason.startswith("the ticket's response_schema's pattern ")
    assert "is not supported: " in reason


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
         "a $schema inside it"),
        ({"unevaluatedProperties": False, "patternProperties": {"^a": {}}},
         "unevaluatedProperties with patternProperties"),
    ],
)
def test_what_would_leave_re2_is_refused(schema: dict[str, Any], why: str) -> None:
    assert checked({}, schema) == f"the ticket's response_schema is not supported: {why}"


def nested_any_of_bomb(levels: int = 24) -> dict[str, Any]:
    """2**levels branches, each failing, in about a kilobyte."""
    defs: dict[str, Any] = {"l0": {"type": "integer"}}
    for level in range(1, levels + 1):
        below = {"$ref": f"#/$defs/l{level - 1}"}
        defs[f"l{level}"] = {"anyOf": [below, below]}
    return {"$defs": defs, "$ref": f"#/$defs/l{levels}"}


def nested_arrays(levels: int, leaf: Any) -> Any:
    for _ in range(levels):
        leaf = [leaf]
    return leaf


@pytest.mark.parametrize(
    ("schema", "answer"),
    [
        (nested_any_of_bomb(), "not an integer"),
        ({"$defs": {"loop": {"$ref": "#/$defs/loop"}}, "$ref": "#/$defs/loop"}, 1),
        ({"type": "array", "anyOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}}]},
         nested_arrays(60, "x")),
    ],
    ids=["anyOf-bomb", "ref-loop", "two-ways-down-each-level"],
)
def test_work_past_the_budget_is_refused(schema: dict[str, Any], answer: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On the machine's CPU clock: the work is unbounded, so however fast the machine, only
    the budget ends it (the verdict never depends on the speed, how long it takes does)."""
    monkeypatch.setattr(time, "thread_time", THREAD_TIME)
    assert checked(answer, schema) == TOO_LONG


def test_a_recursive_schema_takes_an_answer_as_deep_as_the_decoder_does() -> None:
    tree = {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]}
    assert checked(nested_arrays(63, 1), tree) is None  # a request's answer: 63 levels at most
    assert checked(nested_arrays(63, "x"), tree) is not None


def test_regex_work_past_its_budget_is_refused() -> None:
    # RE2 is linear, not fast: out of DFA memory, this takes seconds on a long answer.
    schema = {"type": "string", "pattern": "a{500}b"}
    assert checked("a" * 100_000, schema) == TOO_LONG
    assert checked("a" * 1_000, schema) is not None
    assert checked("a" * 500 + "b", schema) is None


def test_a_schema_with_too_many_patterns_is_refused() -> None:
    def keyed(count: int) -> dict[str, Any]:
        return {"patternProperties": {f"^x{n}$": {"type": "integer"} for n in range(count)}}

    assert checked({"x1": 1}, keyed(MAX_SCHEMA_PATTERNS + 1)) == (
        f"the ticket's response_schema is too large (over {MAX_SCHEMA_PATTERNS} patterns)"
    )
    assert checked({"x1": 1}, keyed(MAX_SCHEMA_PATTERNS)) is None


def test_a_large_ordinary_schema_decides_as_jsonschema_does_and_the_budget_ends_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No machine's speed decides here: the CPU this check takes, against its budget, is
    ``python -m bench answers --case large-ordinary-schema`` (docs/pauses.md). With the
    clock standing still the verdicts are the schema's alone; with a clock past the budget
    at its first look, the budget ends the check."""
    case = CASES["large-ordinary-schema"]
    answer = case.answer()
    assert checked(answer, case.schema) is None  # (the clock stands still: the fixture)
    assert Draft202012Validator(case.schema).is_valid(answer)
    answer["rows"][999]["id"] = "last"
    assert checked(answer, case.schema) == "rows/999/id: fails 'type': \"integer\""
    ticks = itertools.count()
    monkeypatch.setattr(time, "thread_time", lambda: float(next(ticks)))
    assert answer_problem(case.answer(), case.schema) == TOO_LONG


def test_what_a_refusal_shows_of_the_schema_and_the_path_is_capped() -> None:
    reason = checked("y", {"const": "x" * 2000})
    assert reason == "answer: fails 'const': \"" + "x" * 199 + "..."
    deep: dict[str, Any] = {"type": "integer"}
    for n in range(15):
        deep = {"properties": {f"{n:02}" + "k" * 60: deep}}
    path = [f"{n:02}" + "k" * 60 for n in reversed(range(15))]
    answer: Any = "not an integer"
    for key in reversed(path):
        answer = {key: answer}
    reason = checked(answer, deep)
    assert reason is not None and reason.startswith("...")
    shown = reason.removeprefix("...").split(": fails")[0]
    assert len(shown) == 200 and all(len(key) <= 32 for key in shown.split("/"))


def test_the_callers_profiler_and_tracer_are_kept() -> None:
    calls: list[str] = []

    def profiler(frame: object, event: str, arg: object) -> None:
        calls.append(event)

    tracer = sys.gettrace()
    sys.setprofile(profiler)
    try:
        checked({"approved": True}, APPROVAL)
        checked({"approved": True}, {"type": "string", "pattern": "^(a+)+$"})
        kept = sys.getprofile()
    finally:
        sys.setprofile(None)
    assert kept is profiler
    assert sys.gettrace() is tracer


SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.text("abxy09 -", max_size=6)
ANSWERS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner,
                                                                 max_size=3),
    max_leaves=6,
)
SCHEMAS = st.one_of(
    st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"]).map(
        lambda kind: {"type": kind}),
    st.lists(SCALARS, min_size=1, max_size=3).map(lambda values: {"enum": values}),
    st.sampled_from(["^[a-z]+$", "ab|xy", "^x", "[0-9]{2}", "^(a+)+b"]).map(
        lambda pattern: {"type": "string", "pattern": pattern}),
    st.fixed_dictionaries({"type": st.just("object"),
                           "required": st.lists(st.sampled_from("abc"), unique=True),
                           "patternProperties": st.just({"^[ab]$": {"type": "integer"}}),
                           "additionalProperties": st.booleans()}),
    st.integers(-3, 3).map(lambda low: {"minimum": low, "uniqueItems": True}),
)


@settings(max_examples=80, deadline=None)
@given(SCHEMAS, ANSWERS)
def test_safe_schemas_decide_as_jsonschema_does(schema: dict[str, Any], answer: Any) -> None:
    assert (checked(answer, schema) is None) == Draft202012Validator(schema).is_valid(
        answer)
