"""How a :class:`~symfonic_stream.engine.records.DeadLetter` becomes a Kafka record (contract §6).

The original key, value and headers are kept whole, so a dead letter can be replayed to
its source topic unchanged once the cause is fixed; four headers say why, where from and
which consumer gave up on it. The header names live with the reasons in
:mod:`symfonic_stream.models.dead_letter`.
"""

from __future__ import annotations

from symfonic_stream.engine.records import DeadLetter
from symfonic_stream.models.dead_letter import (
    DETAIL_MAX_BYTES,
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
)


def truncate_detail(detail: str) -> bytes:
    """UTF-8 ``detail`` cut to at most 1 KB without splitting a character."""
    raw = detail.encode("utf-8", errors="replace")
    if len(raw) <= DETAIL_MAX_BYTES:
        return raw
    return raw[:DETAIL_MAX_BYTES].decode("utf-8", errors="ignore").encode("utf-8")


def dead_letter_headers(letter: DeadLetter, consumer: str) -> list[tuple[str, bytes]]:
    """The original headers followed by the four ``symfonic-dlq-*`` headers."""
    record = letter.record
    return [
        *record.headers,
        (HEADER_REASON, str(letter.reason).encode("utf-8")),
        (HEADER_DETAIL, truncate_detail(letter.detail)),
        (HEADER_SOURCE, record.source.encode("utf-8")),
        (HEADER_CONSUMER, consumer.encode("utf-8")),
    ]
