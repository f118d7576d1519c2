"""The native scanner (``native/``, Rust) against the Python reference it replaces.

``decode_record`` reads the bytes with ``symfonic_stream._native.scan`` and validates them with
pydantic straight from the bytes; ``decode_record_reference`` parses with orjson, walks the
tree and validates the dict. Every record must get the same verdict from both: the same
event, or the same dead-letter reason with the same words.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symfonic_stream.models import decoding
from symfonic_stream.models.decoding import (
    DecodeError,
    DecodeLimits,
    decode_record,
    decode_record_reference,
)
from symfonic_stream.tools.synthetic import synthetic_stream
from tests.unit.helpers import raw

EVENT = orjson.dumps(raw("tool_call", 3, payload={"a": [1, {"b": "c"}]}))
SMALL = DecodeLimits(max_bytes=None, max_depth=4, max_integer=1000)
LIMITS = [DecodeLimits(), SMALL]


def outcome(decode: Any, value: bytes | None, limits: DecodeLimits,
            key: bytes | None = None) -> tuple[Any, ...]:
    try:
        event = decode(value, key, key is not None, limits)
    except DecodeError as refused:
        return (refused.reason, refused.detail)
    return ("accepted", event.model_dump(), event.model_extra)


def assert_same_verdict(value: bytes | None, limits: DecodeLimits,
                        key: bytes | None = None) -> tuple[Any, ...]:
    native = outcome(decode_record, value, limits, key)
    assert native == outcome(decode_record_reference, value, limits, key), value
    return native


def test_the_native_scanner_is_installed() -> None:
    """`make venv` builds it; without it the projectors fall back to the reference, slower."""
    assert decoding.NATIVE_SCAN


def member(name: str, value: str) -> bytes:
    return EVENT[:-1] + b',"' + name.encode() + b'":' + value.encode() + b"}"


HOSTILE: list[bytes | None] = [
    None, b"", b" ", b"{}", b"[]", b'"x"', b"1", b"-1.5", b"true", b"null", b"\xef\xbb\xbf{}",
    EVENT, EVENT + b" x", EVENT + b"\n", b" \t\r\n" + EVENT, EVENT[:-1], EVENT + b"\x00",
    member("n", "NaN"), member("n", "Infinity"), member("n", "-Infinity"), member("n", "1e400"),
    member("n", "-1e400"), member("n", "1e-400"), member("n", "-0"), member("n", "-0.0"),
    member("n", "1E+2"), member("n", "01"), member("n", "1."), member("n", ".5"),
    member("n", "1e"), member("n", "-"), member("n", "+1"), member("n", "tru"),
    member("n", str(2**63 - 1)), member("n", str(2**63)), member("n", str(-(2**63))),
    member("n", str(-(2**63) - 1)), member("n", str(2**64)), member("n", "1" + "0" * 400),
    member("n", "1000"), member("n", "1001"), member("n", "-1001"), member("n", "-1002"),
    member("n", "[1001.0, 5e3]"),
    member("run_id", '"other"'), member("\\u0072un_id", '"other"'),
    member("p", '{"a":1,"b":2,"a":3}'), member("p", '{"b":1,"a":2,"b":3,"a":4}'),
    member("p", '[{"z":1,"z":2},{"y":1,"y":2}]'), member("p", '{"q":{"z":1,"z":2},"q":1}'),
    member("p", "{" + ",".join(f'"k{n}":{n}' for n in range(40)) + ',"k7":0}'),
    # Past 16 keys the scanner keeps an object's keys in a set: the later ones too.
    member("p", "{" + ",".join(f'"k{n}":{n}' for n in range(20)) + ',"k17":0}'),
    # 309 digits before the point: the shortest fractions that can overflow a double.
    member("n", "1" + "0" * 308 + ".5"), member("n", "9" * 309 + ".5"),
    member("p", '{"k":' + str(2**70) + ',"k":1}'), member("p", '{"é":1,"\\u00e9":2}'),
    member("t", '"\\ud800"'), member("t", '"\\udc00"'), member("t", '"\\ud83d\\ude00"'),
    member("t", '"\\ud83d\\u0041"'), member("t", '"\\x"'), member("t", '"\\u12"'),
    member("t", '"\\u0000"'), member("t", '"a\x1fb"'), member("t", '"a\tb"'),
    member("t", '"\\"\\\\\\/\\b\\f\\n\\r\\t"'), member("t", '"https://x:1 Note: 10:30"'),
    EVENT[:-1] + b',"t":"\xff"}', EVENT[:-1] + b',"t":"\xed\xa0\x80"}',
    EVENT[:-1] + b',"t":"\xc0\xaf"}', EVENT[:-1] + b',"\xff":1}',
    member("d", "[" * 4 + "]" * 4), member("d", "[" * 5 + "]" * 5),
    member("d", "[" * 70 + "]" * 70), member("d", "[" * 1030 + "]" * 1030),
    member("d", "[" * 70 + "1," + "]" * 70), member("d", "[" * 70 + "]" * 69),
    member("d", "[" * 6 + "]" * 6 + ',"x":' + str(2**64)), member("trail", "[1,]"),
    member("trail", '{"a":1,}'), member("ws", ' [ 1 , { "a" : 2 } ] '),
    b'{"run_id":"r","index":0,"kind":"x","timestamp":1,"text":"a:b","text":"c"}',
    b'{"run_id":"r","index":-1,"kind":"x","timestamp":1}',
    b'{"run_id":"r","index":"0","kind":"x","timestamp":"1"}',
    b'{"run_id":"r","index":0,"kind":"x","timestamp":true}',
    b'{"run_id":"r","index":0.0,"kind":"x","timestamp":1}',
]


@pytest.mark.parametrize("limits", LIMITS, ids=["default", "small"])
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_records_get_the_references_verdict(
    value: bytes | None, limits: DecodeLimits
) -> None:
    assert_same_verdict(value, limits)


def test_the_key_is_checked_alike() -> None:
    for key in (b"run-1", b"run-2", b"\xff"):
        assert_same_verdict(EVENT, DecodeLimits(), key)


def test_a_whole_synthetic_stream_decodes_alike() -> None:
    stream = synthetic_stream(seed=3, runs=40)
    verdicts = {assert_same_verdict(orjson.dumps(event), DecodeLimits())[0] for event in stream}
    assert verdicts == {"accepted"}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers(-(2**70), 2**70) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(payload=JSON_VALUES, ascii_only=st.booleans())
def test_any_payload_gets_the_references_verdict(payload: Any, ascii_only: bool) -> None:
    """json.dumps writes NaN and Infinity, and escapes or not: both must refuse alike."""
    text = json.dumps(raw("tool_call", payload={"v": payload}), ensure_ascii=ascii_only)
    for limits in LIMITS:
        assert_same_verdict(text.encode(), limits)


@settings(max_examples=500, deadline=None)
@given(at=st.integers(0, len(EVENT)), cut=st.integers(0, 6),
       insert=st.binary(max_size=4) | st.sampled_from([b'"', b"\\", b"{", b"]", b":", b","]))
def test_damaged_bytes_get_the_references_verdict(at: int, cut: int, insert: bytes) -> None:
    assert_same_verdict(EVENT[:at] + insert + EVENT[at + cut:], SMALL)


#: Documents that are not objects, each with something the checks refuse: parse_json
#: (the validator's, the intake's, the router's) takes any document (issue 33).
NOT_OBJECTS = [
    b"[" * 5 + b"]" * 5, b"[" * 70 + b"]" * 70, b"[" * 1024 + b"]" * 1024,
    b"[" * 1025 + b"]" * 1025, b'[{"a":1,"a":2}]', b'[[{"b":1,"b":2,"a":3,"a":4}]]',
    b"1001", b"-1002", b"[1001]", str(2**64).encode(), b'["' + b"x" * 100 + b'", 2000]',
    b'[{"a":1001,"a":1}]', b'[[[[[[1001]]]]]]', b'"\\ud800"',
]


@pytest.mark.parametrize("value", [v for v in HOSTILE if v is not None] + NOT_OBJECTS)
def test_parse_json_is_the_same_either_way(
    value: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    def parsed() -> tuple[Any, ...]:
        try:
            return ("parsed", decoding.parse_json(value, SMALL))
        except DecodeError as refused:
            return (refused.reason, refused.detail)

    native = parsed()
    monkeypatch.setattr(decoding, "_scan", None)
    assert native == parsed()


@pytest.mark.parametrize("special", ['\\"', "\\\\", "\\n", "\\u003a", "\x01", "\x1f", '"', "é"])
def test_a_string_ends_where_it_should_wherever_eight_byte_steps_fall(special: str) -> None:
    """The scanner reads a string's plain text eight bytes at a time: a quote, backslash or
    control character at every offset of a step must be found there."""
    for before in range(17):
        for after in (0, 1, 7, 8, 9):
            text = "a" * before + special + "b" * after
            assert_same_verdict(member("t", f'"{text}"'), SMALL)


_SMALL_STACK = """
import threading
from symfonic_stream.models.decoding import DecodeError, DecodeLimits, parse_json

results = []

def deepest():
    for doc in (b"[" * 1024 + b"]" * 1024, b'{"a":' * 1024 + b"1" + b"}" * 1024,
                b'[{"a":' * 512 + b"1" + b"}]" * 512):
        try:
            parse_json(doc, DecodeLimits(max_depth=200))
        except DecodeError as refused:
            results.append(refused.detail)

threading.stack_size(%d)
worker = threading.Thread(target=deepest)
worker.start()
worker.join()
print(results)
"""


def test_the_scanner_reads_orjsons_depth_on_a_thread_with_a_small_stack() -> None:
    """1,024 levels (orjson's limit, the most the scanner reads) on a 64 KiB stack, where
    the recursive scanner needed 256-384 KiB and crashed the process (issue 33). In a
    child process, so that a crash fails this test and nothing else."""
    child = subprocess.run([sys.executable, "-c", _SMALL_STACK % (64 << 10)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert child.stdout.strip() == repr(["nested deeper than 200 levels"] * 3)
