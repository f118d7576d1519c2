"""The ACL plan: exactly what each principal of a deployment may do on Kafka (issue 17).

Nothing here names a topic by hand. A consumer's rights come from its declaration's
topologies (:mod:`symfonic_stream.consumers`, :mod:`symfonic_stream.app.topologies`): what
each engine reads, writes, keeps its state in, its group and its transactional ids; the
gateway's from what its declaration reads and writes; a reviewer's from
:class:`~symfonic_stream.models.names.TopicNames`. So a topology that starts writing a new
topic changes the plan with it, and ``symfonic-stream acls``, the Helm chart's Strimzi
KafkaUsers (tested against this module) and the authorizer tests all grant the same.

Every binding is ALLOW for any host. Operations are the ones the project's clients were
seen to need on a broker with ``StandardAuthorizer`` and no ``allow.everyone``
(``tests/integration/test_acls_live.py``); see docs/security.md for the table.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from symfonic_stream.config import Settings
from symfonic_stream.consumers import READERS, Reader, consumer, deployed_names
from symfonic_stream.engine.topology import Topology
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.pauses.rules import is_topic_part

ResourceType = Literal["TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER"]
PatternType = Literal["LITERAL", "PREFIXED"]
Operation = Literal[
    "READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"
]

#: Kafka's name of the one cluster resource.
CLUSTER_NAME = "kafka-cluster"
#: ``User:name`` (Kafka's principal form: a type, a colon, a name).
PRINCIPAL = re.compile(r"[A-Za-z][A-Za-z0-9]*:\S+")
#: The name of Kafka's wildcard principal (``User:*``: every user of that type).
WILDCARD = "*"

_TOPIC_READ: tuple[Operation, ...] = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")
_TOPIC_WRITE: tuple[Operation, ...] = ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")


class AclPlanError(ValueError):
    """A tenant, queue or principal that cannot be part of the plan; says which option."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ALLOW rule: ``principal`` may ``operation`` on the resource, from any host."""

    principal: str
    resource_type: ResourceType
    pattern: PatternType
    resource_name: str
    operation: Operation


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """The bindings of one principal on one resource pattern, operations together (one
    ``kafka-acls.sh`` line, one Strimzi ACL entry)."""

    principal: str
    resource_type: ResourceType
    pattern: PatternType
    resource_name: str
    operations: tuple[Operation, ...]


@dataclass(frozen=True, slots=True)
class ReviewerSpec:
    """A reviewer of ``tenant``'s queues (one queue, or all of them when ``queue`` is None)."""

    tenant: str
    queue: str | None = None

    @classmethod
    def parse(cls, text: str, option: str = "--reviewer") -> ReviewerSpec:
        """``TENANT`` or ``TENANT:QUEUE``; each part must be able to be part of a topic."""
        tenant, colon, queue = text.partition(":")
        for what, part in (("tenant", tenant), ("queue", queue)):
            # (The router's own check: no ``.``, so ``<prefix>.human.<tenant>.`` is
            # exactly one tenant's queues, see TopicNames.human_queue.)
            if (what == "tenant" or colon) and not is_topic_part(part):
                raise AclPlanError(
                    f"{option} {text!r}: the {what} {part!r} cannot be part of a topic name "
                    "(letters, digits, '_' and '-' only, at most 100)"
                )
        return cls(tenant, queue or None)


# --------------------------------------------------------------------------- names


def default_principal(settings: Settings, consumer: str) -> str:
    """``User:<prefix>-<consumer>``: the consumer's group name, so one user per group."""
    return f"User:{TopicNames(settings.topic_prefix).group(consumer)}"


def reviewer_principal(tenant: str) -> str:
    """``User:reviewer-<tenant>`` (the authorizer test broker's reviewer users)."""
    return f"User:reviewer-{tenant}"


def review_group_prefix(names: TopicNames, tenant: str) -> str:
    """The consumer groups a reviewer of ``tenant`` may use: ``<prefix>-review.<tenant>.``
    (e.g. group ``symfonic-review.acme.ui``). A tenant holds no ``.``, so no other tenant's
    group starts with it; ``<prefix>-review-acme`` would also match tenant ``acme-eu``."""
    return f"{names.prefix}-review.{tenant}."


def transactional_id_prefix(topology: Topology) -> str:
    """What every transactional id of ``topology`` starts with, and nothing else's does:
    the part its ids share (``<group>-<source>-``), read off ``transactional_id``."""
    first, second = topology.transactional_id(0), topology.transactional_id(1)
    pairs = enumerate(zip(first, second, strict=False))
    prefix = first[: next((i for i, (a, b) in pairs if a != b), len(first))]
    if not prefix.startswith(f"{topology.group_id}-"):  # a new naming scheme: fall back
        return f"{topology.group_id}-"
    return prefix


