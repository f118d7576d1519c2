"""One viewer's stream of one run: the SSE messages after its resume point, then live.

The viewer's whole state is a cursor, the next seq to send: records come from the run's
held records (:mod:`.runs`), or, when the cursor is below what memory still holds, from
Kafka (:func:`.tail.read_back`, from the run's first offset). It ends after the run's
closing ``end`` record; a paused run's stream stays open and goes on when the run does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import asdict, dataclass, field

import orjson

from symfonic_stream.gateway.agui import AgUiRun
from symfonic_stream.gateway.agui import sse as agui_sse
from symfonic_stream.gateway.runs import Held, Run
from symfonic_stream.gateway.sse import control, message
from symfonic_stream.gateway.tail import TopicTail, read_back


@dataclass(slots=True)
class Viewing:
    """What the response needs to know once the stream is over."""

    started: float = field(default_factory=time.monotonic)
    first_sent: float | None = None
    sent: int = 0
    #: The run's closing ``end`` record was sent (else the client went away or was dropped).
    run_ended: bool = False


@dataclass(frozen=True, slots=True)
class Truncated:
    """Seqs ``from_seq``-``to_seq`` cannot be served: said, never skipped silently."""

    from_seq: int
    to_seq: int
    reason: str


async def records(tail: TopicTail, run: Run, after: int, viewing: Viewing,
                  on_read_back: Callable[[int], None] | None = None
                  ) -> AsyncGenerator[Held | Truncated, None]:
    """``run``'s records with a seq above ``after``, then live, until its closing end.
    ``on_read_back`` is told the offset each read from Kafka starts at."""
    next_seq = after + 1
    if next_seq < run.first_seq:
        yield Truncated(next_seq, run.first_seq - 1, "before the gateway's window")
        next_seq = run.first_seq
    offset = run.first_offset  # where a read-back starts (moves on as it reads)
    while True:
        if next_seq < run.held_from:
            until = tail.positions[run.partition]
            if on_read_back is not None:
                on_read_back(offset)
            reading = read_back(tail.settings, tail.topic, run.partition, run.run_id,
                                offset, until)
            async with contextlib.aclosing(reading):
                async for at, envelope, data in reading:
                    offset = at + 1
                    if envelope.seq < next_seq:
                        continue
                    yield Held(envelope.seq, envelope.name, data, envelope.closes)
                    next_seq = envelope.seq + 1
                    if envelope.closes:
                        viewing.run_ended = True
                        return
                    if next_seq >= run.held_from:
                        break  # memory holds the rest
                else:
                    offset = until  # read to the tail's position
            if next_seq < run.held_from and offset >= until:
                # Kafka no longer has them either (retention): say so, never skip silently.
                yield Truncated(next_seq, run.held_from - 1, "no longer on the topic")
                next_seq = run.held_from
            continue
        held = run.held_after(next_seq - 1)
        for record in held:
            yield record
            next_seq = record.seq + 1
            if record.closes:
                viewing.run_ended = True
                return
        if held:
            continue
        if run.closed:
            viewing.run_ended = True
            return
        await run.changed.wait()


async def envelope_messages(items: AsyncGenerator[Held | Truncated, None], run_id: str,
                            viewing: Viewing) -> AsyncIterator[bytes]:
    """The default format: one SSE message per envelope, exactly as on the topic."""
    async with contextlib.aclosing(items):
        async for item in items:
            if isinstance(item, Held):
                yield _sent(viewing, message(item.seq, item.name, item.data))
            else:
                yield _sent(viewing, control("truncated", {"run_id": run_id, **asdict(item)}))


async def agui_messages(items: AsyncGenerator[Held | Truncated, None], run_id: str, after: int,
                        viewing: Viewing) -> AsyncIterator[bytes]:
    """``?format=ag-ui``: the run is translated from its start (:mod:`.agui`), and what
    belongs to seqs up to ``after`` is not sent."""
    translation = AgUiRun(run_id)
    async with contextlib.aclosing(items):
        async for item in items:
            if isinstance(item, Truncated):
                if item.to_seq > after:
                    truncated = {"type": "CUSTOM", "name": "truncated", "value": asdict(item)}
                    yield _sent(viewing, b"data: %s\n\n" % orjson.dumps(truncated))
                continue
            events = translation.translate(orjson.loads(item.data))
            if item.seq > after and events:
                yield _sent(viewing, agui_sse(events, item.seq))


def _sent(viewing: Viewing, data: bytes) -> bytes:
    if viewing.first_sent is None:
        viewing.first_sent = time.monotonic()
    viewing.sent += 1
    return data
