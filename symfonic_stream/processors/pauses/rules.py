"""Routing rules: which human queue a ticket goes to (contract §7).

The file at ``SYMFONIC_ROUTING_RULES`` is YAML, either a plain ordered list of rules or a
mapping with the list under ``rules``::

    default: triage            # the catch-all queue; `null` makes unmatched tickets unroutable
    tenants: [acme, globex]    # per-tenant mode: queue topics `topics ensure` creates ahead
    rules:
      - match: {name: approve_payment, tenant: acme}
        queue: payments
      - match: {kind: ask_user}
        queue: questions
    escalations:               # a ticket of `payments` not answered 30 minutes after it was
      - queue: payments        # routed (nor claimed then) moves to `oversight`, once
        after_minutes: 30
        to: oversight

The first rule whose every ``match`` field equals the ticket's wins. A bad file stops the
consumer at start with a message naming the file, the rule and the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: A queue or tenant becomes one dot-separated part of a topic name: Kafka's characters
#: without the dot, so ``<prefix>.human.<tenant>.<queue>`` is injective (tenant ``a.b`` +
#: queue ``c`` and tenant ``a`` + queue ``b.c`` cannot both exist) and a tenant's queues
#: are exactly the topics under ``<prefix>.human.<tenant>.`` (one prefix ACL).
NAME_PART = r"[A-Za-z0-9_-]{1,100}"
TOPIC_PART = f"^{NAME_PART}$"
_TOPIC_PART = re.compile(NAME_PART)
#: Kafka refuses longer topic names.
MAX_TOPIC_NAME = 249
DEFAULT_QUEUE = "default"
#: `<prefix>.human[.<tenant>].expired` is where expired tickets go; no rule may name it.
RESERVED_QUEUES = frozenset({"expired"})


def is_topic_part(name: str) -> bool:
    """``name`` may be a tenant or queue part of a topic name (the whole of it: a
    ``$`` would let ``"a\n"`` through)."""
    return _TOPIC_PART.fullmatch(name) is not None


class RulesError(Exception):
    """The routing rules file is unusable; the message names the file, rule and problem."""


class Match(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str | None = None
    kind: Literal["ask_user", "interrupt"] | None = None
    tenant: str | None = None


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    match: Match = Field(default_factory=Match)
    queue: str = Field(pattern=TOPIC_PART)


class Escalation(BaseModel):
    """A ticket of ``queue`` still unanswered ``after_minutes`` after it was routed moves to
    ``to``, once (the resume validator's timer: docs/pauses.md, "Escalation")."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    queue: str = Field(pattern=TOPIC_PART)
    after_minutes: float = Field(gt=0, allow_inf_nan=False)
    to: str = Field(pattern=TOPIC_PART)

    @property
    def after_s(self) -> float:
        return self.after_minutes * 60


class RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    default: str | None = Field(DEFAULT_QUEUE, pattern=TOPIC_PART)
    tenants: list[str] | None = None
    rules: list[Rule] = Field(default_factory=list)
    escalations: list[Escalation] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a ticket goes: its queue name, or why it cannot go anywhere."""

    queue: str | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class RoutingRules:
    rules: tuple[Rule, ...] = ()
    default: str | None = DEFAULT_QUEUE
    tenants: frozenset[str] | None = None
    escalations: tuple[Escalation, ...] = ()

    def place(self, name: str, kind: str, tenant: str | None) -> Placement:
        """The first matching rule's queue, else the default queue, else unroutable."""
        for rule in self.rules:
            match = rule.match
            if (
                (match.name is None or match.name == name)
                and (match.kind is None or match.kind == kind)
                and (match.tenant is None or match.tenant == tenant)
            ):
                return Placement(rule.queue)
        if self.default is None:
            return Placement(None, "no rule matches and the rules file names no default queue")
        return Placement(self.default)

    def queues(self) -> list[str]:
        """Every queue a ticket can be routed or escalated to (for `topics ensure`)."""
        names = [rule.queue for rule in self.rules]
        if self.default is not None:
            names.append(self.default)
        names += [escalation.to for escalation in self.escalations]
        return list(dict.fromkeys(names))

    def escalation_of(self, queue: str) -> Escalation | None:
        """Where and when a ticket of ``queue`` escalates (None: it does not)."""
        return next((e for e in self.escalations if e.queue == queue), None)


def tenant_problem(tenant: str | None, rules: RoutingRules) -> str | None:
    """Why a ticket of ``tenant`` cannot have a per-tenant queue topic, if it cannot."""
    if tenant is None:
        return "per-tenant queues are on and the run has no scope.tenant"
    if not is_topic_part(tenant):
        return (f"tenant {tenant[:120]!r} cannot be part of a topic name "
                "(letters, digits, '_' and '-', at most 100)")
    return None


def topic_problem(topic: str) -> str | None:
    """Why Kafka would refuse ``topic`` as a name, checked before routing to it."""
    if len(topic) > MAX_TOPIC_NAME:
        return (f"queue topic {topic[:80]!r}… is {len(topic)} characters "
                f"(Kafka's limit {MAX_TOPIC_NAME})")
    return None


def parse_rules(text: str, source: str = "<rules>") -> RoutingRules:
    """Parse and validate a rules document, or raise :class:`RulesError`."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RulesError(f"{source}: not valid YAML: {exc}") from None
    if document is None:
        document = {}
    if isinstance(document, list):
        document = {"rules": document}
    if not isinstance(document, dict):
        raise RulesError(f"{source}: expected a list of rules or a mapping with `rules`")
    try:
        parsed = RulesFile.model_validate(document)
    except ValidationError as exc:
        raise RulesError(f"{source}: {_describe(exc)}") from None
    for number, rule in enumerate(parsed.rules, start=1):
        if rule.queue in RESERVED_QUEUES:
            raise RulesError(f"{source}: rule {number}: queue {rule.queue!r} is reserved")
    for tenant in parsed.tenants or []:
        if not is_topic_part(tenant):
            raise RulesError(f"{source}: tenants: {tenant!r} cannot be part of a topic name")
    _check_escalations(parsed, source)
    return RoutingRules(
        rules=tuple(parsed.rules),
        default=parsed.default,
        tenants=frozenset(parsed.tenants) if parsed.tenants is not None else None,
        escalations=tuple(parsed.escalations),
    )


def _check_escalations(parsed: RulesFile, source: str) -> None:
    """Each escalation starts at a queue a rule (or the default) routes to, goes to another
    queue that is not reserved, and each queue escalates at most one way."""
    routed = {rule.queue for rule in parsed.rules} | (
        {parsed.default} if parsed.default is not None else set())
    seen: set[str] = set()
    for number, escalation in enumerate(parsed.escalations, start=1):
        where = f"{source}: escalation {number}"
        if escalation.queue not in routed:
            raise RulesError(f"{where}: queue {escalation.queue!r} is no rule's nor the default")
        if escalation.to in RESERVED_QUEUES or escalation.to == escalation.queue:
            raise RulesError(f"{where}: cannot escalate to {escalation.to!r}")
        if escalation.queue in seen:
            raise RulesError(f"{where}: queue {escalation.queue!r} already escalates")
        seen.add(escalation.queue)


def load_rules(path: Path | None) -> RoutingRules:
    """The rules at ``path`` (``SYMFONIC_ROUTING_RULES``); no path: everything to `default`."""
    if path is None:
        return RoutingRules()
    try:
        text = path.read_text()
    except OSError as exc:
        raise RulesError(f"SYMFONIC_ROUTING_RULES={path}: cannot read: {exc.strerror}") from None
    return parse_rules(text, f"routing rules {path}")


_LISTS = {"rules": "rule", "escalations": "escalation"}


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        location = list(error["loc"])
        if len(location) >= 2 and location[0] in _LISTS and isinstance(location[1], int):
            where = (f"{_LISTS[str(location[0])]} {location[1] + 1}"
                     + "".join(f".{part}" for part in location[2:]))
        else:
            where = ".".join(str(part) for part in location) or "document"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)
