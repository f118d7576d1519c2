"""Builders for raw AgentEvents used across the unit tests."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from symfonic_stream.engine.processor import Collector, OutputRecord
from symfonic_stream.models.agent_event import AgentEvent


def raw(kind: str, index: int = 0, run_id: str = "run-1", **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "run_id": run_id,
        "index": index,
        "kind": kind,
        "timestamp": 100.0 + index,
    }
    event.update(fields)
    return event


def event(kind: str, index: int = 0, run_id: str = "run-1", **fields: Any) -> AgentEvent:
    return AgentEvent.model_validate(raw(kind, index, run_id, **fields))


def interrupt(kind: str = "ask_user", **overrides: Any) -> dict[str, Any]:
    pending: dict[str, Any] = {
        "name": "ask_user" if kind == "ask_user" else "approval",
        "kind": kind,
        "payload": {"questions": [{"question": "Continue?"}]},
        "token": "tok-1",
        "tool_call_id": "call-9",
        "interrupt_id": "intr-1",
        "run_id": "run-1",
        "session_id": "sess-1",
        "expires_at": 4000.0,
        "resumable": True,
    }
    pending.update(overrides)
    return pending


def tool_call(**overrides: Any) -> dict[str, Any]:
    call: dict[str, Any] = {
        "id": "call-1",
        "name": "search",
        "arguments": None,
        "result": None,
        "error": None,
        "duration_ms": None,
    }
    call.update(overrides)
    return call


def write_changes(processor: Any, out: Any) -> None:
    """Commit step 2 for a processor under test: its stores' changes into ``out.changelog``."""
    from symfonic_stream.state.store import write_changes as write

    write(processor.stores, out.changelog)


def restore_from(processor: Any, state: dict[bytes, bytes | None]) -> None:
    """Restore a fresh processor from changelog records, as the engine does."""
    from symfonic_stream.state.store import restore_records

    assert restore_records(processor.stores, state.items()) == len(state), sorted(state)
    processor.restored()


def store_contents(processor: Any) -> list[Any]:
    """Every store's keys, values as its changelog carries them, and deadlines: what a
    rolled-back processor must share with one restored from the changelog."""
    return [sorted((key, store.codec.encode(value), store.deadline(key))
                   for key, value in store.items()) for store in processor.stores]


def package_sources(package: Path, suffixes: tuple[str, ...] = (".py",)) -> list[Path]:
    """Every ``.py`` file (or file of ``suffixes``) of the package, through
    ``symfonic_stream/consumers``, the link to the top-level ``consumers/`` (``Path.rglob``
    does not follow links before Python 3.13)."""
    found = []
    for folder, _, files in os.walk(package, followlinks=True):
        found.extend(Path(folder) / name for name in files if name.endswith(suffixes))
    return sorted(found)


@dataclass(slots=True)
class Verdicts(Collector):
    """A collector that keeps the resume validator's review-tickets records (``reviews``)
    apart from its verdicts and other outputs (``outputs``)."""

    reviews: list[OutputRecord] = field(default_factory=list)

    def emit(self, record: OutputRecord) -> None:
        Collector.emit(self, record)  # (with the trace headers in hand; slots: no super())
        if record.topic.endswith(".review-tickets"):
            self.reviews.append(self.outputs.pop())


def committer_for(producer: Any, topology: Any, **settings: Any) -> Any:
    """A process committer (engine/task.py) of ``topology``'s transactions whose every
    producer is ``producer``, a stand-in: a closed one is opened again when the committer
    takes a new one."""
    from prometheus_client import CollectorRegistry

    from symfonic_stream.engine.task import Committer
    from symfonic_stream.engine.transaction import Transactions
    from symfonic_stream.observability.metrics import ConsumerMetrics

    async def new_producer(partition: int) -> Any:
        producer.closed = False
        producer.started_for = partition
        return producer

    metrics = settings.pop("metrics", None) or ConsumerMetrics("copier", CollectorRegistry())
    return Committer(new_producer, Transactions(topology, metrics), **settings)
