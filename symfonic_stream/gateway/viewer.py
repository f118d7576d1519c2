"""One viewer's stream of one run: the SSE messages after its resume point, then live.

The viewer's whole state is a cursor, the next seq to send: records come from the run's
held records (:mod:`.runs`), or, when the cursor is below what memory still holds, from
Kafka (:func:`.tail.read_back`, from the run's first offset). It ends after the run's
closing ``end`` record; a paused run's stream stays open and goes on when the run does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from symfonic_stream.gateway.runs import Run
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


async def envelopes(tail: TopicTail, run: Run, after: int, viewing: Viewing,
                    on_read_back: Callable[[int], None] | None = None) -> AsyncIterator[bytes]:
    """The messages for ``run`` with a seq above ``after``. ``on_read_back`` is told the
    offset each read from Kafka starts at."""
    next_seq = after + 1
    if next_seq < run.first_seq:
        yield control("truncated", {"run_id": run.run_id, "from_seq": next_seq,
                                    "to_seq": run.first_seq - 1,
                                    "reason": "before the gateway's window"})
        next_seq = run.first_seq
    offset = run.first_offset  # where a read-back starts (moves on as it reads)
    while True:
        if next_seq < run.held_from:
            until = tail.positions[run.partition]
            if on_read_back is not None:
                on_read_back(offset)
            records = read_back(tail.settings, tail.topic, run.partition, run.run_id,
                                offset, until)
            async with contextlib.aclosing(records):
                async for at, envelope, data in records:
                    offset = at + 1
                    if envelope.seq < next_seq:
                        continue
                    yield _sent(viewing, message(envelope.seq, envelope.name, data))
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
                yield control("truncated", {"run_id": run.run_id, "from_seq": next_seq,
                                            "to_seq": run.held_from - 1,
                                            "reason": "no longer on the topic"})
                next_seq = run.held_from
            continue
        held = run.held_after(next_seq - 1)
        for record in held:
            yield _sent(viewing, message(record.seq, record.name, record.data))
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


def _sent(viewing: Viewing, data: bytes) -> bytes:
    if viewing.first_sent is None:
        viewing.first_sent = time.monotonic()
    viewing.sent += 1
    return data
