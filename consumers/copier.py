"""The copier consumer (benchmark baseline): raw topic → ``<prefix>.copier-output``."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.engine.service import serve
from symfonic_stream.engine.topology import Topology
from symfonic_stream.processors.passthrough import copier_topology


def topology(settings: Settings) -> Topology:
    return copier_topology(settings)


async def main(settings: Settings) -> int:
    return await serve(topology(settings), settings)
