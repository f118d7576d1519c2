"""One run's guard state, and its compact changelog encoding.

A run with nothing buffered encodes as a 4-element JSON array (``[next_index, next_seq,
status, closed_at]``, typically 15 to 30 bytes), so 100,000 open runs cost a few MB in the
changelog. Buffered events keep their original record (key, value, headers, source) so a
run that closes while they wait can still dead-letter them whole after a restore.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, field

import orjson

from symfonic_stream.engine.records import InputRecord
from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.decoding import decode_agent_event


class RunStatus(enum.IntEnum):
    OPEN = 0
    PAUSED = 1
    CLOSED = 2


@dataclass(slots=True)
class Pending:
    """An event that arrived before its turn, waiting behind a hole."""

    event: AgentEvent
    record: InputRecord
    arrived_at: float


@dataclass(slots=True)
class RunState:
    next_index: int = 0
    next_seq: int = 0
    status: RunStatus = RunStatus.OPEN
    closed_at: float = 0.0
    buffer: dict[int, Pending] = field(default_factory=dict)


def encode_run(state: RunState) -> bytes:
    """Serialize for the changelog (compact JSON array)."""
    head: list[object] = [state.next_index, state.next_seq, int(state.status), state.closed_at]
    if state.buffer:
        head.append([_encode_pending(state.buffer[index]) for index in sorted(state.buffer)])
    return orjson.dumps(head)


def decode_run(data: bytes) -> RunState:
    """Inverse of :func:`encode_run`."""
    parts = orjson.loads(data)
    state = RunState(
        next_index=parts[0], next_seq=parts[1], status=RunStatus(parts[2]), closed_at=parts[3]
    )
    if len(parts) > 4:
        for item in parts[4]:
            pending = _decode_pending(item)
            state.buffer[pending.event.index] = pending
    return state


def _encode_pending(pending: Pending) -> list[object]:
    record = pending.record
    value = record.value or b""
    return [
        pending.arrived_at,
        record.topic,
        record.partition,
        record.offset,
        record.timestamp_ms,
        _b64(record.key),
        # The value parsed as JSON, so it is valid UTF-8 and can travel as a string.
        value.decode(),
        [[name, _b64(data)] for name, data in record.headers],
    ]


def _decode_pending(item: list[object]) -> Pending:
    arrived_at, topic, partition, offset, timestamp_ms, key, value, headers = item
    assert isinstance(value, str) and isinstance(headers, list)
    record = InputRecord(
        topic=str(topic),
        partition=int(partition),  # type: ignore[call-overload]
        offset=int(offset),  # type: ignore[call-overload]
        key=_unb64(key),
        value=value.encode(),
        headers=tuple((str(name), _unb64(data) or b"") for name, data in headers),
        timestamp_ms=int(timestamp_ms),  # type: ignore[call-overload]
    )
    return Pending(decode_agent_event(record.value), record, float(arrived_at))  # type: ignore[arg-type]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: object) -> bytes | None:
    return None if text is None else base64.b64decode(str(text))
