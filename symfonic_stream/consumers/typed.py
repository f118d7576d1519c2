"""The typed projector: raw AgentEvents to the typed StreamEvent topic (contract §3)."""

from __future__ import annotations

from symfonic_stream.consumers.projectors import projector
from symfonic_stream.projections.declared import PROJECTIONS

TYPED = projector(PROJECTIONS["typed"], "the typed projector",
                  "Typed events, end and gap records.", metrics_port=9400)
