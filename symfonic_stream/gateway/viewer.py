"""One viewer's stream of one run: the SSE messages after its resume point, then live.

The viewer's whole state is a cursor, the next seq to send: records come from the run's
held records (:mod:`.runs`), or, when the cursor is below what memory still holds, from
Kafka (:func:`.tail.read_back`, from the run's first offset). It ends after the run's
closing ``end`` record; a paused run's stream stays open and goes on when the run does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import asdict, dataclass, field
from typing import cast

import orjson

from symfonic_stream.gateway import aisdk
from symfonic_stream.gateway.agui import sse as agui_sse
from symfonic_stream.gateway.fanout import Encoded, Translation, frame
from symfonic_stream.gateway.pressure import CAPACITY, POLICIES, Policy, Unit, squeeze
from symfonic_stream.gateway.runs import Held, Run
from symfonic_stream.gateway.sse import control, message
from symfonic_stream.gateway.tail import TopicTail, read_back
from symfonic_stream.models.event_types import TRUNCATED, Format


@dataclass(slots=True)
class Viewing:
    """What the response needs to know once the stream is over."""

    started: float = field(default_factory=time.monotonic)
    first_sent: float | None = None
    sent: int = 0
    #: The run's closing ``end`` record was sent (else the client went away or was dropped).
    run_ended: bool = False
    #: Told each batch of live records as it goes to the client: records held in memory
    #: that came after the stream had caught up with its run (the delivery lag's).
    delivered: Callable[[list[Held]], None] | None = None
    #: The batch being sent is under pressure: more than ``capacity`` live records waited
    #: for this viewer (:mod:`.pressure`); and what the policy did to its streams so far.
    pressed: bool = False
    capacity: int = CAPACITY
    shed: int = 0
    merged: int = 0
    #: Its place in the run's shared translation was lost (:mod:`.fanout`): the stream
    #: ended as a too slow one's does.
    lost: bool = False


@dataclass(frozen=True, slots=True)
class Truncated:
    """Seqs ``from_seq``-``to_seq`` cannot be served: said, never skipped silently."""

    from_seq: int
    to_seq: int
    reason: str


#: One write to a viewer carries at most this many messages or bytes: what is ready goes
#: out in one write (a message per write cost the gateway ~80 µs of CPU each, and a
#: viewer behind the run catches up in few writes), in pieces that keep a write short.
BATCH_RECORDS = 256
BATCH_BYTES = 256 * 1024

Item = Held | Truncated


async def records(tail: TopicTail, run: Run, after: int, viewing: Viewing,
                  on_read_back: Callable[[int], None] | None = None
                  ) -> AsyncGenerator[list[Item], None]:
    """``run``'s records with a seq above ``after``, in batches of what is ready, then
    live, until its closing end. ``on_read_back`` is told the offset each read from Kafka
    starts at."""
    next_seq = after + 1
    if next_seq < run.first_seq:
        yield [Truncated(next_seq, run.first_seq - 1, "before the gateway's window")]
        next_seq = run.first_seq
    offset = run.first_offset  # where a read-back starts (moves on as it reads)
    # Once the stream has waited for its run, what memory gives it is live: its lag is the
    # gateway's delivery (the history before, and any read from Kafka, is not).
    live = idle = False  # (idle: woken, and nothing new came)
    # The run's next seq when the last batch went to the client (None: since then the stream
    # waited for its run): what came while the client took that write tells a slow client
    # from a run's burst.
    at_write: int | None = None
    while True:
        if next_seq < run.held_from:
            viewing.pressed = False
            if on_read_back is not None:
                on_read_back(offset)
            back = _ReadBack(tail, run, offset, next_seq)
            async with contextlib.aclosing(back.batches()) as batches:
                async for batch in batches:
                    yield batch
            next_seq, offset = back.next_seq, back.offset
            if back.closed:
                viewing.run_ended = True
                return
            continue
        held = run.held_after(next_seq - 1)
        viewing.pressed = (live and at_write is not None
                           and run.next_seq - at_write > viewing.capacity)
        if viewing.pressed:  # the whole backlog in one write, coalesced (:mod:`.pressure`)
            closing = next((n for n, h in enumerate(held) if h.closes), len(held) - 1)
            held = held[:closing + 1]
        for batch in [cast(list[Item], held)] if viewing.pressed else _pieces(held):
            if live and viewing.delivered is not None:
                viewing.delivered(cast(list[Held], batch))
            idle, at_write = False, run.next_seq
            yield batch
            last = batch[-1]
            assert isinstance(last, Held)
            next_seq = last.seq + 1
            if last.closes:
                viewing.run_ended = True
                return
        if held:
            continue
        if run.closed:
            viewing.run_ended = True
            return
        if idle:  # woken with nothing new (a heartbeat, a disconnect, a stop): say so
            yield []
        await run.changed.wait()
        live = idle = True
        at_write = None


def _pieces(held: list[Held]) -> list[list[Item]]:
    """``held`` cut into writes (:data:`BATCH_RECORDS`, :data:`BATCH_BYTES`), the last
    ending at the run's closing record if it is there."""
    pieces: list[list[Item]] = []
    piece: list[Item] = []
    size = 0
    for record in held:
        piece.append(record)
        size += len(record.data)
        if record.closes:
            break
        if len(piece) >= BATCH_RECORDS or size >= BATCH_BYTES:
            pieces.append(piece)
            piece, size = [], 0
    if piece:
        pieces.append(piece)
    return pieces


