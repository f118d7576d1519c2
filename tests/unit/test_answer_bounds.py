"""Checking an answer is bounded in time and memory, and its refusal never shows it
(issue 33, item 1).

No test here times anything: the CPU budget is driven by a clock of the test's own, memory
is tracemalloc's count, and the cost figures are bench/answers.py's.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symfonic_stream.processors.pauses import answer_schema
from symfonic_stream.processors.pauses.answer_schema import (
    MAX_SCHEMA_ARRAY,
    MAX_SCHEMA_BRANCHES,
    TOO_LONG,
    answer_problem,
    schema_problem,
)
from tests.unit.test_pauses import ValidatorHarness, routed

#: Issue 33's reproducer: 891 false branches, each an error that rendered the answer.
FALSE_BRANCHES = {"anyOf": [False] * 891}


def checked(answer: Any, schema: dict[str, Any]) -> str | None:
    return schema_problem(schema) or answer_problem(answer, schema)


@pytest.fixture(autouse=True)
def cpu_standing_still(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks' CPU clock stands still unless a test drives it (``clock``, below): no
    verdict here depends on how fast the machine is (issue 45: registering 64 branches
    passed its 0.5 s only on a fast enough machine)."""
    monkeypatch.setattr(time, "thread_time", lambda: 0.0)


# -- the answer's size, checked before it is read -------------------------------------------

def test_a_request_over_the_answer_limit_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unread(*args: object) -> None:
        raise AssertionError("parsed")

    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": FALSE_BRANCHES}))
    monkeypatch.setattr("symfonic_stream.processors.pauses.validator.parse_json", unread)
    v.answer("intr-1", "tok-1", [0] * 40_000)
    size = len(orjson.dumps({"ticket_id": "intr-1", "token": "tok-1", "answer": [0] * 40_000,
                             "responder": "reviewer@example.test"}))
    [rejection] = v.out.outputs
    body = orjson.loads(rejection.value or b"")
    assert (rejection.key, body["reason"], body["responder"]) == (
        b"intr-1", "invalid_answer", None)
    assert body["detail"] == (f"the request is {size} bytes, over the 65536 an answer may "
                              "take (SYMFONIC_MAX_ANSWER_BYTES): not read")


def test_a_request_within_the_limit_is_read() -> None:
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": {"type": "array"}}))
    v.answer("intr-1", "tok-1", [0] * 32_000)  # 64,085 bytes
    assert v.outcomes() == ["accepted"]


def test_the_limit_is_the_validators_setting() -> None:
    from symfonic_stream.app.topologies import topologies
    from symfonic_stream.config import load_settings

    _, validator_topology = topologies("resumes", load_settings(max_answer_bytes=2048))
    validator = validator_topology.processor_factory(0)
    v = ValidatorHarness()
    v.validator = validator  # type: ignore[assignment]
    v.register(routed(payload={"response_schema": {"type": "array"}}))
    v.answer("intr-1", "tok-1", [0] * 1_100)
    assert v.outcomes() == ["invalid_answer"]


# -- memory: no error renders the answer, none is kept --------------------------------------

def _peak_mib(check: Any) -> float:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        check()
        return (tracemalloc.get_traced_memory()[1] - base) / 2**20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("schema", [
    {"anyOf": [False] * MAX_SCHEMA_BRANCHES},
    {"oneOf": [{"items": {"type": "string"}}] * MAX_SCHEMA_BRANCHES},
    {"anyOf": [{"items": False}] * MAX_SCHEMA_BRANCHES},
], ids=["false-branches", "oneOf-every-item-wrong", "anyOf-items-false"])
def test_branches_that_fail_on_a_large_answer_cost_little_memory(schema: dict[str, Any]) -> None:
    """The answer fills the limit; jsonschema's anyOf kept every error of every branch, each
    with ``repr`` of the answer (891 branches, 64 KiB: 60 MiB traced; 1 MB: 1.3 GB)."""
    answer = [0] * 32_000
    assert schema_problem(schema) is None
    found: list[str | None] = []
    assert _peak_mib(lambda: found.append(answer_problem(answer, schema))) < 8
    assert found[0] is not None  # ("takes too long" or the first error: bounded either way)


# -- time: a CPU budget, looked at as the check proceeds -------------------------------------

class Clock:
    """``time.thread_time`` as the test has it: 0 for ``reads`` reads, then far past any
    budget."""

    def __init__(self, reads: int) -> None:
        self.reads, self.left = 0, reads

    def __call__(self) -> float:
        self.reads += 1
        return 0.0 if self.reads <= self.left else 1e9


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(answer_schema, "CLOCK_EVERY", 1)

    def use(reads: int) -> Clock:
        made = Clock(reads)
        monkeypatch.setattr(time, "thread_time", made)
        return made

    yield use


def _nested(levels: int, leaf: Any) -> Any:
    for _ in range(levels):
        leaf = [leaf]
    return leaf


