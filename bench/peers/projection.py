"""What every peer shares: the typed projection as a peer writes it (JSON dict in, envelope
bytes out), and the command line.

The projection is :func:`symfonic_stream.projections.typed.project_typed` and the ordering
guard's envelope over plain dicts, without what the contract adds on top (no validation, no
ordering guard: a re-sent event is projected again and a late one out of place, no
changelog). ``tests/unit/test_bench_peers.py`` checks that, on the benchmark's stream,
every event's bodies equal the real projection's. Nothing here imports the project, so the
peers in their own environment (Quix Streams', ``bench.processes.quix_python``) load it by
path.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

_END_STATUS = {"done": "completed", "error": "error", "cancelled": "cancelled"}
_dumps = orjson.dumps


def project_bodies(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The typed event bodies of one raw event (``project_typed``'s, over a dict)."""
    interrupt = event.get("interrupt")
    kind = event.get("kind")
    if interrupt is not None:
        return [_pause(kind, interrupt)]
    if kind == "text_delta" or kind == "thinking":
        text = event.get("text")
        return [{"type": "text_delta" if kind == "text_delta" else "thinking_delta",
                 "text": text}] if text else []
    bodies = _tool(kind, event.get("tool_call"))
    if kind == "done":
        result = event.get("result") or {}
        usage = result.get("usage") or {}
        if usage.get("input_tokens") or usage.get("output_tokens"):
            bodies.append({"type": "usage", "input_tokens": usage.get("input_tokens", 0),
                           "output_tokens": usage.get("output_tokens", 0)})
        bodies.append({"type": "response_complete", "text": result.get("text") or "",
                       "duration_ms": round(result.get("duration_ms") or 0.0, 1)})
    return bodies


def _tool(kind: Any, call: dict[str, Any] | None) -> list[dict[str, Any]]:
    if call is None:
        return []
    if kind == "tool_call":
        out = [{"type": "tool_call_start", "tool_name": call["name"],
                "tool_call_id": call["id"], "phase": "executing"}]
        if call.get("arguments"):
            out.append({"type": "tool_call_delta", "tool_call_id": call["id"],
                        "args_delta": _dumps(call["arguments"]).decode()})
        return out
    if kind == "tool_result":
        result = call.get("result")
        return [
            {"type": "tool_result", "tool_call_id": call["id"],
             "result": result if result is not None else (call.get("error") or "")},
            {"type": "extension", "name": "tool_timing", "event_id": call["id"],
             "payload": {"tool_call_id": call["id"], "tool_name": call["name"],
                         "duration_ms": call.get("duration_ms"),
                         "is_error": call.get("error") is not None}},
        ]
    return []


def _pause(kind: Any, pending: dict[str, Any]) -> dict[str, Any]:
    if kind == "ask_user":
        payload = pending.get("payload") or {}
        head: dict[str, Any] = {"type": "ask_user", "questions": payload.get("questions") or []}
    else:
        head = {"type": "interrupt", "name": pending["name"], "payload": pending.get("payload", {})}
    return {**head, **{k: pending.get(k) for k in (
        "token", "tool_call_id", "interrupt_id", "run_id", "session_id", "expires_at")},
        "resumable": pending.get("resumable", False)}


def copy_value(value: bytes) -> list[tuple[bytes, bytes]]:
    """The copiers' "projection": the value unchanged, keyed as it came (an empty key)."""
    return [(b"", value)]


class Projection:
    """Raw value → ``(key, envelope bytes)`` outputs, with a per-run ``seq`` kept in
    memory (lost on a restart: a peer is measured, not relied on)."""

    def __init__(self) -> None:
        self._seq: dict[str, int] = {}

    def __call__(self, value: bytes) -> list[tuple[bytes, bytes]]:
        event = orjson.loads(value)
        run_id = event["run_id"]
        key = run_id.encode()
        seq = self._seq.get(run_id, 0)
        index, ts = event["index"], event["timestamp"]
        out = []
        for body in project_bodies(event):
            out.append((key, _dumps({"run_id": run_id, "seq": seq, "source_index": index,
                                     "ts": ts, "event": body})))
            seq += 1
        kind = event.get("kind")
        status = _END_STATUS.get(kind) if isinstance(kind, str) else None
        if status is None and event.get("interrupt") is not None:
            status = "paused"
        if status is not None:
            error = event.get("error") if kind == "error" else None
            out.append((key, _dumps({"run_id": run_id, "seq": seq, "source_index": index,
                                     "ts": ts, "end": {"status": status, "error": error}})))
            seq += 1
        if status is None or status == "paused":
            self._seq[run_id] = seq
        else:
            self._seq.pop(run_id, None)
        return out


def peer_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """A parser with the four options every peer requires (a peer adds its own)."""
    parser = argparse.ArgumentParser(prog=prog)
    for option in ("--bootstrap", "--input", "--output", "--group"):
        parser.add_argument(option, required=True)
    return parser