def check_principal(text: str, option: str, allow_wildcard: bool = False) -> str:
    """``text`` if it is one principal; the wildcard ``User:*`` only with ``allow_wildcard``
    (issue 33: a plan for one consumer or reviewer must not grant every user by a typo)."""
    if not PRINCIPAL.fullmatch(text):
        raise AclPlanError(f"{option} {text!r}: a principal is TYPE:NAME, e.g. User:alice")
    kind, _, name = text.partition(":")
    if name == WILDCARD and not allow_wildcard:
        raise AclPlanError(
            f"{option} {text!r} grants to every {kind}, not one: name the principal, or pass "
            "--allow-wildcard if every one of them may do this"
        )
    if WILDCARD in name and name != WILDCARD:
        raise AclPlanError(
            f"{option} {text!r}: Kafka has no partial wildcard ({kind}:{WILDCARD} is every "
            f"{kind}; this would name one {kind} whose name holds a {WILDCARD!r})"
        )
    return text


# --------------------------------------------------------------------------- the plan


def plan_names() -> tuple[str, ...]:
    """What a plan may name: the deployment's consumers, then the readers (the gateway)."""
    return (*deployed_names(), *(reader.name for reader in READERS))


def consumer_topologies(settings: Settings, name: str) -> tuple[Topology, ...]:
    """The topologies one ``symfonic-stream run <name>`` process runs."""
    from symfonic_stream.app.topologies import consumer_topologies as built

    return built(consumer(name), settings)


def _topic(principal: str, name: str, ops: Iterable[Operation],
           pattern: PatternType = "LITERAL") -> list[AclBinding]:
    return [AclBinding(principal, "TOPIC", pattern, name, op) for op in ops]


def topology_bindings(principal: str, topology: Topology, names: TopicNames) -> list[AclBinding]:
    """What one topology's engine does: check every topic and its configs at start-up,
    read its source as a member of its group, restore and write its changelog, write its
    outputs and dead letters in transactions (offsets committed inside them), and create
    the on-demand topics (the router's per-tenant queues) on first use."""
    found = _topic(principal, topology.source_topic, _TOPIC_READ)
    outputs = [*topology.output_topics]
    if topology.dead_letter_topic is not None:
        outputs.append(topology.dead_letter_topic)
    # The human queues ``<prefix>.human.…`` are written by the router, and by the validator
    # when the rules escalate: each gets the namespace, so the queues a routing rules file
    # adds (or a new tenant's, created on its first ticket) need no new ACL.
    queues = names.human_queue("")
    for topic in outputs:
        if not topic.startswith(queues):
            found += _topic(principal, topic, _TOPIC_WRITE)
    if topology.on_demand_topic is not None:
        found += _topic(principal, queues, ("CREATE", *_TOPIC_WRITE), "PREFIXED")
    elif any(topic.startswith(queues) for topic in outputs):
        found += _topic(principal, queues, _TOPIC_WRITE, "PREFIXED")
    if topology.changelog_topic is not None:
        found += _topic(principal, topology.changelog_topic, (*_TOPIC_READ, "WRITE"))
    # Join, sync, heartbeat, offset fetch, and TxnOffsetCommit inside each transaction.
    found.append(AclBinding(principal, "GROUP", "LITERAL", topology.group_id, "READ"))
    for op in ("WRITE", "DESCRIBE"):  # InitProducerId (fencing), AddPartitions, EndTxn
        found.append(AclBinding(principal, "TRANSACTIONAL_ID", "PREFIXED",
                                transactional_id_prefix(topology), op))
    return found


def reader_bindings(principal: str, reader: Reader, names: TopicNames) -> list[AclBinding]:
    """A reader in no group (the gateway): it assigns itself every partition of its topics
    and reads them (DescribeConfigs: its start-up reads each one's partition count, as an
    engine does), and sends what it writes with a plain idempotent producer; no group, no
    transactional id."""
    found = [binding for topic in reader.reads
             for binding in _topic(principal, topic.name(names), _TOPIC_READ)]
    return found + [binding for write in reader.writes
                    for binding in _topic(principal, write.topic.name(names),
                                          ("WRITE", "DESCRIBE"))]


def reviewer_bindings(
    settings: Settings, reviewer: ReviewerSpec, principal: str | None = None
) -> list[AclBinding]:
    """A human-review tool of one tenant: read its queue topics with its own groups, and
    write answers to ``<prefix>.resume-requests``. Nothing else: not the verdict topics
    (they hold every tenant's), not the registrations, no DescribeConfigs."""
    names = TopicNames(settings.topic_prefix)
    who = principal or reviewer_principal(reviewer.tenant)
    if settings.tenant_queues and reviewer.queue is None:
        found = _topic(who, names.tenant_queues_prefix(reviewer.tenant), ("READ", "DESCRIBE"),
                       "PREFIXED")
    elif settings.tenant_queues:
        assert reviewer.queue is not None
        found = _topic(who, names.human_queue(reviewer.queue, reviewer.tenant),
                       ("READ", "DESCRIBE"))
    elif reviewer.queue is not None:
        found = _topic(who, names.human_queue(reviewer.queue), ("READ", "DESCRIBE"))
    else:
        raise AclPlanError(
            f"--reviewer {reviewer.tenant!r}: per-tenant queues are off "
            "(SYMFONIC_TENANT_QUEUES), so the queues are not the tenant's: give TENANT:QUEUE"
        )
    groups = review_group_prefix(names, reviewer.tenant)
    found.append(AclBinding(who, "GROUP", "PREFIXED", groups, "READ"))
    found += _topic(who, names.resume_requests, ("WRITE", "DESCRIBE"))
    return found


