"""A plain-Python reference of contract §2-§5: validation, both projections, the guard.

Written from the contract's text (docs/contract.md, and where it leaves room, its decisions),
never from ``symfonic_stream``'s code, which this module must not import. The standard
library's ``json`` parses; :func:`compact_json` writes. Events are the parsed dicts as
received (key order kept); every output is a plain dict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Event = dict[str, Any]
Body = dict[str, Any]
Envelope = dict[str, Any]
ProjectionName = Literal["typed", "chunks"]
Check = Callable[[Any], bool]
#: A nested object's fields: name -> (type check, required).
Shape = dict[str, tuple[Check, bool]]

INVALID_JSON, INVALID_EVENT, RUN_CLOSED = "invalid_json", "invalid_event", "run_closed"
FOREIGN_TENANT = "foreign_tenant"
KNOWN_KINDS = frozenset({"thinking", "text_delta", "tool_call", "tool_result", "done",
                         "error", "cancelled", "ask_user", "interrupt"})
END_STATUS = {"done": "completed", "error": "error", "cancelled": "cancelled"}


# -- compact JSON (docs/contract.md decision 4: orjson's text) ------------------------------------


def float_text(value: float) -> str:
    """A float as shortest round-trip JSON text, spelled as orjson spells it.

    Python's ``repr`` gives the same digits; orjson differs only for small exponents:
    ``1e-05`` is ``0.00001`` and ``1e-07`` is ``1e-7``.
    """
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = int(exponent)
    if power == -5:
        sign = "-" if mantissa.startswith("-") else ""
        return sign + "0.0000" + mantissa.lstrip("-").replace(".", "")
    if power < 0:
        return f"{mantissa}e{power}"
    return text


def compact_json(value: Any) -> str:
    """No whitespace, keys in received order, non-ASCII as itself (not ``\\u`` escapes)."""
    if value is None or type(value) in (bool, int, str):
        return json.dumps(value, ensure_ascii=False)
    if type(value) is float:
        return float_text(value)
    if type(value) is list:
        return "[" + ",".join(compact_json(item) for item in value) + "]"
    if type(value) is dict:
        members = (compact_json(str(key)) + ":" + compact_json(item) for key, item in value.items())
        return "{" + ",".join(members) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def encode(envelope: Envelope) -> bytes:
    """One output record's value, as the consumers write it."""
    return compact_json(envelope).encode("utf-8")


# -- §2: validation ---------------------------------------------------------------------


def _is(kind: type) -> Check:
    """Exactly this JSON type: ``type(True) is bool``, so a boolean is never an int."""
    return lambda value: type(value) is kind


#: The smallest integer that rounds to infinity as a double.
_FLOAT_LIMIT = 2**1024 - 2**970


def _is_number(value: Any) -> bool:
    """A float, or an integer that fits one (an integer is accepted where a float is due)."""
    return type(value) is float or (type(value) is int and abs(value) < _FLOAT_LIMIT)


def _or_null(check: Check) -> Check:
    return lambda value: value is None or check(value)


def _object_of(shape: Shape) -> Check:
    return lambda value: _matches(value, shape)


def _matches(value: Any, shape: Shape) -> bool:
    """An object whose known fields have their types; unknown fields are ignored."""
    if type(value) is not dict:
        return False
    for name, (check, required) in shape.items():
        if (name in value and not check(value[name])) or (required and name not in value):
            return False
    return True


_is_str, _is_int, _is_bool, _is_object = _is(str), _is(int), _is(bool), _is(dict)
_NULLABLE_STR = _or_null(_is_str)
_NULLABLE_NUMBER = _or_null(_is_number)
_SCOPE: Shape = {"tenant": (_NULLABLE_STR, False), "principal": (_NULLABLE_STR, False)}
_TOOL_CALL: Shape = {
    "id": (_is_str, True), "name": (_is_str, True),
    "arguments": (_or_null(_is_object), False), "result": (lambda value: True, False),
    "error": (_NULLABLE_STR, False), "duration_ms": (_NULLABLE_NUMBER, False),
}
_INTERRUPT: Shape = {
    "name": (_is_str, True),
    "kind": (lambda value: _is_str(value) and value in ("ask_user", "interrupt"), True),
    "payload": (_is_object, False), "token": (_is_str, True),
    "tool_call_id": (_NULLABLE_STR, False),
    "interrupt_id": (lambda value: _is_str(value) and 1 <= len(value) <= 256, True),
    "run_id": (_NULLABLE_STR, False), "session_id": (_NULLABLE_STR, False),
    "expires_at": (_is_number, True), "resumable": (_is_bool, False),
}
_USAGE: Shape = {name: (_is_int, False) for name in ("input_tokens", "output_tokens",
                                                      "total_tokens")}
