"""What the benchmarks feed: the raw stream of realistic kernel runs
(:mod:`symfonic_stream.tools.synthetic`), single raw events, and projected records.

The stream: about 60 % text deltas of 20-200 bytes, thinking, tool calls with arguments and
their results, usage on ``done``, terminals (done, error, cancelled) and a few pauses; runs
of 20-400 events interleaved as concurrent kernels publish them, with ~2 % re-sent
duplicates and ~2 % bounded reordering. Everything is seeded, so a size and a seed always give the
same stream.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from symfonic_stream.tools.synthetic import Damage, RunShape, synthetic_stream

#: ``synthetic.generate_run`` starts every run's clock here.
_GENERATOR_EPOCH = 1_764_480_000.0
#: Runs per generated slice (they are interleaved within a slice); fewer for tiny streams,
#: so even those hold whole runs with their terminals.
_RUNS_PER_SLICE = 200
_MEAN_RUN_EVENTS = 210


@dataclass(frozen=True, slots=True)
class Workload:
    """The events in publication order (dicts, so timestamps can be refreshed)."""

    events: list[dict[str, Any]]
    runs: int

    def __len__(self) -> int:
        return len(self.events)

    def encoded(self) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` per event, as published for the throughput runs."""
        return [(e["run_id"].encode(), orjson.dumps(e)) for e in self.events]

    def describe(self) -> dict[str, Any]:
        kinds = Counter(e["kind"] for e in self.events)
        seen: set[tuple[str, int]] = set()
        duplicates = 0
        for e in self.events:
            ident = (e["run_id"], e["index"])
            duplicates += ident in seen
            seen.add(ident)
        sizes = [len(orjson.dumps(e)) for e in self.events]
        total = len(self.events)
        texts = [len(e["text"]) for e in self.events if e["kind"] == "text_delta"]
        return {
            "events": total,
            "runs": self.runs,
            "mean_value_bytes": round(sum(sizes) / total, 1),
            "kind_shares": {k: round(n / total, 4) for k, n in kinds.most_common()},
            "text_delta_bytes": [min(texts), max(texts)] if texts else [0, 0],
            "duplicate_share": round(duplicates / total, 4),
            "pauses": sum(1 for e in self.events if e.get("interrupt") is not None),
        }


def make_workload(events: int, seed: int = 7, pause_share: float = 0.03,
                  reorder: bool = True) -> Workload:
    """About ``events`` raw events (the last slice is cut) from whole, damaged runs.

    Timestamps are moved to the present, so a pause's ``expires_at`` is an hour ahead of
    now (a live ticket, not an expired one) and the kernel timestamps look current.
    ``pause_share`` is the share of runs that end in a pause (``ask_user``/``interrupt``).
    ``reorder=False`` delivers every run in kernel order (re-sent duplicates kept).
    """
    per_slice = max(5, min(_RUNS_PER_SLICE, events // _MEAN_RUN_EVENTS))
    shape = RunShape(pause_share=pause_share)
    shift = round(time.time() - _GENERATOR_EPOCH, 3)
    out: list[dict[str, Any]] = []
    slice_number = 0
    while len(out) < events:
        stream = synthetic_stream(
            seed + slice_number,
            per_slice,
            shape=shape,
            damage=Damage() if reorder else Damage(reorder_share=0.0),
            run_prefix=f"bench{slice_number}",
        )
        for event in stream:
            # ``deliver`` appends a duplicate as the same dict: copy, then shift once.
            shifted = dict(event)
            shifted["timestamp"] = round(event["timestamp"] + shift, 6)
            pending = event.get("interrupt")
            if pending is not None:
                shifted["interrupt"] = {**pending, "expires_at": pending["expires_at"] + shift}
            out.append(shifted)
        slice_number += 1
    del out[events:]
    return Workload(out, len({e["run_id"] for e in out}))


def with_timestamp(event: dict[str, Any], now: float) -> bytes:
    """``event`` encoded with kernel timestamp ``now`` (a pause expires an hour later)."""
    fresh = dict(event)
    fresh["timestamp"] = now
    pending = event.get("interrupt")
    if pending is not None:
        fresh["interrupt"] = {**pending, "expires_at": now + 3600.0}
    return orjson.dumps(fresh)


def raw_event(run_id: str, index: int, kind: str, timestamp: float, **fields: Any) -> bytes:
    """One raw AgentEvent, its fields in the kernel's order."""
    return orjson.dumps({"run_id": run_id, "index": index, "kind": kind,
                         "timestamp": timestamp, **fields})


def envelope(run_id: str, seq: int, ts: float, kind: str, text: str) -> bytes:
    """A projected record of a run, as the typed projector writes one (an event body)."""
    return orjson.dumps({"run_id": run_id, "seq": seq, "source_index": seq, "ts": ts,
                         "event": {"type": kind, "text": text}})


def end_envelope(run_id: str, seq: int, ts: float) -> bytes:
    """A run's closing record, as the projectors write it."""
    return orjson.dumps({"run_id": run_id, "seq": seq, "source_index": seq, "ts": ts,
                         "end": {"status": "completed", "error": None}})
