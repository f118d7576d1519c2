"""Raw bytes → AgentEvent, and every dead-letter reason the decoder can give."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symfonic_stream.models import decoding
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import DecodeError, DecodeLimits, decode_agent_event
from tests.unit.helpers import raw


@pytest.fixture(autouse=True, scope="module", params=["native", "reference"])
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs both ways: the native scanner's and the Python reference's."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "reference":
            patch.setattr(decoding, "_scan", None)
        yield request.param


def reason_of(value: bytes | None, **kwargs: Any) -> DeadLetterReason:
    with pytest.raises(DecodeError) as caught:
        decode_agent_event(value, **kwargs)
    assert caught.value.detail  # every rejection says why
    return caught.value.reason


def test_valid_event_decodes_and_ignores_unknown_fields() -> None:
    event = decode_agent_event(orjson.dumps(raw("text_delta", 3, text="hi", shiny_new_field=1)))
    assert (event.run_id, event.index, event.kind, event.text) == ("run-1", 3, "text_delta", "hi")


def test_integer_timestamp_is_accepted_as_a_float() -> None:
    event = decode_agent_event(b'{"run_id":"r","index":0,"kind":"done","timestamp":17}')
    assert event.timestamp == 17.0


def test_unknown_kind_is_valid() -> None:
    assert decode_agent_event(orjson.dumps(raw("brand_new_kind"))).kind == "brand_new_kind"


@pytest.mark.parametrize(
    "value",
    [b"not json", b"{", b'{"run_id": NaN}', b"", b"\xff\xfe", b'{"a":1}trailing', None],
)
def test_invalid_json(value: bytes | None) -> None:
    assert reason_of(value) is DeadLetterReason.INVALID_JSON


@pytest.mark.parametrize(
    "patch",
    [
        {"index": "3"},
        {"index": 1.5},
        {"index": 1.0},
        {"index": True},
        {"index": -1},
        {"timestamp": "now"},
        {"timestamp": True},
        {"run_id": ""},
        {"run_id": "r" * 257},
        {"run_id": 7},
        {"kind": None},
        {"text": 5},
        {"scope": "acme"},
        {"tool_call": {"id": "c", "name": "n", "arguments": [1, 2]}},
        {"tool_call": {"id": "c"}},
        {
            "interrupt": {
                "name": "x",
                "kind": "weird",
                "token": "t",
                "interrupt_id": "i",
                "expires_at": 1.0,
            }
        },
        {
            "interrupt": {
                "name": "x",
                "kind": "ask_user",
                "token": "t",
                "interrupt_id": "i",
                "expires_at": "soon",
            }
        },
        {"result": {"usage": {"input_tokens": 1.5}}},
        {"error": {"type": "E"}},
    ],
)
def test_invalid_event_types_are_never_coerced(patch: dict[str, Any]) -> None:
    assert reason_of(orjson.dumps({**raw("text_delta"), **patch})) is DeadLetterReason.INVALID_EVENT


@pytest.mark.parametrize("missing", ["run_id", "index", "kind", "timestamp"])
def test_missing_required_field_is_invalid_event(missing: str) -> None:
    event = raw("text_delta")
    del event[missing]
    assert reason_of(orjson.dumps(event)) is DeadLetterReason.INVALID_EVENT


@pytest.mark.parametrize("value", [b"[1,2]", b'"text"', b"42", b"null", b"true"])
def test_json_that_is_not_an_object_is_invalid_event(value: bytes) -> None:
    assert reason_of(value) is DeadLetterReason.INVALID_EVENT


def test_ask_user_questions_must_be_a_list() -> None:
    pending = {
        "name": "ask_user",
        "kind": "ask_user",
        "payload": {"questions": "why?"},
        "token": "t",
        "interrupt_id": "i",
        "expires_at": 1.0,
    }
    assert reason_of(orjson.dumps(raw("ask_user", interrupt=pending))) is (
        DeadLetterReason.INVALID_EVENT
    )


def test_key_mismatch_only_when_asked() -> None:
    value = orjson.dumps(raw("text_delta", run_id="run-A"))
    assert decode_agent_event(value, key=b"run-B").run_id == "run-A"
    assert reason_of(value, key=b"run-B", check_key=True) is DeadLetterReason.KEY_MISMATCH
    assert reason_of(value, key=None, check_key=True) is DeadLetterReason.KEY_MISMATCH
    assert decode_agent_event(value, key=b"run-A", check_key=True).run_id == "run-A"


def test_checks_run_in_the_contract_order() -> None:
    big_bad_json = b"{" + b"x" * 100
    assert reason_of(big_bad_json, limits=DecodeLimits(max_bytes=50)) is DeadLetterReason.TOO_LARGE
    assert reason_of(b"[1]", key=b"other", check_key=True) is DeadLetterReason.INVALID_EVENT
    assert reason_of(b"nope", key=b"other", check_key=True) is DeadLetterReason.INVALID_JSON


def test_integers_at_the_limit_are_carried_one_past_either_end_is_not() -> None:
    """Also beside a float beyond the limit, which sends the reference to its exact look."""
    limits = DecodeLimits(max_integer=1000)
    for fine in (1000, -1001):
        for payload in ({"n": fine}, [fine], {"a": [{"n": fine}]}, {"n": fine, "f": 5e3}):
            assert decode_agent_event(orjson.dumps(raw("tool_call", payload=payload)),
                                      limits=limits).kind == "tool_call"
    for beyond in (1001, -1002):
        for payload in ({"n": beyond}, [beyond], {"a": [{"n": beyond}]}, {"n": beyond, "f": 5e3}):
            value = orjson.dumps(raw("tool_call", payload=payload))
            assert reason_of(value, limits=limits) is DeadLetterReason.INVALID_EVENT


def test_a_value_of_exactly_the_size_limit_is_carried_one_byte_more_is_too_large() -> None:
    """The limit is inclusive, for events and for the other records (answers, tickets)."""
    value = orjson.dumps(raw("text_delta", text="x"))
    at_limit = DecodeLimits(max_bytes=len(value))
    assert decode_agent_event(value, limits=at_limit).text == "x"
    assert decoding.parse_json(value, at_limit)["text"] == "x"
    below = DecodeLimits(max_bytes=len(value) - 1)
    assert reason_of(value, limits=below) is DeadLetterReason.TOO_LARGE
    with pytest.raises(DecodeError) as caught:
        decoding.parse_json(value, below)
    assert caught.value.reason is DeadLetterReason.TOO_LARGE


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_decode_error(value: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_agent_event(value, key=b"k", check_key=True, limits=DecodeLimits(max_bytes=200))


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "run_id": _json | st.text(min_size=1),
            "index": _json | st.integers(min_value=0, max_value=2**63 - 1),
            "kind": _json | st.sampled_from(["done", "ask_user", "tool_call", "text_delta"]),
            "timestamp": _json,
            "tool_call": _json,
            "interrupt": _json,
            "result": _json,
            "scope": _json,
        },
    )
)
def test_random_json_objects_never_raise_anything_but_decode_error(value: dict[str, Any]) -> None:
    try:
        decode_agent_event(orjson.dumps(value))
    except DecodeError as rejected:
        assert rejected.reason is DeadLetterReason.INVALID_EVENT


# -- a key twice, told from a colon inside a string ----------------------------------------

_COLON_TEXTS = ["https://example.com/a:b", "Note: at 10:30", 'def f(x): return {"a": 1}']


@pytest.mark.parametrize("text", _COLON_TEXTS)
def test_colons_inside_strings_cost_no_second_parse(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents' text is full of colons: they must not send the record to the slow, exact
    parse (24 µs against the 3 µs walk), raw or escaped (``\\u003a``, as ``json.dumps``
    with ``ensure_ascii`` writes one before a non-ASCII character is nearby or not)."""
    def no_reparse(value: bytes, limits: DecodeLimits) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(decoding, "_reparse", no_reparse)
    monkeypatch.setattr(decoding, "_scan", None)  # the reference's way (the native one has none)
    plain = orjson.dumps(raw("text_delta", text=text))
    escaped = json.dumps(raw("text_delta", text=text + " é")).replace(":", "\\u003a")
    escaped = escaped.replace('"\\u003a ', '": ').replace('"\\u003a"', '":"')  # keys' colons
    for value in (plain, escaped.encode()):
        assert decode_agent_event(value).text in (text, text + " é")


