"""The output envelopes on the stream-events and stream-chunks topics (contract §5).

Every record is exactly one of: an event, a run segment's ``end``, or a ``gap``. ``seq``
is dense per run and per topic; ``source_index`` is the kernel's own index.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from symfonic_stream.models.stream_event import StreamChunk, StreamEvent
from symfonic_stream.models.trace import Traced

EndStatus = Literal["completed", "error", "cancelled", "paused", "abandoned"]


class _Envelope(Traced):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int = Field(ge=0)
    ts: float = Field(
        description="The source event's timestamp (for a gap: the first event after it)."
    )


class RunEnd(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: EndStatus
    error: dict[str, Any] | None = None


class IndexRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    from_index: int = Field(ge=0)
    to_index: int = Field(ge=0)


class TypedEventRecord(_Envelope):
    source_index: int = Field(ge=0)
    event: StreamEvent


class ChunkEventRecord(_Envelope):
    source_index: int = Field(ge=0)
    event: StreamChunk


class EndRecord(_Envelope):
    #: None only for ``abandoned``: no event ended the run, the idle timeout did.
    source_index: int | None = Field(ge=0)
    end: RunEnd


class GapRecord(_Envelope):
    source_index: None = None
    gap: IndexRange


StreamEventRecord = TypedEventRecord | EndRecord | GapRecord
StreamChunkRecord = ChunkEventRecord | EndRecord | GapRecord
