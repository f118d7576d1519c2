"""The pause router: raw AgentEvents with an interrupt → tickets on human queues (SPEC §7)."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.engine.service import serve
from symfonic_stream.engine.topology import Topology


def topology(settings: Settings) -> Topology:
    from symfonic_stream.pauses.router import router_topology

    return router_topology(settings)


async def main(settings: Settings) -> int:
    return await serve(topology(settings), settings)
