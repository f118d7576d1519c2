"""Server-sent events, as the gateway writes them: pure functions, no I/O.

One output envelope (contract §5) is one SSE message::

    id: <seq>
    event: <the StreamEvent's or StreamChunk's type, or end, or gap>
    data: <the envelope's JSON, exactly as on the topic>

A browser's ``EventSource`` sends the last ``id`` it saw as ``Last-Event-ID`` when it
reconnects; :func:`resume_after` turns that (or ``?after_seq=``) into the seq the stream
resumes after. docs/gateway.md has the whole protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

#: Statuses after which nothing follows a run's ``end`` record (contract §5); ``paused`` goes on.
CLOSING_STATUSES = frozenset({"completed", "error", "cancelled", "abandoned"})
#: What an SSE ``event:`` name may be; anything else on the topic is sent as ``event``.
_EVENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
#: A run id as contract §2 allows it: 1-256 characters.
MAX_RUN_ID = 256


class BadRequest(ValueError):
    """A request the gateway refuses with 400; the message says which parameter."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the gateway needs of one output record: its run, seq and SSE event name."""

    run_id: str
    seq: int
    name: str
    #: A closing ``end`` (completed, error, cancelled, abandoned): the stream ends after it.
    closes: bool
    #: Projected from a kernel's event (``source_index`` set), so it carries that event's
    #: tenant; False for what a projector writes of its own (a gap, an abandoned end),
    #: which carries none (docs/records.md, "Headers").
    from_event: bool = True


def read_envelope(value: bytes | None) -> Envelope | None:
    """The envelope's run, seq and name, or None for a record that is not an envelope
    (the gateway skips it and counts it; it never reaches a client)."""
    if value is None:
        return None
    try:
        parsed: Any = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if type(parsed) is not dict:
        return None
    run_id, seq = parsed.get("run_id"), parsed.get("seq")
    if type(run_id) is not str or not 0 < len(run_id) <= MAX_RUN_ID:
        return None
    if type(seq) is not int or seq < 0:
        return None
    name, closes = _name_of(parsed)
    if name is None:
        return None
    return Envelope(run_id, seq, name, closes, parsed.get("source_index") is not None)


#: The typed events that carry their ticket's token (contract §7). Whoever holds the token may
#: answer the pause, so the gateway never sends it: it answers on a reviewer's behalf with
#: the token it reads from review-tickets (docs/gateway.md, "Answering a pause").
TOKEN_EVENTS = frozenset({"ask_user", "interrupt"})


def without_token(envelope: Envelope, value: bytes) -> bytes:
    """``value`` without its event's ``token``: the bytes on the topic for every other
    envelope (only an ask_user or interrupt event is parsed again)."""
    if envelope.name not in TOKEN_EVENTS:
        return value
    parsed = orjson.loads(value)
    event = parsed.get("event")
    if type(event) is not dict or "token" not in event:
        return value
    return orjson.dumps({**parsed, "event": {k: v for k, v in event.items() if k != "token"}})


def _name_of(parsed: dict[str, Any]) -> tuple[str | None, bool]:
    event, end = parsed.get("event"), parsed.get("end")
    if type(event) is dict:
        kind = event.get("type")
        return (kind if type(kind) is str and _EVENT_NAME.fullmatch(kind) else "event"), False
    if type(end) is dict:
        status = end.get("status")
        return "end", type(status) is str and status in CLOSING_STATUSES
    if type(parsed.get("gap")) is dict:
        return "gap", False
    return None, False


def message(seq: int, name: str, data: bytes) -> bytes:
    """One SSE message. A line break inside the JSON (whitespace between its tokens) starts
    a new ``data:`` line, which the browser joins back with a newline."""
    lines = _LINE_BREAK.split(data) if b"\n" in data or b"\r" in data else (data,)
    body = b"".join(b"data: " + line + b"\n" for line in lines)
    return b"id: %d\nevent: %s\n%s\n" % (seq, name.encode(), body)


def control(name: str, payload: dict[str, Any]) -> bytes:
    """A message of the gateway's own (``truncated``, ``dropped``): no ``id``, so a
    browser's Last-Event-ID stays the last envelope's seq."""
    return b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps(payload))


def check_run_id(run_id: str) -> str:
    if not 0 < len(run_id) <= MAX_RUN_ID:
        raise BadRequest(f"run id must be 1-{MAX_RUN_ID} characters")
    return run_id


def resume_after(last_event_id: str | None, after_seq: str | None) -> int:
    """The seq the stream resumes after (-1: from the run's start). ``Last-Event-ID`` wins
    over ``after_seq``: a browser reconnecting to the same URL sends both, and the header
    is the newer."""
    for name, raw in (("Last-Event-ID", last_event_id), ("after_seq", after_seq)):
        if raw is None or raw.strip() == "":
            continue
        text = raw.strip()
        if not text.isascii() or not text.isdigit() or len(text) > 18:
            raise BadRequest(f"{name} must be a seq (a non-negative integer), got {raw[:40]!r}")
        return int(text)
    return -1
