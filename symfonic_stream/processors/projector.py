"""The projector processor: decode → ordering guard → typed or chunk projection.

The same class runs live (inside the engine, one per input partition) and offline (the
``project`` command), which is what makes the offline output the live output's oracle.
"""

from __future__ import annotations

from typing import Any

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL, AgentEvent
from symfonic_stream.models.decoding import (
    DEFAULT_LIMITS,
    DecodeError,
    DecodeLimits,
    decode_record,
    kind_label,
)
from symfonic_stream.models.names import ProjectionName
from symfonic_stream.processors.ordering import expiry
from symfonic_stream.processors.ordering.guard import GuardLimits, OrderingGuard
from symfonic_stream.projections import Body, Projection
from symfonic_stream.projections.chunks import project_chunks
from symfonic_stream.projections.typed import project_typed
from symfonic_stream.state.store import StateStore

PROJECTIONS: dict[ProjectionName, Projection] = {
    "typed": project_typed,
    "chunks": project_chunks,
}
#: The typed events that carry their ticket's token (the chunks carry none).
_TOKEN_EVENTS = frozenset({"ask_user", "interrupt"})


def projection_of(name: ProjectionName, *, ticket_tokens: bool = True) -> Projection:
    """The projection ``name``, live, offline and in a replay alike. Without
    ``ticket_tokens`` (``SYMFONIC_STREAM_TICKET_TOKENS=false``, for deployments that answer
    only through the gateway) a pause's typed event carries ``"token": ""``: whoever reads
    stream-events then cannot answer the pause (docs/security.md)."""
    projection = PROJECTIONS[name]
    if ticket_tokens or name != "typed":
        return projection

    def without_tokens(event: AgentEvent) -> list[Body]:
        bodies = projection(event)
        if event.interrupt is not None:
            for body in bodies:
                if body["type"] in _TOKEN_EVENTS:
                    body["token"] = ""
        return bodies

    return without_tokens


class ProjectorProcessor:
    """One input partition's projector: its runs' guard state and the projection."""

    def __init__(
        self,
        projection: Projection,
        output_topic: str,
        limits: GuardLimits,
        *,
        check_keys: bool = True,
        decode: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self.guard = OrderingGuard(projection, output_topic, limits)
        self._check_keys = check_keys
        self._decode = decode

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        try:
            event = decode_record(record.value, record.key, self._check_keys, self._decode)
        except DecodeError as rejected:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(record, rejected.reason, rejected.detail)
            return
        out.count_input(kind_label(event.kind))
        self.guard.accept(event, record, now, out)

    def punctuate(self, now: float, out: Collector) -> None:
        expiry.punctuate(self.guard, now, out)

    @property
    def stores(self) -> tuple[StateStore[Any], ...]:
        return (self.guard.runs, self.guard.waiting)

    def restored(self) -> None:
        expiry.restored(self.guard)

    def end_of_input(self, out: Collector) -> None:
        """Every hole still open becomes a gap; then no run needs remembering (a replay's
        progress topic keeps only its position)."""
        self.guard.flush(out)
        self.guard.forget_all()

    @property
    def buffered_events(self) -> int:
        return self.guard.buffered

    @property
    def active_runs(self) -> int:
        return len(self.guard.runs)
