"""The shape of a declaration: what a consumer reads and writes, and how it is wired.

A :class:`Consumer` is what ``symfonic-stream run <name>`` starts: one or more
:class:`Engine` (one :class:`~symfonic_stream.engine.topology.Topology` each). A
:class:`Reader` reads topics without a group and writes without transactions (the gateway).
Topics are declared once, with the record kinds they carry, in
:mod:`symfonic_stream.models.topics`; what an engine keeps and reads of the settings is
what its wiring and processor do (:attr:`Engine.stores`, :attr:`Engine.settings`).
Everything that lists consumers, topics or groups is derived from these: the engine's
topologies and the topic list (``symfonic_stream.app``), the ACL plan, the AsyncAPI
document and the chart's generated files. The walk-through is docs/engine.md, "Writing a consumer".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Processor
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import Message, Topic

if TYPE_CHECKING:
    from symfonic_stream.kafka.specs import TopicSpec


@dataclass(frozen=True, slots=True)
class Write:
    """A topic an engine writes, inside its transactions (or a reader writes, without
    them); ``messages``: which of the topic's kinds (none named: all of them)."""

    topic: Topic
    summary: str
    messages: tuple[Message, ...] = ()

    def carries(self) -> tuple[Message, ...]:
        return self.messages or self.topic.messages


@dataclass(frozen=True, slots=True)
class Wiring:
    """What an engine's settings make of it: a processor per input partition, and what
    only the settings know (the router's queues and the topics it creates on first use)."""

    make: Callable[[int], Processor]
    #: The topics of the families it writes that can be known ahead: ``topics ensure``
    #: creates them, the engine checks them at start.
    family_topics: tuple[str, ...] = ()
    on_demand_topic: Callable[[str], TopicSpec | None] | None = None


#: Builds an engine's wiring from the settings (and the names under their prefix).
Wire = Callable[[Settings, TopicNames], Wiring]


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine of a consumer's process: consume ``reads`` in group ``<prefix>-<name>``,
    run the processor ``wire`` builds, write ``writes`` (and dead letters to
    ``<prefix>.dead-letter``) in one transaction per input partition batch."""

    #: Its group's suffix, its metrics' and dead letters' ``consumer`` label.
    name: str
    reads: Topic
    writes: tuple[Write, ...]
    wire: Wire

    @property
    def stores(self) -> tuple[str, ...]:
        """The names of its processor's state stores, as the processor makes them; any: a
        changelog ``<prefix>-<name>-state-changelog``, co-partitioned with ``reads``."""
        return _probe(self)[0]

    @property
    def settings(self) -> tuple[str, ...]:
        """The ``Settings`` fields its wiring and processor read, as they read them."""
        return _probe(self)[1]


class _Reading(Settings):
    """The defaults, noting every field read."""

    read: ClassVar[list[str]] = []

    def __getattribute__(self, name: str) -> Any:
        if name in type(self).model_fields and name not in _Reading.read:
            _Reading.read.append(name)
        return super().__getattribute__(name)


#: Each engine probed so far, by identity (a declaration holds a dict: not hashable).
_PROBED: dict[int, tuple[Engine, tuple[tuple[str, ...], tuple[str, ...]]]] = {}


def _probe(engine: Engine) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What ``engine``'s code says of it, asked once: wired under the default settings (read
    as they are read) and one processor made, its stores' names and the settings read. So
    no declaration restates what its processor keeps or its wiring reads."""
    probed = _PROBED.get(id(engine))
    if probed is None or probed[0] is not engine:
        _Reading.read = []
        processor = engine.wire(_Reading.model_construct(), TopicNames()).make(0)
        found = tuple(store.name for store in processor.stores), tuple(sorted(_Reading.read))
        probed = _PROBED[id(engine)] = (engine, found)
    return probed[1]


@dataclass(frozen=True, slots=True)
class Resources:
    """A pod's requests and memory limit: the chart's defaults for a consumer."""

    cpu: str
    memory: str
    memory_limit: str


@dataclass(frozen=True, slots=True)
class Consumer:
    """What ``symfonic-stream run <name>`` runs: its engines, on one event loop."""

    name: str
    #: What it is, e.g. "the typed projector" (the chart's values, the AsyncAPI tags).
    title: str
    #: What it does, after its title: "raw events to `<prefix>.stream-events`".
    summary: str
    engines: tuple[Engine, ...]
    #: The engine whose group's lag on its input the autoscaler follows.
    scales_on: str
    #: Where it serves ``/metrics`` when ``SYMFONIC_METRICS_PORT`` is unset: each kind of
    #: process its own (contract §8), so processes side by side never share one.
    metrics_port: int
    #: Its pod's defaults in the chart; ``None``: no deployment has it (the copier):
    #: ``run`` can start it, but the chart, the ACL plan, the AsyncAPI document and
    #: ``topics ensure`` without ``--with-copier`` leave it out.
    resources: Resources | None

    @property
    def deployed(self) -> bool:
        return self.resources is not None

    def engine(self, name: str) -> Engine:
        return next(engine for engine in self.engines if engine.name == name)


@dataclass(frozen=True, slots=True)
class Reader:
    """A process that reads topics with partitions it assigns itself, in no group (the
    gateway): every replica reads every partition. What it ``writes`` it sends with a plain
    (idempotent, not transactional) producer: no engine, no transactional id."""

    name: str
    title: str
    summary: str
    reads: tuple[Topic, ...]
    #: As a consumer's (:attr:`Consumer.metrics_port`).
    metrics_port: int
    writes: tuple[Write, ...] = ()
    settings: tuple[str, ...] = ()
