"""What the two projectors share: one engine over the raw topic, a projection apart."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Engine, Resources, Topic, Wire, Wiring, Write
from symfonic_stream.consumers.topics import AGENT_EVENTS
from symfonic_stream.models.names import ProjectionName, TopicNames
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor, projection_of

#: The settings the decoder's bounds come from (``Settings.decode_limits``).
DECODE_SETTINGS = ("max_record_bytes", "max_json_depth", "max_integer")
#: A projector pod's defaults in the chart: it holds every open run's guard state.
PROJECTOR_RESOURCES = Resources(cpu="100m", memory="256Mi", memory_limit="512Mi")


def guard_limits(settings: Settings) -> GuardLimits:
    """The ordering guard's bounds, from the settings."""
    return GuardLimits(
        gap_timeout_s=settings.gap_timeout_s,
        run_buffer_max=settings.run_buffer_max,
        closed_run_grace_s=settings.closed_run_grace_s,
        run_idle_timeout_s=settings.run_idle_timeout_s,
        buffer_max_bytes=settings.buffer_max_bytes,
        max_output_bytes=settings.max_output_bytes,
        max_state_bytes=settings.max_state_record_bytes,
        punctuate_budget_s=settings.punctuate_budget_ms / 1000,
    )


GUARD_SETTINGS = (
    "gap_timeout_s", "run_buffer_max", "closed_run_grace_s", "run_idle_timeout_s",
    "buffer_max_bytes", "max_output_bytes", "max_state_record_bytes", "punctuate_budget_ms",
)


def _wire(projection: ProjectionName, output: Topic) -> Wire:
    def wire(settings: Settings, names: TopicNames) -> Wiring:
        topic, limits = output.name(names), guard_limits(settings)
        decode = settings.decode_limits()
        project = projection_of(projection, ticket_tokens=settings.stream_ticket_tokens)
        return Wiring(lambda partition: ProjectorProcessor(project, topic, limits, decode=decode))

    return wire


def projector_engine(projection: ProjectionName, output: Topic, summary: str) -> Engine:
    """The engine of the ``projection`` projector, writing ``output``."""
    return Engine(
        name=projection,
        reads=AGENT_EVENTS,
        writes=(Write(output, summary),),
        wire=_wire(projection, output),
        stores=("run", "buf"),
        settings=(*GUARD_SETTINGS, *DECODE_SETTINGS, "stream_ticket_tokens"),
    )
