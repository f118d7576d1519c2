"""The projections of the raw stream, declared once (contract §3, §4): each one's name, the
function that projects an event, the topic its projector writes, the model of its event
records, and the name the gateway serves its streams under.

Everything that names a projection derives from :data:`PROJECTIONS`: the projector
consumers (``consumers/typed.py``, ``consumers/chunks.py``: a projection's name is its
projector's), the ``project``, ``replay`` and ``tail`` commands' choices, the SDK's run
reader, the gateway's streams and their metric label.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from symfonic_stream.models.envelope import ChunkEventRecord, TypedEventRecord
from symfonic_stream.models.topics import STREAM_CHUNKS, STREAM_EVENTS, Topic
from symfonic_stream.projections import Projection
from symfonic_stream.projections.chunks import project_chunks
from symfonic_stream.projections.typed import project_typed


@dataclass(frozen=True, slots=True)
class DeclaredProjection:
    """One projection and what follows from it."""

    #: Its name, and its projector consumer's (``symfonic-stream run typed``).
    name: str
    project: Projection
    #: The topic its projector writes.
    topic: Topic
    #: The model of its ``event`` records (its end and gap records are every projection's).
    event_record: type[BaseModel]
    #: The gateway's name for its streams (``/v1/runs/{id}/events``) and their metrics'
    #: ``stream`` label.
    stream: str
    #: Whether a pause's event carries the ticket's token (``SYMFONIC_STREAM_TICKET_TOKENS``
    #: may take it out).
    carries_tokens: bool = False


PROJECTIONS: dict[str, DeclaredProjection] = {p.name: p for p in (
    DeclaredProjection("typed", project_typed, STREAM_EVENTS, TypedEventRecord, "events",
                       carries_tokens=True),
    DeclaredProjection("chunks", project_chunks, STREAM_CHUNKS, ChunkEventRecord, "chunks"),
)}


def projection(name: str) -> DeclaredProjection:
    """The projection called ``name``; ``ValueError`` naming the known ones."""
    found = PROJECTIONS.get(name)
    if found is None:
        raise ValueError(f"no projection {name!r}: one of {', '.join(PROJECTIONS)}")
    return found
