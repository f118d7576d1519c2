"""The shape of a declaration: what a consumer reads, writes, keeps, reads of the settings.

A :class:`Consumer` is what ``symfonic-stream run <name>`` starts: one or more
:class:`Engine` (one :class:`~symfonic_stream.engine.topology.Topology` each). A
:class:`Reader` reads topics without a group and writes without transactions (the gateway).
Topics are declared once, as :class:`Topic` (``symfonic_stream.consumers.topics``), with the
:class:`Message` kinds they carry. Everything that lists consumers, topics or groups is
derived from these: the engine's topologies and the topic list (``symfonic_stream.app``),
the ACL plan, the AsyncAPI document and the chart's generated files. The walk-through is
docs/engine.md, "Writing a consumer".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Processor
from symfonic_stream.models.names import TopicNames

if TYPE_CHECKING:
    from symfonic_stream.kafka.specs import TopicSpec


@dataclass(frozen=True, slots=True)
class Message:
    """One kind of record on a topic: an AsyncAPI message (``id``) and its wire model (a
    pydantic model, or a union of them such as an envelope's).

    ``model`` ``None``: bytes the project does not give a JSON form (a dead letter keeps
    the original record's bytes; a changelog record is private)."""

    id: str
    model: Any = None


@dataclass(frozen=True, slots=True)
class Outside:
    """Someone outside the project who sends to or receives from a topic (an AsyncAPI
    operation: ``operation`` is its id)."""

    operation: str
    action: Literal["send", "receive"]
    summary: str


@dataclass(frozen=True, slots=True)
class Topic:
    """One topic, or one family of topics (``family``: its writer's wiring says which
    topics of it a deployment has, such as the router's queues from its rules), once."""

    #: The AsyncAPI channel id.
    id: str
    #: Its name under a prefix (a family's may hold ``{parameters}``).
    name: Callable[[TopicNames], str]
    #: One line, printed by ``topics ensure``.
    purpose: str
    #: What a reader of the AsyncAPI document needs to know of it.
    description: str
    messages: tuple[Message, ...]
    internal: bool = False
    #: Compacted (``cleanup.policy=compact``): only each key's latest record is kept.
    compact: bool = False
    family: bool = False
    #: AsyncAPI parameters of a family's ``{parameters}``.
    parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    outside: tuple[Outside, ...] = ()


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
    #: The names of the processor's state stores; any: a changelog
    #: ``<prefix>-<name>-state-changelog``, co-partitioned with ``reads``.
    stores: tuple[str, ...] = ()
    #: The ``Settings`` fields ``wire`` and the processor read (checked by the tests).
    settings: tuple[str, ...] = ()


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
    writes: tuple[Write, ...] = ()
    settings: tuple[str, ...] = ()
