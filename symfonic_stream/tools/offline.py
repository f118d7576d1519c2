"""Offline projection: JSONL of AgentEvents in, output envelopes out, no broker.

It runs exactly the live processor (decode, ordering guard, projection). Each input line
becomes an :class:`InputRecord` whose offset is its 1-based line number, so a dead letter
can say which line it was. The end of the input stands in for the gap timeout of every
hole still open.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

import orjson

from symfonic_stream.engine.processor import Collector, InputRecord, feed
from symfonic_stream.models.decoding import DEFAULT_LIMITS, DecodeLimits
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor, projection_of

OFFLINE_TOPIC = "offline"
# A wall clock that never moves: offline, no hole times out before the end of the input.
_NO_TIME = 0.0


@dataclass(slots=True)
class OfflineSummary:
    lines: int = 0
    records_out: int = 0
    dead_letters: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def project_lines(
    lines: Iterable[bytes],
    projection: str,
    limits: GuardLimits | None = None,
    decode: DecodeLimits = DEFAULT_LIMITS,
    *,
    ticket_tokens: bool = True,
) -> Iterator[Collector]:
    """Yield, per input line (and once at the end), what the guard released."""
    processor = ProjectorProcessor(
        projection_of(projection, ticket_tokens=ticket_tokens), OFFLINE_TOPIC,
        limits or GuardLimits(), check_keys=False, decode=decode,
    )
    out = Collector()
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        record = InputRecord(OFFLINE_TOPIC, 0, number, None, stripped)
        feed(processor, record, _NO_TIME, out)
        yield out
        out.clear()
    processor.end_of_input(out)
    yield out


def run_offline(
    source: IO[bytes],
    sink: IO[bytes],
    projection: str,
    dead_letters: IO[bytes] | None = None,
    limits: GuardLimits | None = None,
    decode: DecodeLimits = DEFAULT_LIMITS,
    *,
    ticket_tokens: bool = True,
) -> OfflineSummary:
    """Project ``source`` into ``sink``; bad lines go to ``dead_letters`` as JSONL.
    ``decode`` is what the live consumers accept (size, nesting, integers)."""
    summary = OfflineSummary()
    for released in project_lines(source, projection, limits, decode,
                                  ticket_tokens=ticket_tokens):
        for output in released.outputs:
            sink.write((output.value or b"") + b"\n")
        summary.records_out += len(released.outputs)
        for letter in released.dead_letters:
            summary.dead_letters += 1
            if dead_letters is not None:
                dead_letters.write(
                    orjson.dumps(
                        {
                            "reason": letter.reason.value,
                            "detail": letter.detail,
                            "line": letter.record.offset,
                        },
                        option=orjson.OPT_APPEND_NEWLINE,
                    )
                )
        for name, n in released.counts.items():
            summary.counts[name] = summary.counts.get(name, 0) + n
    return summary