@pytest.mark.parametrize("value", [
    # the second member is dropped together with the colons of its string
    b'{"run_id":"r","index":0,"kind":"x","timestamp":1,"text":"a:b","text":"c"}',
    # an escaped colon in a kept string makes up for the dropped member's structural one
    b'{"run_id":"r","index":0,"kind":"x","timestamp":1,"m":{"a":1,"a":2,"b":"\\u003a"}}',
    # an escaped backslash: the "u003a" after it is text, not a colon
    b'{"run_id":"r","index":0,"kind":"x","timestamp":1,"m":{"a":1,"a":"\\\\u003a:"}}',
    b'{"run_id":"r:1","index":0,"kind":"x","timestamp":1,"run_id":"r:2"}',
])
def test_a_key_twice_is_invalid_whatever_colons_its_strings_hold(value: bytes) -> None:
    assert reason_of(value) is DeadLetterReason.INVALID_EVENT


def _has_a_key_twice(value: bytes) -> bool:
    twice = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal twice
        twice = twice or len({key for key, _ in items}) != len(items)
        return dict(items)

    json.loads(value, object_pairs_hook=pairs)
    return twice


_colon_text = st.text(alphabet=st.sampled_from(list('ab:\\"é\n')), max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "a:b"]), _colon_text), max_size=4),
       st.booleans())
