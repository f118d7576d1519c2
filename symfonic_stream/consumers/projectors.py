"""What the projectors share: one engine over the raw topic per declared projection
(:data:`~symfonic_stream.projections.declared.PROJECTIONS`), a projection apart."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Consumer, Engine, Resources, Wiring, Write
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import AGENT_EVENTS
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor, projection_of
from symfonic_stream.projections.declared import DeclaredProjection

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


def projector(projection: DeclaredProjection, title: str, writes: str, metrics_port: int
              ) -> Consumer:
    """The consumer of ``projection``: its name, reading the raw topic, writing the
    projection's topic (``writes`` says what goes there)."""

    def wire(settings: Settings, names: TopicNames) -> Wiring:
        topic, limits = projection.topic.name(names), guard_limits(settings)
        decode = settings.decode_limits()
        project = projection_of(projection.name, ticket_tokens=settings.stream_ticket_tokens)
        return Wiring(lambda partition: ProjectorProcessor(project, topic, limits, decode=decode))

    return Consumer(
        name=projection.name,
        title=title,
        summary=f"raw events to `{projection.topic.template.format(prefix='<prefix>')}`",
        engines=(Engine(name=projection.name, reads=AGENT_EVENTS,
                        writes=(Write(projection.topic, writes),), wire=wire),),
        scales_on=projection.name,
        metrics_port=metrics_port,
        resources=PROJECTOR_RESOURCES,
    )
