"""Synthetic kernel runs: realistic AgentEvent streams for the demo, tests and benchmarks.

A run is a few turns of thinking, text deltas, tool calls with their results, and one
terminal (done with usage, error, cancelled, or a pause). :func:`deliver` then damages the
delivery the way a real pipe can: re-sent duplicates, bounded reordering, and lost indexes.
Everything is driven by a seeded ``random.Random`` so a stream can be regenerated exactly.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

_WORDS = [
    "the",
    "model",
    "considers",
    "the",
    "request",
    "and",
    "drafts",
    "an",
    "answer",
    "about",
    "kafka",
    "partitions",
    "offsets",
    "transactions",
    "consumers",
    "producers",
    "brokers",
    "latency",
    "throughput",
    "ordering",
    "guard",
    "gap",
    "seq",
    "replay",
    "schema",
    "tenant",
    "queue",
    "review",
    "pause",
    "resume",
    "token",
    # Agents write colons: a label, a link (a colon in a string must cost no second parse).
    "note:",
    "https://docs.example.com/kafka",
]


@dataclass(frozen=True, slots=True)
class RunShape:
    """Bounds for one generated run."""

    min_events: int = 20
    max_events: int = 400
    pause_share: float = 0.03
    error_share: float = 0.05
    cancel_share: float = 0.03


def _sentence(rng: random.Random, min_bytes: int, max_bytes: int) -> str:
    target = rng.randint(min_bytes, max_bytes)
    words: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:target]


def generate_run(
    rng: random.Random,
    run_id: str,
    *,
    shape: RunShape = RunShape(),
    start_ts: float = 1_764_480_000.0,
    tenant: str | None = "acme",
) -> list[dict[str, Any]]:
    """One run's events in kernel order, indexes 0..n-1, the last one terminal."""
    total = rng.randint(shape.min_events, shape.max_events)
    events: list[dict[str, Any]] = []
    ts = start_ts
    session = f"session-{run_id}"

    def base(kind: str) -> dict[str, Any]:
        nonlocal ts
        ts += rng.uniform(0.001, 0.05)
        return {
            "run_id": run_id,
            "index": len(events),
            "kind": kind,
            "timestamp": round(ts, 6),
            "root_run_id": run_id,
            "session_id": session,
            "thread_id": None,
            "scope": {"tenant": tenant, "principal": "user-1"},
        }

    while len(events) < total - 1:
        roll = rng.random()
        if roll < 0.6:
            event = base("text_delta")
            event["text"] = _sentence(rng, 20, 200)
            events.append(event)
        elif roll < 0.75:
            event = base("thinking")
            event["text"] = _sentence(rng, 20, 120)
            events.append(event)
        elif roll < 0.9 and len(events) < total - 2:
            events.extend(_tool_call_pair(rng, base))
        else:
            event = base("text_delta")
            event["text"] = _sentence(rng, 20, 80)
            events.append(event)
    events.append(_terminal(rng, base, shape))
    return events


def _tool_call_pair(rng: random.Random, base: Any) -> list[dict[str, Any]]:
    """A tool call and its result (one in ten failed), appended one after the other."""
    call_id = "call-" + "".join(rng.choices(string.ascii_lowercase, k=8))
    name = rng.choice(["search", "fetch_page", "calculator", "lookup_order"])
    call = base("tool_call")
    call["tool_call"] = {
        "id": call_id,
        "name": name,
        "arguments": {"query": _sentence(rng, 5, 40), "limit": rng.randint(1, 20)},
        "result": None,
        "error": None,
        "duration_ms": None,
    }
    result = base("tool_result")
    result["index"] = call["index"] + 1  # (base numbers by what the run holds so far)
    failed = rng.random() < 0.1
    result["tool_call"] = {
        "id": call_id,
        "name": name,
        "arguments": None,
        "result": None if failed else {"hits": rng.randint(0, 9), "top": _sentence(rng, 10, 60)},
        "error": "upstream timeout" if failed else None,
        "duration_ms": round(rng.uniform(5, 900), 3),
    }
    return [call, result]


