"""The chunk projector: raw AgentEvents to the simple StreamChunk topic (contract §4)."""

from __future__ import annotations

from symfonic_stream.consumers.projectors import projector
from symfonic_stream.projections.declared import PROJECTIONS

CHUNKS = projector(PROJECTIONS["chunks"], "the chunk projector", "Chunks, end and gap records.",
                   metrics_port=9401)
