"""Raw bytes → AgentEvent, once, with the dead-letter reason when it cannot be done.

The checks run in contract §6's order: ``too_large``, ``invalid_json``, ``invalid_event``,
``key_mismatch``. Two ways to the same verdicts (docs/engine.md, "Decoding"):

- the reference, in Python: orjson parses (strict JSON: no NaN, no Infinity, valid UTF-8),
  :func:`check_shape` checks the tree against what this project can carry (depth,
  integers, duplicate keys), and pydantic validates the parsed object;
- the native scanner (``symfonic_stream._native``, Rust, in ``native/``) reads the bytes
  once for all of those checks, and pydantic validates straight from the bytes. Used when installed;
  ``tests/unit/test_native_scan.py`` holds it to the reference's verdicts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from symfonic_stream.models.agent_event import KNOWN_KINDS, UNKNOWN_KIND_LABEL, AgentEvent
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.native import extension as _extension

_JSON_TYPE_NAMES = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


_Scan = Callable[[bytes, int, int, bool], "tuple[str, str] | None"]
# Without the extension (an install built where no cargo was) the reference decides, slowly.
_scan: _Scan | None = _extension.scan if _extension is not None else None

#: Whether :func:`decode_record` reads the bytes with the native scanner.
NATIVE_SCAN = _scan is not None
#: Which, in words, for the process's ``serving`` log line.
JSON_SCANNER = "native" if NATIVE_SCAN else "reference (native extension not installed)"

_loads = orjson.loads
_dumps = orjson.dumps
#: ``AgentEvent.model_validate`` without the wrapper (same validator, same defaults).
_validate = AgentEvent.__pydantic_validator__.validate_python
_validate_json = AgentEvent.__pydantic_validator__.validate_json


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What an accepted record may be: its size, its nesting, its integers (the settings
    ``SYMFONIC_MAX_RECORD_BYTES``, ``SYMFONIC_MAX_JSON_DEPTH``, ``SYMFONIC_MAX_INTEGER``)."""

    max_bytes: int | None = None
    max_depth: int = 64
    max_integer: int = 2**63 - 1


#: No size limit (the engine checks the size first), the default nesting and integers.
DEFAULT_LIMITS = DecodeLimits()