class _ReadBack:
    """One read from Kafka of a run's records that memory no longer holds: from
    ``offset`` to where the tail has read, or until memory holds the rest."""

    def __init__(self, tail: TopicTail, run: Run, offset: int, next_seq: int) -> None:
        self._tail, self._run = tail, run
        self.offset, self.next_seq = offset, next_seq
        self.closed = False

    async def batches(self) -> AsyncGenerator[list[Item], None]:
        tail, run = self._tail, self._run
        until = tail.positions[run.partition]
        reading = read_back(tail.settings, tail.topic, run.partition, run.run_id,
                            self.offset, until)
        batch: list[Item] = []
        async with contextlib.aclosing(reading):
            async for at, envelope, data, tenant in reading:
                self.offset = at + 1
                if envelope.seq < self.next_seq or not run.serves(tenant, envelope.from_event):
                    continue  # (another tenant's record: never served, as the tail held none)
                batch.append(Held(envelope.seq, envelope.name, data, envelope.closes))
                self.next_seq = envelope.seq + 1
                if envelope.closes or self.next_seq >= run.held_from:
                    self.closed = envelope.closes
                    break  # the run ended, or memory holds the rest
                if len(batch) >= BATCH_RECORDS:
                    yield batch
                    batch = []
            else:
                self.offset = until  # read to the tail's position
        if batch:
            yield batch
        if not self.closed and self.next_seq < run.held_from and self.offset >= until:
            # Kafka no longer has them either (retention): say so, never skip silently.
            yield [Truncated(self.next_seq, run.held_from - 1, "no longer on the topic")]
            self.next_seq = run.held_from


async def envelope_messages(items: AsyncGenerator[list[Item], None], run: Run,
                            viewing: Viewing, stream: str = "events"
                            ) -> AsyncGenerator[bytes, None]:
    """The default format: one SSE message per envelope, exactly as on the topic (each
    encoded once for every viewer); coalesced under pressure."""
    policy = POLICIES[(stream, Format.ENVELOPE)]
    async with contextlib.aclosing(items):
        async for batch in items:
            if viewing.pressed:
                units = [Unit(item.seq, [orjson.loads(item.data)], frame(item))
                         if isinstance(item, Held) else _truncated(run.run_id, item)
                         for item in batch]
                yield _squeezed(viewing, units, policy, _envelope_encoder(batch))
                continue
            yield _sent(viewing, len(batch), b"".join(
                frame(item) if isinstance(item, Held) else _truncated(run.run_id, item).frame
                or b"" for item in batch))


def _truncated(run_id: str, item: Truncated) -> Unit:
    return Unit(None, [], control("truncated", {"run_id": run_id, **asdict(item)}))


def _envelope_encoder(batch: list[Item]) -> Callable[[Unit], bytes]:
    names = {item.seq: item.name for item in batch if isinstance(item, Held)}

    def encode(unit: Unit) -> bytes:
        assert unit.seq is not None
        return message(unit.seq, names[unit.seq], orjson.dumps(unit.events[0]))

    return encode


def _squeezed(viewing: Viewing, units: list[Unit], policy: Policy,
              encode: Callable[[Unit], bytes]) -> bytes:
    """``units`` as a viewer under pressure gets them (:func:`.pressure.squeeze`), counted."""
    squeezed = squeeze(units, policy)
    viewing.shed += squeezed.shed
    viewing.merged += squeezed.merged
    return _sent(viewing, len(squeezed.units), b"".join(
        unit.frame if unit.frame is not None else encode(unit) for unit in squeezed.units))