_RESULT: Shape = {"text": (_NULLABLE_STR, False), "duration_ms": (_NULLABLE_NUMBER, False),
                  "usage": (_object_of(_USAGE), False)}
_ERROR: Shape = {"type": (_is_str, True), "message": (_is_str, True)}
_AGENT_EVENT: Shape = {
    "run_id": (lambda value: _is_str(value) and 1 <= len(value) <= 256, True),
    "index": (lambda value: _is_int(value) and 0 <= value < 2**63, True),
    "kind": (_is_str, True), "timestamp": (_is_number, True),
    "root_run_id": (_NULLABLE_STR, False), "session_id": (_NULLABLE_STR, False),
    "thread_id": (_NULLABLE_STR, False), "text": (_NULLABLE_STR, False),
    "scope": (_or_null(_object_of(_SCOPE)), False),
    "tool_call": (_or_null(_object_of(_TOOL_CALL)), False),
    "interrupt": (_or_null(_object_of(_INTERRUPT)), False),
    "result": (_or_null(_object_of(_RESULT)), False),
    "error": (_or_null(_object_of(_ERROR)), False),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text} is out of a double's range")
    return number


def parse(value: bytes) -> tuple[Any, bool]:
    """Strict RFC 8259 JSON in UTF-8: ``(parsed, True)``, or ``(None, False)``."""
    try:
        text = value.decode("utf-8")
        parsed = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        # A lone surrogate escape ("\ud800") parses but is not a Unicode string.
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeError are ValueErrors
        return None, False
    return parsed, True


def _questions_ok(event: Event) -> bool:
    """docs/contract.md decision 5: an ask_user's ``payload["questions"]`` is a list, null or
    absent."""
    pending = event.get("interrupt")
    if pending is None or event["kind"] != "ask_user":
        return True
    questions = pending.get("payload", {}).get("questions")
    return questions is None or type(questions) is list


#: docs/configuration.md: SYMFONIC_MAX_JSON_DEPTH and SYMFONIC_MAX_INTEGER's defaults.
MAX_DEPTH, MAX_INTEGER = 64, 2**63 - 1


def _depth(value: Any) -> int:
    """Containers nested in ``value``, itself included (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


def _carriable(value: bytes) -> bool:
    """Every object's keys distinct, every integer literal within ±MAX_INTEGER."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            raise KeyError("a key twice")
        return dict(items)

    def integer(text: str) -> int:
        if abs(int(text)) > MAX_INTEGER + (text.startswith("-")):
            raise KeyError("integer out of range")
        return int(text)

    try:
        json.loads(value, object_pairs_hook=pairs, parse_int=integer,
                   parse_float=_finite_float, parse_constant=_reject_constant)
    except KeyError:
        return False
    return True


def validate(value: bytes) -> tuple[Event | None, str | None]:
    """One raw value: ``(event, None)``, or ``(None, "invalid_json"|"invalid_event")``."""
    parsed, ok = parse(value)
    if not ok:
        return None, INVALID_JSON
    if _depth(parsed) > MAX_DEPTH or not _carriable(value):
        return None, INVALID_EVENT
    if not _matches(parsed, _AGENT_EVENT) or not _questions_ok(parsed):
        return None, INVALID_EVENT
    event: Event = parsed
    return event, None


# -- §3: the typed vocabulary -----------------------------------------------------------


def _pause_event(kind: str, pending: dict[str, Any]) -> Body:
    payload = pending.get("payload", {})
    if kind == "ask_user":
        questions = payload.get("questions")
        head: Body = {"type": "ask_user", "questions": [] if questions is None else questions}
    else:
        head = {"type": "interrupt", "name": pending["name"], "payload": payload}
    return {**head, "token": pending["token"], "tool_call_id": pending.get("tool_call_id"),
            "interrupt_id": pending["interrupt_id"], "run_id": pending.get("run_id"),
            "session_id": pending.get("session_id"), "expires_at": float(pending["expires_at"]),
            "resumable": pending.get("resumable", False)}