class DecodeError(Exception):
    """A record that is not a usable AgentEvent; ``reason`` is its dead-letter reason."""

    def __init__(self, reason: DeadLetterReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def kind_label(kind: str) -> str:
    """``kind`` as a metric label (the ``type`` of records in): itself when known,
    ``unknown`` otherwise, so labels stay bounded although kernels may send any kind."""
    return kind if kind in KNOWN_KINDS else UNKNOWN_KIND_LABEL


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each bad field, short enough for a dead-letter header."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "<value>"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def check_shape(value: bytes, parsed: Any, limits: DecodeLimits) -> None:
    """Refuse what orjson accepts but the project could not carry, as ``invalid_event``:
    nesting deeper than ``max_depth`` (orjson writes at most 254 levels), an integer beyond
    ``±max_integer`` (orjson reads one beyond 64 bits as a float, silently), and an object
    with a key twice (orjson keeps the last, silently: a second ``run_id`` would win).

    One walk of the parsed tree decides almost every record: the raw text has as many
    colons as the parsed objects have keys only if no key is there twice, and a number
    beyond the limit, an integer or the float orjson made of one, shows in the walk. A
    colon inside a string breaks that tie, and agents' text is full of them (``https:``,
    ``10:30``, ``Note:``): :func:`_no_key_dropped` settles most such records with one
    ``orjson.dumps``. Only the rest are parsed again, exactly.
    """
    members, suspicious = _walk(parsed, limits)
    colons = value.count(b":")
    if suspicious or (colons != members and not _no_key_dropped(value, colons, parsed)):
        _reparse(value, limits)


def _no_key_dropped(value: bytes, colons: int, parsed: Any) -> bool:
    r"""Whether orjson kept every member of the text (False: it may have dropped one);
    ``colons`` is the text's count of ``:``.

    Each ``:`` of the text is a member or a character of a string. Re-serialized (orjson
    never escapes a colon), the parsed tree holds the text's strings, minus those of a
    dropped member, with each escaped colon (``\u003a``) now a colon. So it has as many
    colons as the text plus its escaped ones only if no member was dropped. Counting
    ``\u003a`` can only overcount them (an escaped backslash before ``u003a``), which
    makes the test fail, never pass, wrongly.
    """
    escaped = value.count(b"\\u003a") + value.count(b"\\u003A") if b"\\u" in value else 0
    try:
        again = _dumps(parsed)
    except orjson.JSONEncodeError:  # (paranoid: a tree orjson parsed within the depth)
        return False
    return again.count(b":") == colons + escaped


def _walk(parsed: Any, limits: DecodeLimits) -> tuple[int, bool]:
    """(keys of every object in the tree, whether a number may be beyond the limit);
    raises when the tree nests too deep."""
    members = 0
    suspicious = False
    low, high = -limits.max_integer - 1, limits.max_integer
    if type(parsed) is not dict and type(parsed) is not list:
        parsed = [parsed]  # a bare number or string: its one item (parse_json takes any)
    stack: list[tuple[Any, int]] = [(parsed, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limits.max_depth:
            raise DecodeError(DeadLetterReason.INVALID_EVENT,
                              f"nested deeper than {limits.max_depth} levels")
        if type(node) is dict:
            members += len(node)
            node = node.values()
        for item in node:
            kind = type(item)
            if kind is str:  # (most values: one test instead of four)
                continue
            if kind is dict or kind is list:
                stack.append((item, depth + 1))
            elif kind is int and not low <= item <= high:
                suspicious = True
            elif kind is float and not low < item < high:
                # strictly: an integer literal just beyond -2**63 becomes the float -2**63
                suspicious = True
    return members, suspicious


def _reparse(value: bytes, limits: DecodeLimits) -> None:
    """The slow, exact look: every object's keys distinct, every integer within range."""
    biggest = limits.max_integer

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        kept = dict(items)
        if len(kept) != len(items):  # linear: a count per key was n² (issue 33)
            counts = Counter(key for key, _ in items)
            twice = min(key for key, times in counts.items() if times > 1)
            raise DecodeError(DeadLetterReason.INVALID_EVENT,
                              f"an object has the key {twice!r} more than once")
        return kept

    def integer(text: str) -> int:
        number = int(text)
        if not -biggest - 1 <= number <= biggest:
            raise DecodeError(DeadLetterReason.INVALID_EVENT,
                              f"integer {text[:30]} is beyond the limit of {biggest}")
        return number

    json.loads(value, object_pairs_hook=pairs, parse_int=integer)


def check_size(value: bytes | None, max_bytes: int | None) -> None:
    """Raise ``DecodeError(too_large)`` for a value over ``max_bytes`` (None: no limit)."""
    if max_bytes is not None and value is not None and len(value) > max_bytes:
        raise DecodeError(
            DeadLetterReason.TOO_LARGE, f"value is {len(value)} bytes, limit {max_bytes}"
        )


def parse_json(value: bytes | None, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Parse strict JSON of an acceptable size and shape, or raise ``DecodeError``
    (invalid_json, too_large, invalid_event)."""
    if value is None:
        raise DecodeError(DeadLetterReason.INVALID_JSON, "record has no value (tombstone)")
    check_size(value, limits.max_bytes)
    if _scan is not None:  # any document, with the checks check_shape makes below
        verdict = _scan(value, limits.max_depth, limits.max_integer, False)
        if verdict is not None:
            raise _refusal(value, verdict, limits)
        return _loads(value)
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(DeadLetterReason.INVALID_JSON, str(exc)) from None
    check_shape(value, parsed, limits)
    return parsed


def _refusal(value: bytes, verdict: tuple[str, str], limits: DecodeLimits) -> DecodeError:
    """The native scanner's verdict as the reference's error, reason and words alike."""
    kind, detail = verdict
    if kind == "json":  # orjson's words for it (a rare record: parsing it twice is cheap)
        try:
            _loads(value)
        except orjson.JSONDecodeError as exc:
            detail = str(exc)
        return DecodeError(DeadLetterReason.INVALID_JSON, detail)
    if kind == "type":
        detail = f"value is a JSON {detail}, not an object"
    elif kind == "depth":
        detail = f"nested deeper than {limits.max_depth} levels"
    elif kind == "integer":
        detail = f"integer {detail[:30]} is beyond the limit of {limits.max_integer}"
    else:  # duplicate_key
        detail = f"an object has the key {detail!r} more than once"
    return DecodeError(DeadLetterReason.INVALID_EVENT, detail)


def decode_agent_event(
    value: bytes | None,
    *,
    key: bytes | None = None,
    check_key: bool = False,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> AgentEvent:
    """Decode one raw record value, or raise :class:`DecodeError` with its reason.

    ``check_key`` compares the record key (UTF-8) with ``run_id``; the offline command has
    no keys and leaves it off.
    """
    return decode_record(value, key, check_key, limits)


def decode_record(
    value: bytes | None, key: bytes | None, check_key: bool, limits: DecodeLimits
) -> AgentEvent:
    """:func:`decode_agent_event` with positional arguments, for the projectors' hot path:
    the native scanner's way when it is installed, else the reference's."""
    if _scan is None:
        return decode_record_reference(value, key, check_key, limits)
    value = _present(value, limits)
    verdict = _scan(value, limits.max_depth, limits.max_integer, True)
    if verdict is not None:
        raise _refusal(value, verdict, limits)
    try:
        event: AgentEvent = _validate_json(value)
    except ValidationError as exc:
        raise DecodeError(DeadLetterReason.INVALID_EVENT, describe_validation_error(exc)) from None
    return _keyed(event, key, check_key)


def decode_record_reference(
    value: bytes | None, key: bytes | None, check_key: bool, limits: DecodeLimits
) -> AgentEvent:
    """The reference decoding, in Python: :func:`parse_json`'s checks in the same order
    with the same details, the model's validator called directly (``model_validate`` is a
    thin Python wrapper around it)."""
    value = _present(value, limits)
    try:
        parsed = _loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(DeadLetterReason.INVALID_JSON, str(exc)) from None
    if not isinstance(parsed, dict):
        raise DecodeError(
            DeadLetterReason.INVALID_EVENT,
            f"value is a JSON {_JSON_TYPE_NAMES.get(type(parsed), 'value')}, not an object",
        )
    check_shape(value, parsed, limits)
    try:
        event: AgentEvent = _validate(parsed)
    except ValidationError as exc:
        raise DecodeError(DeadLetterReason.INVALID_EVENT, describe_validation_error(exc)) from None
    return _keyed(event, key, check_key)


def _present(value: bytes | None, limits: DecodeLimits) -> bytes:
    """The value, unless a tombstone (invalid_json) or over the size limit (too_large)."""
    if value is None:
        raise DecodeError(DeadLetterReason.INVALID_JSON, "record has no value (tombstone)")
    max_bytes = limits.max_bytes
    if max_bytes is not None and len(value) > max_bytes:
        raise DecodeError(
            DeadLetterReason.TOO_LARGE, f"value is {len(value)} bytes, limit {max_bytes}"
        )
    return value


def _keyed(event: AgentEvent, key: bytes | None, check_key: bool) -> AgentEvent:
    if check_key and key != event.run_id.encode():
        shown = key.decode("utf-8", "replace") if key is not None else "<no key>"
        raise DecodeError(
            DeadLetterReason.KEY_MISMATCH,
            f"record key {shown!r} differs from run_id {event.run_id!r}",
        )
    return event


def decode_accepted(value: bytes) -> AgentEvent:
    """Decode a value already accepted by :func:`decode_record` (an event the guard held
    behind a hole): no check again, it passed them when it arrived."""
    event: AgentEvent = _validate_json(value)
    return event
