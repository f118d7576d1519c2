"""The typed projector: raw AgentEvents → StreamEvent envelopes (SPEC §3, §5)."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.engine.service import serve
from symfonic_stream.engine.topology import Topology


def topology(settings: Settings) -> Topology:
    # Imported here so the engine and the other consumers never depend on the projector.
    from symfonic_stream.processors.projector import projector_topology

    return projector_topology("typed", settings)


async def main(settings: Settings) -> int:
    return await serve(topology(settings), settings)