def _tool_events(kind: str, call: dict[str, Any]) -> list[Body]:
    if kind == "tool_call":
        bodies: list[Body] = [
            {"type": "tool_call_start", "tool_name": call["name"], "tool_call_id": call["id"],
             "phase": "executing"}
        ]
        if call.get("arguments"):
            bodies.append({"type": "tool_call_delta", "tool_call_id": call["id"],
                           "args_delta": compact_json(call["arguments"])})
        return bodies
    if kind != "tool_result":
        return []
    result, error, duration = call.get("result"), call.get("error"), call.get("duration_ms")
    timing = {"tool_call_id": call["id"], "tool_name": call["name"],
              "duration_ms": None if duration is None else float(duration),
              "is_error": error is not None}
    return [
        {"type": "tool_result", "tool_call_id": call["id"],
         "result": result if result is not None else (error if error is not None else "")},
        {"type": "extension", "name": "tool_timing", "event_id": call["id"], "payload": timing},
    ]


def _done_events(result: dict[str, Any] | None) -> list[Body]:
    if result is None:
        return [{"type": "response_complete", "text": "", "duration_ms": 0.0}]
    bodies: list[Body] = []
    usage = result.get("usage", {})
    input_tokens, output_tokens = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    if input_tokens != 0 or output_tokens != 0:
        bodies.append({"type": "usage", "input_tokens": input_tokens,
                       "output_tokens": output_tokens})
    duration, text = result.get("duration_ms"), result.get("text")
    bodies.append({"type": "response_complete", "text": "" if text is None else text,
                   "duration_ms": 0.0 if duration is None else round(float(duration), 1)})
    return bodies


def typed(event: Event) -> list[Body]:
    """contract §3: the StreamEvents of one valid AgentEvent, in order."""
    kind = event["kind"]
    pending, text, call = event.get("interrupt"), event.get("text"), event.get("tool_call")
    bodies: list[Body] = []
    if pending is not None:
        bodies.append(_pause_event(kind, pending))
    elif kind in ("thinking", "text_delta") and text:
        bodies.append({"type": "thinking_delta" if kind == "thinking" else "text_delta",
                       "text": text})
    elif call is not None:
        bodies.extend(_tool_events(kind, call))
    if kind == "done":
        bodies.extend(_done_events(event.get("result")))
    return bodies


# -- §4: the chunk vocabulary -----------------------------------------------------------


def chunks(event: Event) -> list[Body]:
    """contract §4: the StreamChunks of one valid AgentEvent (an interrupt wins: decision 1)."""
    kind = event["kind"]
    pending, text, call = event.get("interrupt"), event.get("text"), event.get("tool_call")
    if pending is not None:
        return [{"type": "interrupt", "content": compact_json(pending.get("payload", {})),
                 "name": pending["name"]}]
    if kind in ("text_delta", "thinking"):
        chunk_type = "text" if kind == "text_delta" else "thinking"
        return [{"type": chunk_type, "content": text, "name": None}] if text else []
    if kind == "done":
        result = event.get("result")
        final = result.get("text") if result is not None else None
        return [{"type": "final", "content": final if final is not None else "", "name": None}]
    if call is None or kind not in ("tool_call", "tool_result"):
        return []
    if kind == "tool_call":
        arguments = call.get("arguments")
        content = compact_json(arguments) if arguments else ""
    elif call.get("result") is not None:
        result = call["result"]
        content = result if type(result) is str else compact_json(result)
    else:
        error = call.get("error")
        content = error if error is not None else ""
    return [{"type": kind, "content": content, "name": call["name"]}]


PROJECTIONS: dict[ProjectionName, Callable[[Event], list[Body]]] = {"typed": typed,
                                                                    "chunks": chunks}


# -- §5: envelopes and the ordering guard (offline: no clock) ---------------------------


@dataclass
class _Run:
    #: Its owner: the first event's ``scope.tenant`` (contract §9).
    tenant: str | None
    next_index: int = 0
    next_seq: int = 0
    closed: bool = False
    #: index -> (event, the input line it came from)
    buffer: dict[int, tuple[Event, int]] = field(default_factory=dict)