def test_a_key_twice_is_found_exactly(members: list[tuple[str, str]], ascii_only: bool) -> None:
    """Objects with colons, escapes and repeated keys in any mix, written raw or with
    every non-ASCII character and colon escaped: invalid exactly when a key repeats."""
    body = ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=ascii_only)}"
                    for k, v in members)
    if ascii_only:
        body = body.replace('":"', '"\x00"').replace(":", "\\u003a").replace('"\x00"', '":"')
    value = b'{"run_id":"r","index":0,"kind":"x","timestamp":1,"m":{' + body.encode() + b"}}"
    if _has_a_key_twice(value):
        assert reason_of(value) is DeadLetterReason.INVALID_EVENT
    else:
        assert decode_agent_event(value).run_id == "r"


# -- the reference's cost: linear in the record, whatever it holds --------------------------

class _CountedKey(str):
    """A key that counts how often it is compared with another (equal hashes or a scan)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedKey.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


class _CountingJson:
    """``json`` for the decoder's exact re-parse, every object's keys made counting ones
    before its hook sees them (the hook is the decoder's duplicate-key check)."""

    @staticmethod
    def loads(value: bytes, *, object_pairs_hook: Any, **kwargs: Any) -> Any:
        def counted(items: list[tuple[str, Any]]) -> Any:
            return object_pairs_hook([(_CountedKey(key), item) for key, item in items])

        return json.loads(value, object_pairs_hook=counted, **kwargs)


def _comparisons(keys: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Key comparisons the reference makes deciding a record of ``keys`` keys, one twice."""
    members = ",".join(f'"k{n}":{n}' for n in range(keys))
    value = f'{{"run_id":"r","index":0,"kind":"x","timestamp":1,"m":{{{members},"k7":0}}}}'
    monkeypatch.setattr(decoding, "json", _CountingJson)
    _CountedKey.compared = 0
    with pytest.raises(DecodeError, match="the key 'k7' more than once"):
        decoding.check_shape(value.encode(), orjson.loads(value), DecodeLimits())
    return _CountedKey.compared


def test_the_duplicate_key_check_compares_each_key_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 33: ``keys.count(key)`` per key made 40,000 keys take 20 s. Counted, not
    timed: twice the keys must cost at most about twice the comparisons, and a few per
    key (the quadratic check makes ~n²: 1,000,000 for 1,000 keys). The reference's own
    check, whichever way the module decodes (the native scanner's: test_native_scan.py)."""
    small, large = _comparisons(1_000, monkeypatch), _comparisons(2_000, monkeypatch)
    assert large <= 4 * 2_000, (small, large)
    assert large <= 2 * small + 10, (small, large)
