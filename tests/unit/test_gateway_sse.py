"""The gateway's SSE wire format and resume parameters (pure: no broker, no server)."""

from __future__ import annotations

import orjson
import pytest

from symfonic_stream.gateway.sse import (
    BadRequest,
    Envelope,
    check_run_id,
    control,
    message,
    read_envelope,
    resume_after,
)


def _envelope(**fields: object) -> bytes:
    return orjson.dumps({"run_id": "r1", "seq": 3, "source_index": 3, "ts": 1.0, **fields})


def parse_sse(raw: bytes) -> list[dict[str, str]]:
    """The messages of an SSE body as a browser's EventSource assembles them."""
    messages = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = fields[name] + "\n" + value if name in fields else value
        messages.append(fields)
    return messages


@pytest.mark.parametrize(("fields", "name", "closes"), [
    ({"event": {"type": "text_delta", "text": "hi"}}, "text_delta", False),
    ({"event": {"type": "text", "content": "hi", "name": None}}, "text", False),
    ({"end": {"status": "completed", "error": None}}, "end", True),
    ({"end": {"status": "abandoned", "error": None}}, "end", True),
    ({"end": {"status": "error", "error": {"type": "x", "message": "y"}}}, "end", True),
    ({"end": {"status": "cancelled", "error": None}}, "end", True),
    ({"end": {"status": "paused", "error": None}}, "end", False),
    ({"gap": {"from_index": 4, "to_index": 6}}, "gap", False),
    # A type that is no SSE event name is sent under the name "event", never as given.
    ({"event": {"type": "x\ny: injected"}}, "event", False),
])
def test_read_envelope_names_each_kind(fields: dict[str, object], name: str,
                                       closes: bool) -> None:
    assert read_envelope(_envelope(**fields)) == Envelope("r1", 3, name, closes)


@pytest.mark.parametrize("value", [
    None, b"", b"not json", b"[1]", b'"s"',
    orjson.dumps({"seq": 1, "event": {"type": "a"}}),
    orjson.dumps({"run_id": "", "seq": 1, "event": {"type": "a"}}),
    orjson.dumps({"run_id": "r" * 257, "seq": 1, "event": {"type": "a"}}),
    orjson.dumps({"run_id": "r", "seq": -1, "event": {"type": "a"}}),
    orjson.dumps({"run_id": "r", "seq": 1.0, "event": {"type": "a"}}),
    orjson.dumps({"run_id": "r", "seq": True, "event": {"type": "a"}}),
    orjson.dumps({"run_id": "r", "seq": 1}),
    orjson.dumps({"run_id": "r", "seq": 1, "event": "text"}),
])
def test_read_envelope_refuses_what_is_no_envelope(value: bytes | None) -> None:
    assert read_envelope(value) is None


def test_message_carries_seq_name_and_the_exact_bytes() -> None:
    data = _envelope(event={"type": "text_delta", "text": "a\nb"})
    [parsed] = parse_sse(message(3, "text_delta", data))
    assert parsed == {"id": "3", "event": "text_delta", "data": data.decode()}


def test_message_with_line_breaks_in_the_json_reassembles_to_equal_json() -> None:
    data = b'{"run_id": "r1",\r\n "seq": 3,\n "ts": 1.0,\r "gap": {"from_index": 1, "to_index": 1}}'
    raw = message(3, "gap", data)
    assert b"\r" not in raw
    [parsed] = parse_sse(raw)
    assert orjson.loads(parsed["data"]) == orjson.loads(data)


def test_control_messages_have_no_id() -> None:
    [parsed] = parse_sse(control("truncated", {"from_seq": 0, "to_seq": 4}))
    assert "id" not in parsed
    assert parsed["event"] == "truncated"
    assert orjson.loads(parsed["data"]) == {"from_seq": 0, "to_seq": 4}


@pytest.mark.parametrize(("header", "query", "after"), [
    (None, None, -1), ("", None, -1), ("  ", "", -1),
    ("7", None, 7), (None, "0", 0), (" 12 ", None, 12),
    ("9", "3", 9),  # the browser's header is newer than the URL it reconnects to
    ("", "3", 3),
])
def test_resume_after(header: str | None, query: str | None, after: int) -> None:
    assert resume_after(header, query) == after


@pytest.mark.parametrize(("header", "query", "named"), [
    ("-1", None, "Last-Event-ID"), ("1.5", None, "Last-Event-ID"), ("abc", None, "Last-Event-ID"),
    (None, "x", "after_seq"), (None, "1e3", "after_seq"), (None, "٣", "after_seq"),
    (None, "9" * 19, "after_seq"),
])
def test_resume_after_refuses_what_is_no_seq(header: str | None, query: str | None,
                                             named: str) -> None:
    with pytest.raises(BadRequest, match=named):
        resume_after(header, query)


def test_run_id_bounds() -> None:
    assert check_run_id("r" * 256) == "r" * 256
    for bad in ("", "r" * 257):
        with pytest.raises(BadRequest, match="run id"):
            check_run_id(bad)


def test_an_end_status_of_any_json_type_is_read_without_error() -> None:
    for status in ([1], {"a": 1}, None, 3):
        assert read_envelope(_envelope(end={"status": status})) == Envelope("r1", 3, "end", False)