class ReferenceGuard:
    """contract §5 for many runs, offline: no time passes until :meth:`finish`."""

    def __init__(self, projection: ProjectionName = "typed", buffer_max: int = 1000) -> None:
        self._project = PROJECTIONS[projection]
        self._buffer_max = buffer_max
        self._runs: dict[str, _Run] = {}
        self.envelopes: list[Envelope] = []
        self.dead_letters: list[tuple[str, int]] = []
        self.duplicates = 0
        self.gaps = 0
        self.unknown_kinds = 0

    def accept(self, event: Event, line: int) -> None:
        """One valid event, from input line ``line`` (for its dead letter, if any)."""
        run_id, index = event["run_id"], event["index"]
        tenant = (event.get("scope") or {}).get("tenant")
        run = self._runs.setdefault(run_id, _Run(tenant))
        if tenant != run.tenant:  # contract §9: another tenant's, whatever its index
            self.dead_letters.append((FOREIGN_TENANT, line))
        elif index < run.next_index or index in run.buffer:
            self.duplicates += 1
        elif run.closed:
            self.dead_letters.append((RUN_CLOSED, line))
        elif index > run.next_index:
            run.buffer[index] = (event, line)
            if len(run.buffer) > self._buffer_max:
                self._fill_first_hole(run_id, run)
        else:
            self._release(run_id, run, event)
            self._drain(run_id, run)

    def owner(self, run_id: str) -> str | None:
        """The tenant every record of ``run_id`` carries (``symfonic-tenant``; contract §9)."""
        return self._runs[run_id].tenant

    def finish(self) -> None:
        """End of input: the gap timeout of every hole still open, runs in first-seen order."""
        for run_id, run in self._runs.items():
            while run.buffer:
                self._fill_first_hole(run_id, run)

    def _emit(self, run_id: str, run: _Run, index: int | None, ts: Any, key: str,
              value: Body) -> None:
        """One envelope: ``run_id, seq, source_index, ts`` then ``event|end|gap``."""
        self.envelopes.append({"run_id": run_id, "seq": run.next_seq, "source_index": index,
                               "ts": float(ts), key: value})
        run.next_seq += 1

    def _release(self, run_id: str, run: _Run, event: Event) -> None:
        index, ts, kind = event["index"], event["timestamp"], event["kind"]
        for body in self._project(event):
            self._emit(run_id, run, index, ts, "event", body)
        run.next_index = index + 1
        if kind not in KNOWN_KINDS:
            self.unknown_kinds += 1
        if kind in END_STATUS:
            error = event.get("error") if kind == "error" else None
            if error is not None:  # the kernel's error object: {"type", "message"}
                error = {"type": error["type"], "message": error["message"]}
            self._emit(run_id, run, index, ts, "end", {"status": END_STATUS[kind], "error": error})
            self._close(run)
        elif event.get("interrupt") is not None:
            self._emit(run_id, run, index, ts, "end", {"status": "paused", "error": None})

    def _close(self, run: _Run) -> None:
        run.closed = True
        for index in sorted(run.buffer):
            self.dead_letters.append((RUN_CLOSED, run.buffer[index][1]))
        run.buffer.clear()

    def _drain(self, run_id: str, run: _Run) -> None:
        while run.next_index in run.buffer:
            event, _ = run.buffer.pop(run.next_index)
            self._release(run_id, run, event)

    def _fill_first_hole(self, run_id: str, run: _Run) -> None:
        first = min(run.buffer)
        ts = run.buffer[first][0]["timestamp"]
        gap = {"from_index": run.next_index, "to_index": first - 1}
        self._emit(run_id, run, None, ts, "gap", gap)
        self.gaps += 1
        run.next_index = first
        self._drain(run_id, run)


def project(
    lines: Iterable[bytes], projection: ProjectionName, buffer_max: int = 1000
) -> tuple[list[Envelope], list[tuple[str, int]]]:
    """``symfonic-stream project`` (contract §8): envelopes in release order, dead letters.

    Dead letters are ``(reason, 1-based line number)``. Blank lines are skipped; offline
    there is no record key to check and no size limit.
    """
    guard = project_guard(lines, projection, buffer_max)
    return guard.envelopes, guard.dead_letters


def project_guard(
    lines: Iterable[bytes], projection: ProjectionName, buffer_max: int = 1000
) -> ReferenceGuard:
    """:func:`project`, returning the finished guard (its counters too)."""
    guard = ReferenceGuard(projection, buffer_max)
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        event, reason = validate(stripped)
        if event is None:
            guard.dead_letters.append((reason or INVALID_EVENT, number))
        else:
            guard.accept(event, number)
    guard.finish()
    return guard


def envelopes_by_run(envelopes: Iterable[Envelope]) -> dict[str, list[Envelope]]:
    """Envelopes grouped by run, each run's in order (order across runs is not defined)."""
    grouped: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        grouped.setdefault(envelope["run_id"], []).append(envelope)
    return grouped
