"""One declaration per consumer, and the registry of them all.

Each module here declares one consumer (:mod:`.typed`, :mod:`.chunks`, :mod:`.pauses`,
:mod:`.resumes`, :mod:`.copier`) or reader (:mod:`.gateway`) with the shapes of
:mod:`.declaration`, over the topics of :mod:`symfonic_stream.models.topics`. The registry
finds them: adding a consumer is a module here and its processor; ``make schemas`` then
regenerates what is derived outside the package (the AsyncAPI document, the chart's
files), and the tests fail until it has (docs/engine.md, "Writing a consumer").
"""

from __future__ import annotations

import importlib
import pkgutil

from symfonic_stream.consumers.declaration import (
    Consumer,
    Engine,
    Reader,
    Resources,
    Wire,
    Wiring,
    Write,
)
from symfonic_stream.models.topics import DEAD_LETTER, TOPICS, Message, Outside, Topic


def _declared() -> tuple[tuple[Consumer, ...], tuple[Reader, ...]]:
    """Every Consumer and Reader a module of this package declares, by metrics port."""
    found: dict[int, Consumer | Reader] = {}
    for module in pkgutil.iter_modules(__path__):
        for value in vars(importlib.import_module(f"{__name__}.{module.name}")).values():
            if isinstance(value, Consumer | Reader):
                found.setdefault(id(value), value)
    ordered = sorted(found.values(), key=lambda declared: declared.metrics_port)
    return (tuple(c for c in ordered if isinstance(c, Consumer)),
            tuple(r for r in ordered if isinstance(r, Reader)))


#: Every consumer ``symfonic-stream run`` can start, and the processes that read without a
#: group, each in the order of its metrics port (the deployment's order).
CONSUMERS, READERS = _declared()


# Everything derived reads the registry through these functions, when it is called: so a
# declaration added to CONSUMERS (by a test, too) is everywhere at once.


def registered() -> tuple[Consumer, ...]:
    """Every consumer ``run`` can start."""
    return CONSUMERS


def consumer(name: str) -> Consumer:
    """The consumer called ``name`` (``KeyError`` when there is none)."""
    for declared in registered():
        if declared.name == name:
            return declared
    raise KeyError(name)


def deployed() -> tuple[Consumer, ...]:
    """The consumers a deployment runs (the chart's Deployments, the ACL plan's users)."""
    return tuple(c for c in registered() if c.deployed)


def deployed_names() -> tuple[str, ...]:
    return tuple(c.name for c in deployed())


def processes() -> tuple[str, ...]:
    """Every kind of process, by name: the consumers ``run`` starts, then the readers."""
    return (*(c.name for c in registered()), *(r.name for r in READERS))


def metrics_port(process: str) -> int:
    """The metrics port of ``process`` when ``SYMFONIC_METRICS_PORT`` is unset, as its
    declaration says (``ValueError`` for a name that is none)."""
    every: tuple[Consumer | Reader, ...] = (*registered(), *READERS)
    for declared in every:
        if declared.name == process:
            return declared.metrics_port
    raise ValueError(f"no process {process!r}: one of {', '.join(processes())}")


def engines(consumers: tuple[Consumer, ...] | None = None) -> tuple[Engine, ...]:
    """Every engine of ``consumers`` (default: every registered one), in order."""
    chosen = registered() if consumers is None else consumers
    return tuple(engine for c in chosen for engine in c.engines)


def topics_of(consumers: tuple[Consumer, ...], readers: tuple[Reader, ...] = ()
              ) -> tuple[Topic, ...]:
    """The topics ``consumers`` and ``readers`` read or write, and the dead letters (every
    engine writes them): in the catalogue's order (:data:`.topics.TOPICS`), then any
    other in the order declared."""
    used = [DEAD_LETTER, *(t for r in readers for t in r.reads),
            *(w.topic for r in readers for w in r.writes)]
    for engine in engines(consumers):
        used += [engine.reads, *(write.topic for write in engine.writes)]
    ids = {topic.id for topic in used}
    catalogued = [topic for topic in TOPICS if topic.id in ids]
    known = {topic.id for topic in catalogued}
    for topic in used:
        if topic.id not in known:
            known.add(topic.id)
            catalogued.append(topic)
    return tuple(catalogued)


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
    "metrics_port",
    "processes",
    "registered",
    "topics_of",
]
