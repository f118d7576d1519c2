"""Raw bytes → AgentEvent, once, with the dead-letter reason when it cannot be done.

The checks run in SPEC §6's order: ``too_large``, ``invalid_json``, ``invalid_event``,
``key_mismatch``. orjson parses (strict JSON: no NaN, no Infinity, valid UTF-8) and pydantic
validates the parsed object; nothing is parsed twice.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.dead_letter import DeadLetterReason

_JSON_TYPE_NAMES = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


_loads = orjson.loads
#: ``AgentEvent.model_validate`` without the wrapper (same validator, same defaults).
_validate = AgentEvent.__pydantic_validator__.validate_python


class DecodeError(Exception):
    """A record that is not a usable AgentEvent; ``reason`` is its dead-letter reason."""

    def __init__(self, reason: DeadLetterReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each bad field, short enough for a dead-letter header."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "<value>"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def check_size(value: bytes | None, max_bytes: int | None) -> None:
    """Raise ``DecodeError(too_large)`` for a value over ``max_bytes`` (None: no limit)."""
    if max_bytes is not None and value is not None and len(value) > max_bytes:
        raise DecodeError(
            DeadLetterReason.TOO_LARGE, f"value is {len(value)} bytes, limit {max_bytes}"
        )


def parse_json(value: bytes | None) -> Any:
    """Parse strict JSON or raise ``DecodeError(invalid_json)``."""
    if value is None:
        raise DecodeError(DeadLetterReason.INVALID_JSON, "record has no value (tombstone)")
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(DeadLetterReason.INVALID_JSON, str(exc)) from None


def decode_agent_event(
    value: bytes | None,
    *,
    key: bytes | None = None,
    check_key: bool = False,
    max_bytes: int | None = None,
) -> AgentEvent:
    """Decode one raw record value, or raise :class:`DecodeError` with its reason.

    ``check_key`` compares the record key (UTF-8) with ``run_id``; the offline command has
    no keys and leaves it off.
    """
    return decode_record(value, key, check_key, max_bytes)


def decode_record(
    value: bytes | None, key: bytes | None, check_key: bool, max_bytes: int | None
) -> AgentEvent:
    """:func:`decode_agent_event` with positional arguments, for the projectors' hot path.

    :func:`check_size` and :func:`parse_json` are inlined here (same checks, same order,
    same details), and the model's validator is called directly: ``model_validate`` is a
    thin Python wrapper around it.
    """
    if value is None:
        raise DecodeError(DeadLetterReason.INVALID_JSON, "record has no value (tombstone)")
    if max_bytes is not None and len(value) > max_bytes:
        raise DecodeError(
            DeadLetterReason.TOO_LARGE, f"value is {len(value)} bytes, limit {max_bytes}"
        )
    try:
        parsed = _loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(DeadLetterReason.INVALID_JSON, str(exc)) from None
    if not isinstance(parsed, dict):
        raise DecodeError(
            DeadLetterReason.INVALID_EVENT,
            f"value is a JSON {_JSON_TYPE_NAMES.get(type(parsed), 'value')}, not an object",
        )
    try:
        event: AgentEvent = _validate(parsed)
    except ValidationError as exc:
        raise DecodeError(DeadLetterReason.INVALID_EVENT, describe_validation_error(exc)) from None
    if check_key and key != event.run_id.encode():
        shown = key.decode("utf-8", "replace") if key is not None else "<no key>"
        raise DecodeError(
            DeadLetterReason.KEY_MISMATCH,
            f"record key {shown!r} differs from run_id {event.run_id!r}",
        )
    return event