def _terminal(rng: random.Random, base: Any, shape: RunShape) -> dict[str, Any]:
    roll = rng.random()
    if roll < shape.pause_share:
        kind = rng.choice(["ask_user", "interrupt"])
        event: dict[str, Any] = base(kind)
        interrupt_id = "intr-" + "".join(rng.choices(string.ascii_lowercase + string.digits, k=12))
        payload: dict[str, Any] = (
            {"questions": [{"question": "Proceed with the refund?", "options": ["yes", "no"]}]}
            if kind == "ask_user"
            else {"action": "approve_payment", "amount": rng.randint(1, 500)}
        )
        event["interrupt"] = {
            "name": "ask_user" if kind == "ask_user" else "approval",
            "kind": kind,
            "payload": payload,
            "token": "tok-" + "".join(rng.choices(string.ascii_letters, k=24)),
            "tool_call_id": "call-pause",
            "interrupt_id": interrupt_id,
            "run_id": event["run_id"],
            "session_id": event["session_id"],
            "expires_at": event["timestamp"] + 3600.0,
            "resumable": True,
        }
        return event
    if roll < shape.pause_share + shape.error_share:
        event = base("error")
        event["error"] = {"type": "ProviderError", "message": "rate limited by provider"}
        return event
    if roll < shape.pause_share + shape.error_share + shape.cancel_share:
        return dict(base("cancelled"))
    event = base("done")
    event["result"] = {
        "text": _sentence(rng, 20, 200),
        "duration_ms": round(rng.uniform(100, 20_000), 3),
        "usage": {
            "input_tokens": rng.randint(0, 4000),
            "output_tokens": rng.randint(0, 2000),
            "total_tokens": 0,
        },
    }
    return event


@dataclass(frozen=True, slots=True)
class Damage:
    """How delivery departs from kernel order."""

    duplicate_share: float = 0.02
    reorder_share: float = 0.02
    reorder_distance: int = 5
    loss_share: float = 0.0


def deliver(
    rng: random.Random, events: list[dict[str, Any]], damage: Damage = Damage()
) -> list[dict[str, Any]]:
    """One run's events as a pipe might deliver them: duplicated, nudged, some lost."""
    out: list[dict[str, Any]] = []
    for event in events:
        if damage.loss_share and rng.random() < damage.loss_share and event["index"] > 0:
            continue
        out.append(event)
        if rng.random() < damage.duplicate_share:
            out.append(event)
    for position in range(len(out)):
        if rng.random() < damage.reorder_share:
            other = min(len(out) - 1, position + rng.randint(1, damage.reorder_distance))
            out[position], out[other] = out[other], out[position]
    return out


def interleave(rng: random.Random, runs: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Merge runs the way concurrent kernels publish: each run's own order kept."""
    cursors = [0] * len(runs)
    live = [i for i, run in enumerate(runs) if run]
    while live:
        pick = rng.randrange(len(live))
        run_number = live[pick]
        yield runs[run_number][cursors[run_number]]
        cursors[run_number] += 1
        if cursors[run_number] == len(runs[run_number]):
            live[pick] = live[-1]
            live.pop()


def synthetic_stream(
    seed: int,
    runs: int,
    *,
    shape: RunShape = RunShape(),
    damage: Damage = Damage(),
    run_prefix: str = "run",
) -> list[dict[str, Any]]:
    """A whole interleaved raw stream of ``runs`` damaged runs."""
    rng = random.Random(seed)
    generated = [
        deliver(rng, generate_run(rng, f"{run_prefix}-{seed}-{n:05d}", shape=shape), damage)
        for n in range(runs)
    ]
    return list(interleave(rng, generated))


def to_jsonl(events: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE) for event in events)
