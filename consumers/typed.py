"""The typed projector: raw AgentEvents to the typed StreamEvent topic (contract §3)."""

from __future__ import annotations

from symfonic_stream.consumers.declaration import Consumer
from symfonic_stream.consumers.projectors import PROJECTOR_RESOURCES, projector_engine
from symfonic_stream.consumers.topics import STREAM_EVENTS

TYPED = Consumer(
    name="typed",
    title="the typed projector",
    summary="raw events to `<prefix>.stream-events`",
    engines=(projector_engine("typed", STREAM_EVENTS, "Typed events, end and gap records."),),
    scales_on="typed",
    resources=PROJECTOR_RESOURCES,
)
