"""One run's guard state and one buffered event, and how each travels in the changelog.

The guard keeps two stores (docs/engine.md, "State stores"):

* ``run/<run_id>``: a :class:`RunState`, an 8-element JSON array (``[next_index, next_seq,
  status, closed_at, touched_at, last_ts, pause_expires_at, tenant]``, typically 40 to 70
  bytes; ``tenant`` the run's owner, contract §9);
* ``buf/<run_id>/<index>``: one event waiting behind a hole, as its original record (so a
  run that closes while it waits can still dead-letter it whole after a restore): a JSON
  header line, then the raw value as it arrived, unescaped.

So a change writes what changed: a run's counters, or one buffered event, never a run's
whole buffer again.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass

import orjson

from symfonic_stream.engine.processor import InputRecord


class RunStatus(enum.IntEnum):
    OPEN = 0
    PAUSED = 1
    CLOSED = 2


#: The ``touched_at`` of a run read from 0.x state, which had none.
NOT_TOUCHED = -1.0


@dataclass(slots=True)
class Pending:
    """An event that arrived before its turn, waiting behind a hole: only its record (the
    event is decoded again when it is released, which is rarer than holding it)."""

    record: InputRecord
    arrived_at: float
    #: The event's timestamp: a gap before it carries it as its ``ts``.
    ts: float
    #: Its changelog value's length: what the partition's buffered-bytes bound counts.
    size: int = 0


@dataclass(slots=True)
class RunState:
    next_index: int = 0
    next_seq: int = 0
    status: RunStatus = RunStatus.OPEN
    #: When the run closed (clock time), for its grace.
    closed_at: float = 0.0
    #: When its last event arrived (clock time), for the idle timeout.
    touched_at: float = 0.0
    #: Its last released event's timestamp: an ``abandoned`` end's ``ts``.
    last_ts: float = 0.0
    #: A paused run's pause ``expires_at`` (0: not paused).
    pause_expires_at: float = 0.0
    #: The tenant that owns the run id: its first event's ``scope.tenant`` (None: that
    #: event named none). Every output of the run carries it; another tenant's events
    #: under the id are dead-lettered ``foreign_tenant`` (contract §9).
    tenant: str | None = None
    #: False for a run read from state written before runs had owners: its next event's
    #: tenant becomes its owner.
    owned: bool = True
    #: Events a record of 0.x held in itself, by index (None for any other record): the
    #: guard moves them under ``buf`` keys of their own once restored.
    legacy_buffer: dict[int, Pending] | None = None


def encode_run(state: RunState) -> bytes:
    """Serialize for the changelog (compact JSON array)."""
    return orjson.dumps([
        state.next_index, state.next_seq, int(state.status), state.closed_at,
        state.touched_at, state.last_ts, state.pause_expires_at,
        *((state.tenant,) if state.owned else ()),
    ])


def decode_run(data: bytes) -> RunState:
    """Inverse of :func:`encode_run`. A 7-element array was written before runs had owners
    (its owner is its next event's tenant). A 4- or 5-element array is the format of 0.x,
    before buffered events had their own keys: its buffer is read into
    :attr:`RunState.legacy_buffer`, and the guard writes it under ``buf/`` keys once
    restored."""
    parts = orjson.loads(data)
    state = RunState(
        next_index=parts[0], next_seq=parts[1], status=RunStatus(parts[2]), closed_at=parts[3]
    )
    if len(parts) >= 7:
        state.touched_at, state.last_ts, state.pause_expires_at = parts[4], parts[5], parts[6]
        if len(parts) == 8:
            state.tenant = parts[7]
        else:
            state.owned = False
        return state
    state.owned = False
    state.touched_at = NOT_TOUCHED
    if len(parts) == 5 and parts[4]:
        state.legacy_buffer = {}
        for item in parts[4]:
            pending = _legacy_pending(item)
            state.legacy_buffer[orjson.loads(item[6])["index"]] = pending
    return state


def _legacy_pending(item: list[object]) -> Pending:
    arrived_at, topic, partition, offset, timestamp_ms, key, value, headers = item
    assert isinstance(value, str) and isinstance(headers, list)
    record = InputRecord(str(topic), int(partition), int(offset), _unb64(key),  # type: ignore[call-overload]
                         value.encode(), tuple((str(n), _unb64(d) or b"") for n, d in headers),
                         int(timestamp_ms))  # type: ignore[call-overload]
    event = orjson.loads(value)
    pending = Pending(record, float(arrived_at), float(event["timestamp"]))  # type: ignore[arg-type]
    pending.size = len(encode_pending(pending))
    return pending


def pending_key(run_id: str, index: int) -> str:
    """The ``buf`` store's key of one buffered event."""
    return f"{run_id}/{index}"


def split_pending_key(key: str) -> tuple[str, int]:
    """Inverse of :func:`pending_key` (a run id may hold ``/``; an index never does)."""
    run_id, _, index = key.rpartition("/")
    return run_id, int(index)


def encode_pending(pending: Pending) -> bytes:
    """One JSON header line (arrival, source, key, headers), then the value, unescaped."""
    record = pending.record
    head = orjson.dumps([
        pending.arrived_at, pending.ts, record.topic, record.partition, record.offset,
        record.timestamp_ms, _b64(record.key),
        [[name, _b64(data)] for name, data in record.headers],
    ])
    return head + b"\n" + (record.value or b"")


def decode_pending(data: bytes) -> Pending:
    """Inverse of :func:`encode_pending` (orjson never writes a raw newline)."""
    head, _, value = data.partition(b"\n")
    arrived_at, ts, topic, partition, offset, timestamp_ms, key, headers = orjson.loads(head)
    record = InputRecord(
        topic=str(topic),
        partition=int(partition),
        offset=int(offset),
        key=_unb64(key),
        value=value,
        headers=tuple((str(name), _unb64(data) or b"") for name, data in headers),
        timestamp_ms=int(timestamp_ms),
    )
    return Pending(record, float(arrived_at), float(ts), len(data))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: object) -> bytes | None:
    return None if text is None else base64.b64decode(str(text))
