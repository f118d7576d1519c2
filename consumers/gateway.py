"""The SSE gateway's read side: both projections, every partition, in no group."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Reader
from symfonic_stream.consumers.topics import STREAM_CHUNKS, STREAM_EVENTS

GATEWAY = Reader(
    name="gateway",
    title="the SSE gateway",
    summary="runs served to browsers and AG-UI clients from `<prefix>.stream-events` and "
    "`<prefix>.stream-chunks`",
    reads=(STREAM_EVENTS, STREAM_CHUNKS),
    # Its own settings (config.py's ``gateway_`` fields), besides the Kafka client's.
    settings=tuple(name for name in Settings.model_fields if name.startswith("gateway_")),
)