async def agui_messages(items: AsyncGenerator[list[Item], None], run_id: str, after: int,
                        viewing: Viewing, *, started: bool = False, run: Run | None = None
                        ) -> AsyncGenerator[bytes, None]:
    """``?format=ag-ui``: one AG-UI run, the run's records after ``after`` up to its next
    ``end`` (a pause ends an AG-UI run too: its RUN_FINISHED is the response's last event).
    The run is translated from its start (:mod:`.agui`; one translation for every viewer,
    :mod:`.fanout`), and what belongs to seqs up to ``after`` is not sent. ``started``: the
    response sent RUN_STARTED already (an AG-UI resume's verdict comes first), so the
    translation's own is left out. ``run``: the run whose viewers share one translation."""
    translation = Translation(run_id, Format.AG_UI, run)
    policy = POLICIES[("events", Format.AG_UI)]
    async with contextlib.aclosing(items):
        async for batch in items:
            units: list[Unit] = []
            ended = False
            for item in batch:
                if isinstance(item, Truncated):
                    if item.to_seq > after:
                        truncated = {"type": TRUNCATED.type, "name": TRUNCATED.name,
                                     "value": asdict(item)}
                        units.append(Unit(None, [], b"data: %s\n\n" % orjson.dumps(truncated)))
                    continue
                encoded = translation.of(item)
                if encoded is None:
                    viewing.lost = True
                    return
                if item.seq <= after:
                    continue
                events, sent = encoded.events, encoded.frame
                if started and events and events[0]["type"] == "RUN_STARTED":
                    events, started = events[1:], False
                    sent = agui_sse(events, item.seq)
                if events:
                    units.append(Unit(item.seq, events, sent))
                if item.name == "end":  # the AG-UI run's end: the response's
                    ended = viewing.run_ended = True
                    break
            if units or not batch:
                yield _units(viewing, units, policy,
                             lambda unit: agui_sse(unit.events, cast(int, unit.seq)))
            if ended:
                return


async def aisdk_messages(items: AsyncGenerator[list[Item], None], run: Run, after: int,
                         viewing: Viewing, *, message_id: str | None,
                         told: list[aisdk.Chunk] | None = None
                         ) -> AsyncGenerator[bytes, None]:
    """``?format=ai-sdk``: the run's UI message from after ``after``, up to where the run
    waits (a pause that is its latest record) or its closing end, then ``[DONE]``. The run
    is translated from its start (:mod:`.aisdk`; one translation for every viewer,
    :mod:`.fanout`), and what belongs to seqs up to ``after`` is not sent. The response's
    first chunk is ``start`` naming ``message_id`` (None: the client's own message goes
    on), then ``told`` (a chat request's verdicts)."""
    translation = Translation(run.run_id, Format.AI_SDK, run)
    policy = POLICIES[("events", Format.AI_SDK)]
    first = [aisdk.start(message_id), *(told or [])]
    yield _sent(viewing, len(first), aisdk.sse(first, None))
    async with contextlib.aclosing(items):
        async for batch in items:
            units: list[Unit] = []
            ended = False
            for item in batch:
                if isinstance(item, Truncated):
                    if item.to_seq > after:
                        units.append(Unit(None, [], aisdk.sse(
                            [{"type": TRUNCATED.ai_sdk, "data": asdict(item)}], None)))
                    continue
                encoded: Encoded | None = translation.of(item)
                if encoded is None:
                    viewing.lost = True
                    return
                if item.seq <= after:
                    continue
                waits = item.name == "end" and not item.closes and run.next_seq <= item.seq + 1
                if waits:  # the run waits for an answer: the response's end
                    assert encoded.finish is not None
                    chunks = [*encoded.events, encoded.finish]
                    units.append(Unit(item.seq, chunks, aisdk.sse(chunks, item.seq)))
                elif encoded.events:
                    units.append(Unit(item.seq, encoded.events, encoded.frame))
                if item.closes or waits:
                    ended = viewing.run_ended = True
                    units.append(Unit(None, [], aisdk.DONE))
                    break
            if units or not batch:
                yield _units(viewing, units, policy,
                             lambda unit: aisdk.sse(unit.events, unit.seq))
            if ended:
                return


def _units(viewing: Viewing, units: list[Unit], policy: Policy,
           encode: Callable[[Unit], bytes]) -> bytes:
    """One write of ``units``: their frames, or under pressure what the policy makes of
    them."""
    if viewing.pressed:
        return _squeezed(viewing, units, policy, encode)
    return _sent(viewing, len(units), b"".join(cast(bytes, unit.frame) for unit in units))


def _sent(viewing: Viewing, messages: int, data: bytes) -> bytes:
    if data:
        if viewing.first_sent is None:
            viewing.first_sent = time.monotonic()
        viewing.sent += messages
    return data
