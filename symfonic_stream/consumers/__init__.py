"""One declaration per consumer, and the registry of them all.

Each module declares one consumer (:mod:`.typed`, :mod:`.chunks`, :mod:`.pauses`,
:mod:`.resumes`, :mod:`.copier`) or reader (:mod:`.gateway`) with the shapes of
:mod:`.declaration`, over the topics of :mod:`.topics`. Adding a consumer is a module
here, its entry in :data:`CONSUMERS`, and its processor; ``make schemas`` then regenerates
what is derived outside the package (the AsyncAPI document, the chart's files), and the
tests fail until it has (docs/engine.md, "Writing a consumer").
"""

from __future__ import annotations

from symfonic_stream.consumers.chunks import CHUNKS
from symfonic_stream.consumers.copier import COPIER
from symfonic_stream.consumers.declaration import (
    Consumer,
    Engine,
    Message,
    Outside,
    Reader,
    Resources,
    Topic,
    Wire,
    Wiring,
    Write,
)
from symfonic_stream.consumers.gateway import GATEWAY
from symfonic_stream.consumers.pauses import PAUSES
from symfonic_stream.consumers.resumes import RESUMES_CONSUMER
from symfonic_stream.consumers.typed import TYPED

#: Every consumer ``symfonic-stream run`` can start, in the order the deployment lists them.
CONSUMERS: tuple[Consumer, ...] = (TYPED, CHUNKS, PAUSES, RESUMES_CONSUMER, COPIER)
#: The processes that read without a group.
READERS: tuple[Reader, ...] = (GATEWAY,)


def consumer(name: str) -> Consumer:
    """The consumer called ``name`` (``KeyError`` when there is none)."""
    for declared in CONSUMERS:
        if declared.name == name:
            return declared
    raise KeyError(name)


def deployed(consumers: tuple[Consumer, ...] = CONSUMERS) -> tuple[Consumer, ...]:
    """The consumers a deployment runs (the chart's Deployments, the ACL plan's users)."""
    return tuple(c for c in consumers if c.deployed)


def deployed_names() -> tuple[str, ...]:
    return tuple(c.name for c in deployed())


def engines(consumers: tuple[Consumer, ...] = CONSUMERS) -> tuple[Engine, ...]:
    """Every engine of ``consumers``, in order."""
    return tuple(engine for c in consumers for engine in c.engines)


__all__ = [
    "CONSUMERS",
    "READERS",
    "Consumer",
    "Engine",
    "Message",
    "Outside",
    "Reader",
    "Resources",
    "Topic",
    "Wire",
    "Wiring",
    "Write",
    "consumer",
    "deployed",
    "deployed_names",
    "engines",
]