@dataclass(frozen=True, slots=True)
class AclPlan:
    """Every binding of a deployment's principals, deduplicated and sorted."""

    bindings: tuple[AclBinding, ...]

    def principals(self) -> list[str]:
        return sorted({b.principal for b in self.bindings})

    def grants(self, principal: str | None = None) -> list[Grant]:
        """Bindings on the same resource pattern together, operations in a fixed order."""
        grouped: dict[tuple[str, ResourceType, PatternType, str], list[Operation]] = {}
        for b in self.bindings:
            if principal is None or b.principal == principal:
                key = (b.principal, b.resource_type, b.pattern, b.resource_name)
                grouped.setdefault(key, []).append(b.operation)
        return [Grant(*key, tuple(sorted(ops, key=_OPERATION_ORDER.index)))
                for key, ops in sorted(grouped.items())]


_OPERATION_ORDER: list[Operation] = [
    "READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"
]


def build_plan(
    settings: Settings,
    consumers: Sequence[str] | None = None,
    reviewers: Sequence[ReviewerSpec] = (),
    principals: Mapping[str, str] | None = None,
    allow_wildcard: bool = False,
) -> AclPlan:
    """The plan for ``consumers`` and ``reviewers``. ``principals`` maps a consumer name or
    ``reviewer:<tenant>`` to its principal (default :func:`default_principal`,
    :func:`reviewer_principal`); ``User:*`` there only with ``allow_wildcard``."""
    chosen = {key: check_principal(principal, f"--principal {key}=", allow_wildcard)
              for key, principal in (principals or {}).items()}
    plannable = plan_names()
    known = {*plannable, *(f"reviewer:{r.tenant}" for r in reviewers)}
    unknown = sorted(set(chosen) - known)
    if unknown:
        raise AclPlanError(
            f"--principal {unknown[0]}=...: not a consumer ({', '.join(plannable)}) nor "
            "reviewer:<TENANT> of a --reviewer"
        )
    names = TopicNames(settings.topic_prefix)
    readers = {reader.name: reader for reader in READERS}
    bindings: set[AclBinding] = set()
    for name in deployed_names() if consumers is None else consumers:
        if name not in plannable:
            raise AclPlanError(f"--consumer {name!r}: one of {', '.join(plannable)}")
        who = chosen.get(name) or default_principal(settings, name)
        if name in readers:
            bindings.update(reader_bindings(who, readers[name], names))
            continue
        for topology in consumer_topologies(settings, name):
            bindings.update(topology_bindings(who, topology, names))
    for reviewer in reviewers:
        bindings.update(reviewer_bindings(settings, reviewer,
                                          chosen.get(f"reviewer:{reviewer.tenant}")))
    return AclPlan(tuple(sorted(bindings)))


# --------------------------------------------------------------------------- rendering

_CLI_OPERATION = {
    "READ": "Read", "WRITE": "Write", "CREATE": "Create", "DESCRIBE": "Describe",
    "DESCRIBE_CONFIGS": "DescribeConfigs", "IDEMPOTENT_WRITE": "IdempotentWrite",
}
_CLI_RESOURCE = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}


def kafka_acls_command(grant: Grant, bootstrap: str, command_config: str | None = None) -> str:
    """The ``kafka-acls.sh --add`` line that creates ``grant``."""
    words = ["kafka-acls.sh", "--bootstrap-server", bootstrap]
    if command_config:
        words += ["--command-config", command_config]
    words += ["--add", "--allow-principal", grant.principal]
    for op in grant.operations:
        words += ["--operation", _CLI_OPERATION[op]]
    if grant.resource_type == "CLUSTER":
        words.append("--cluster")
    else:
        words += [_CLI_RESOURCE[grant.resource_type], grant.resource_name]
    if grant.pattern == "PREFIXED":
        words += ["--resource-pattern-type", "prefixed"]
    return shlex.join(words)


_STRIMZI_TYPE = {"TOPIC": "topic", "GROUP": "group", "TRANSACTIONAL_ID": "transactionalId",
                 "CLUSTER": "cluster"}


def strimzi_acls(plan: AclPlan, principal: str) -> list[dict[str, object]]:
    """``spec.authorization.acls`` of a Strimzi KafkaUser (``type: simple``) for one
    principal: what the chart's KafkaUsers must render (tests/unit/test_acls.py)."""
    acls: list[dict[str, object]] = []
    for grant in plan.grants(principal):
        resource: dict[str, object] = {"type": _STRIMZI_TYPE[grant.resource_type]}
        if grant.resource_type != "CLUSTER":
            resource["name"] = grant.resource_name
            resource["patternType"] = "prefix" if grant.pattern == "PREFIXED" else "literal"
        acls.append({"resource": resource,
                     "operations": [_CLI_OPERATION[op] for op in grant.operations],
                     "host": "*"})
    return acls