TWO_WAYS_DOWN = {"type": "array", "anyOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}}]}


def test_the_budget_is_cpu_time_and_ends_the_check(clock: Any) -> None:
    """2**6 failing paths, checked in full while the clock stands still, refused as soon
    as it says the budget is spent, whenever in the check that is: also while jsonschema
    finalizes a generator it left behind, where an exception raised by the profiler was
    dropped (and the check went on unbounded)."""
    answer = _nested(6, "x")
    whole = clock(10**9)
    assert answer_problem(answer, TWO_WAYS_DOWN) == (
        "answer: fails 'anyOf': [{\"items\":{\"$ref\":\"#\"}},{\"items\":{\"$ref\":\"#\"}}]")
    reads = whole.reads
    assert reads > 1_000
    spent_at = range(1, reads // 2, max(1, reads // 400))  # ~200 points in the check
    verdicts = {answer_problem(answer, TWO_WAYS_DOWN) for _ in map(clock, spent_at)}
    assert verdicts == {TOO_LONG}


def test_registration_has_a_budget_of_its_own(clock: Any) -> None:
    clock(50)
    assert schema_problem({"type": "object", "properties": {"a": {"type": "string"}}}) == (
        TOO_LONG)


# -- the caps at registration ---------------------------------------------------------------

@pytest.mark.parametrize("keyword", ["anyOf", "oneOf", "allOf", "prefixItems"])
def test_branches_are_capped(keyword: str) -> None:
    at_cap = {keyword: [{"type": "integer"}] * MAX_SCHEMA_BRANCHES}
    assert schema_problem(at_cap) is None
    over = {"properties": {"a": {keyword: [{}] * (MAX_SCHEMA_BRANCHES + 1)}}}
    assert schema_problem(over) == (f"the ticket's response_schema is too large (its "
                                    f"'{keyword}' has over {MAX_SCHEMA_BRANCHES} items)")


@pytest.mark.parametrize("keyword", ["enum", "required"])
def test_other_arrays_are_capped(keyword: str) -> None:
    def of(count: int) -> dict[str, Any]:
        return {keyword: [f"k{n}" for n in range(count)]}

    assert schema_problem(of(MAX_SCHEMA_ARRAY)) is None
    assert schema_problem(of(MAX_SCHEMA_ARRAY + 1)) == (
        f"the ticket's response_schema is too large (its '{keyword}' has over "
        f"{MAX_SCHEMA_ARRAY} items)")


def test_data_inside_an_enum_is_not_a_schema_array() -> None:
    assert schema_problem({"enum": [list(range(MAX_SCHEMA_ARRAY + 10))]}) is None


def test_draft_3_is_not_applied() -> None:
    """Its ``type`` may hold schemas, and keeps every error of each."""
    reason = schema_problem({"$schema": "http://json-schema.org/draft-03/schema#"})
    assert reason is not None and "its $schema is not draft 4, 6, 7" in reason


def test_a_format_is_an_annotation_never_checked() -> None:
    assert checked("not an e-mail" * 1_000, {"format": "email"}) is None


# -- refusals never show the answer ---------------------------------------------------------

MARK = "SeCrEt"
MARKED = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text("ab" + MARK, max_size=12).map(
        lambda text: MARK + text),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["a", "b", MARK]), inner, max_size=3),
    max_leaves=8,
)
HOSTILE_SCHEMAS = st.sampled_from([
    {"type": "integer"}, {"enum": ["x", 1]}, {"const": "x"}, {"maxLength": 1},
    {"pattern": "^a$"}, {"items": {"type": "integer"}}, {"additionalProperties": False},
    {"propertyNames": {"maxLength": 1}}, {"anyOf": [False, {"type": "null"}]},
    {"oneOf": [{}, {}]}, {"not": {}}, {"uniqueItems": True, "minItems": 5},
    {"unevaluatedProperties": False}, {"contains": {"const": 0}}, {"maxProperties": 0},
    {"patternProperties": {"^a$": False}, "additionalProperties": False},
    {"dependentRequired": {"a": ["zz"]}}, {"required": ["zz"]},
    {"minimum": 100}, {"multipleOf": 3}, {"if": {}, "then": False},
])


@settings(max_examples=300, deadline=None)
@given(MARKED, HOSTILE_SCHEMAS)
def test_a_refusal_never_shows_a_value_of_the_answer(answer: Any, schema: dict[str, Any]) -> None:
    """Only where (keys, cut short) and which keyword: ``MARK`` may show as a key of the
    path, never from a value (jsonschema's messages render the instance with ``repr``)."""
    reason = checked(answer, schema)
    if reason is not None:
        where, _, said = reason.partition(": fails ")
        assert MARK not in said, reason
        assert all(part == MARK or MARK not in part for part in where.split("/")), reason


def test_a_refusal_of_a_large_answer_is_short() -> None:
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": {"items": {"maxLength": 1}}}))
    v.answer("intr-1", "tok-1", ["x" * 60_000])
    detail = orjson.loads(v.out.outputs[0].value or b"")["detail"]
    assert detail == "0: fails 'maxLength': 1"


def test_a_request_too_large_for_the_decoder_is_still_a_dead_letter() -> None:
    """Keyless (never so from the intake): not refused on a ticket, the record limit
    applies."""
    v = ValidatorHarness()
    v.validator.process(v.record(None, b"[" * 100_000), 0.0, v.out)
    assert [d.reason for d in v.out.dead_letters] == ["invalid_json"]
    assert not v.out.outputs
