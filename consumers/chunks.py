"""The chunk projector: raw AgentEvents to the simple StreamChunk topic (contract §4)."""

from __future__ import annotations

from symfonic_stream.consumers.declaration import Consumer
from symfonic_stream.consumers.projectors import PROJECTOR_RESOURCES, projector_engine
from symfonic_stream.consumers.topics import STREAM_CHUNKS

CHUNKS = Consumer(
    name="chunks",
    title="the chunk projector",
    summary="raw events to `<prefix>.stream-chunks`",
    engines=(projector_engine("chunks", STREAM_CHUNKS, "Chunks, end and gap records."),),
    scales_on="chunks",
    resources=PROJECTOR_RESOURCES,
)
