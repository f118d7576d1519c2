"""The pause router: one ticket per ``interrupt_id`` on the right human queue (contract §7).

For every raw event carrying an interrupt the router writes, in one transaction:

1. the ticket to its queue topic (``<prefix>.human.<queue>``, per tenant
   ``<prefix>.human.<tenant>.<queue>``; ``expired`` in place of the queue when it expired
   before it was routed), keyed by run id;
2. the same ticket as a *registration* on ``<prefix>.pause-registrations``, keyed by
   ticket id, header ``symfonic-record-type: ticket``. Only the router (and the resume
   validator's intake, which appends each answer after it) may write that topic, so a
   reviewer cannot forge or pre-empt a ticket; committed with the queue record, the
   registration precedes every answer a human could give;
3. the run's routed interrupts, each a (tenant, interrupt id), to the changelog, so a
   kernel re-send, a restart or a rebalance never routes the same interrupt twice; another
   tenant's interrupt with the same id is another ticket (the validator registers each
   tenant's tickets apart: :mod:`.registry`).

Every run the router sees is remembered with its owner, the tenant of its first event
(contract §9): another tenant's event under the run id, an interrupt above all, is
dead-lettered ``foreign_tenant`` and makes no ticket, so a ticket's tenant is always its
run's.

A ticket lives at most ``SYMFONIC_TICKET_MAX_LIFETIME_S`` from its event's timestamp (or
from now, if that is later than now): its ``expires_at`` is capped so, and a re-send of
the same event, however late, gets the same cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.models.agent_event import (
    CLOSING_KINDS,
    INVALID_INPUT_LABEL,
    AgentEvent,
    PendingInterrupt,
)
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import (
    DEFAULT_LIMITS,
    DecodeError,
    DecodeLimits,
    decode_agent_event,
    kind_label,
)
from symfonic_stream.models.headers import (
    KIND_HEADER,
    QUEUE_HEADER,
    RECORD_TYPE_HEADER,
    TICKET_MARK,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.expiring import ExpiringState, pause_kept_until
from symfonic_stream.processors.ownership import UNKNOWN_OWNER, Owner, refuse_foreign
from symfonic_stream.processors.pauses.rules import RoutingRules, tenant_problem, topic_problem
from symfonic_stream.state.store import Codec, StateStore

#: SYMFONIC_TICKET_MAX_LIFETIME_S's default: a day.
DEFAULT_TICKET_MAX_LIFETIME_S = 86_400.0


def capped_expiry(event: AgentEvent, pending: PendingInterrupt, now: float,
                  max_lifetime_s: float) -> float:
    """The ticket's ``expires_at``: the kernel's, but at most the lifetime after the
    event (its timestamp, unless that is in our future): deterministic for a re-send."""
    return min(pending.expires_at, min(event.timestamp, now) + max_lifetime_s)


def build_ticket(
    event: AgentEvent, pending: PendingInterrupt, queue: str, now: float, source: str,
    expires_at: float,
) -> dict[str, Any]:
    """The contract §7 ticket for one pause (field order as the contract lists it)."""
    kind = "ask_user" if event.kind == "ask_user" else "interrupt"
    questions = pending.questions if kind == "ask_user" else None  # as the typed event
    scope = event.scope
    return {
        "ticket_id": pending.interrupt_id,
        "queue": queue,
        "kind": kind,
        "name": pending.name,
        "questions": questions,
        "payload": pending.payload,
        "token": pending.token,
        "run_id": event.run_id,
        "root_run_id": event.root_run_id,
        "session_id": event.session_id if event.session_id is not None else pending.session_id,
        "thread_id": event.thread_id,
        "tool_call_id": pending.tool_call_id,
        "tenant": scope.tenant if scope is not None else None,
        "principal": scope.principal if scope is not None else None,
        "expires_at": expires_at,
        "resumable": pending.resumable,
        "routed_at": now,
        "source": source,
    }


#: How many of a run's routed interrupt ids are remembered (its re-sends are duplicates):
#: the latest, so a run that pauses without end cannot grow its state record without end.
REMEMBERED_INTERRUPTS = 1000

#: A routed interrupt: its tenant and id; or, routed by a version before tickets were per
#: tenant, its id alone (the tenant unknown: it stands for the id in every tenant).
Routed = tuple[str | None, str] | str


@dataclass(slots=True)
class RoutedRun:
    """A run the router has seen: its owner (contract §9), the interrupts already routed
    (the latest; a shared empty tuple until the first), when it closed (0: open), and when
    it is forgotten anyway (its last event or pause long past; 0: never)."""

    interrupt_ids: Sequence[Routed] = ()
    closed_at: float = 0.0
    forget_at: float = 0.0
    #: The tenant that owns the run id (its first event's; ``UNKNOWN_OWNER``: a run of a
    #: version before owners, whose next event's tenant becomes its owner).
    tenant: Owner = None

    def routed(self, tenant: str | None, interrupt_id: str) -> bool:
        return (tenant, interrupt_id) in self.interrupt_ids or interrupt_id in self.interrupt_ids


def _decode_routed(data: bytes) -> RoutedRun:
    closed_at, routed, *rest = orjson.loads(data)  # (0.x wrote no forget_at, then no owner)
    run = RoutedRun([(i[0], str(i[1])) if isinstance(i, list) else str(i) for i in routed],
                    float(closed_at), float(rest[0]) if rest else 0.0)
    run.tenant = rest[1] if len(rest) > 1 else UNKNOWN_OWNER
    return run


#: The changelog value: ``[closed_at, [[tenant, interrupt id], ...], forget_at, owner]``
#: (``owner`` ``false``: not known yet; the previous versions wrote each interrupt as its
#: id alone, then no owner).
ROUTED_CODEC: Codec[RoutedRun] = Codec.fields(
    ("closed_at", "interrupt_ids", "forget_at", "tenant"), _decode_routed)


class PauseRouter(ExpiringState[RoutedRun]):
    """The router's processor for one raw-topic partition: every run it has seen, for its
    owner and its routed interrupts, until the projectors' ordering guard would have
    forgotten it too (so a run id stays its owner's as long as anywhere)."""

    def __init__(
        self,
        names: TopicNames,
        rules: RoutingRules,
        *,
        tenant_queues: bool,
        grace_s: float,
        max_lifetime_s: float = DEFAULT_TICKET_MAX_LIFETIME_S,
        idle_timeout_s: float = 3600.0,
        decode: DecodeLimits = DEFAULT_LIMITS,
        punctuate_budget_s: float = 0.05,
    ) -> None:
        self._names = names
        self._rules = rules
        self._tenant_queues = tenant_queues
        self._grace_s = grace_s
        self._max_lifetime_s = max_lifetime_s
        self._idle_s = idle_timeout_s
        self._decode = decode
        super().__init__(StateStore("run", ROUTED_CODEC), punctuate_budget_s)
        self.runs = self.state

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        try:
            event = decode_agent_event(
                record.value, key=record.key, check_key=True, limits=self._decode
            )
        except DecodeError as rejected:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(record, rejected.reason, rejected.detail)
            return
        out.count_input(kind_label(event.kind))
        run_id, tenant = event.run_id, event.tenant
        run = self.runs.get(run_id)
        if run is None:
            run = RoutedRun(tenant=tenant)
            self.runs.put(run_id, run)
        elif run.tenant != tenant and refuse_foreign(run, run_id, tenant, record, out):
            return  # another tenant's event (a run of no known owner is now the tenant's)
        if not run.closed_at:
            self._keep_open(run_id, run, now)
        pending = event.interrupt
        if pending is not None:
            self._route(event, pending, run, record, now, out)
        if event.kind in CLOSING_KINDS and not run.closed_at:
            run.closed_at = now
            self.runs.schedule(run_id, now + self._grace_s)

    def _keep_open(self, run_id: str, run: RoutedRun, now: float) -> None:
        """An open run is remembered as long as the guard would keep it after this event
        (an idle timeout, then the grace once abandoned); moved an eighth of the idle
        timeout ahead at a time, so its record is rewritten that seldom, not per event."""
        idle = self._idle_s
        if idle <= 0 or run.forget_at >= now + idle + self._grace_s:
            return
        run.forget_at = now + idle + idle / 8 + self._grace_s
        self.runs.schedule(run_id, run.forget_at)

    def _route(
        self,
        event: AgentEvent,
        pending: PendingInterrupt,
        run: RoutedRun,
        record: InputRecord,
        now: float,
        out: Collector,
    ) -> None:
        if run.routed(event.tenant, pending.interrupt_id):
            out.count("duplicates")
            return
        kind = "ask_user" if event.kind == "ask_user" else "interrupt"
        tenant = event.tenant if self._tenant_queues else None
        placement = self._rules.place(pending.name, kind, event.tenant)
        problem = placement.problem
        if problem is None and self._tenant_queues:
            problem = tenant_problem(tenant, self._rules)
        queue = placement.queue
        expires_at = capped_expiry(event, pending, now, self._max_lifetime_s)
        topic, expired = "", False
        if queue is not None and problem is None:
            expired = expires_at <= now
            topic = self._names.human_queue("expired" if expired else queue, tenant)
            problem = topic_problem(topic)
        if queue is None or problem is not None:
            out.dead_letter(record, DeadLetterReason.UNROUTABLE, problem or "no queue")
            return
        ticket = build_ticket(event, pending, queue, now, record.source, expires_at)
        value = orjson.dumps(ticket)
        queue_label = topic.removeprefix(self._names.human_queue(""))
        headers = ((QUEUE_HEADER, queue_label.encode()), (KIND_HEADER, kind.encode()))
        out.emit(
            OutputRecord(topic, event.run_id.encode(), value, "ticket", event.timestamp, headers)
        )
        # (Metric labels: the rules' own queue names, never the tenant: a closed set.)
        out.tickets["expired" if expired else queue, kind] += 1
        out.note_span("ticket routed", **{"symfonic.queue": "expired" if expired else queue,
                                          "symfonic.kind": kind,
                                          "symfonic.ticket_id": pending.interrupt_id,
                                          "symfonic.run_id": event.run_id})
        out.emit(
            OutputRecord(
                self._names.pause_registrations,
                pending.interrupt_id.encode(),
                value,
                "registration",
                None,
                ((RECORD_TYPE_HEADER, TICKET_MARK),),
            )
        )
        routed: Routed = (event.tenant, pending.interrupt_id)
        run.interrupt_ids = [*run.interrupt_ids[1 - REMEMBERED_INTERRUPTS:], routed]
        if not run.closed_at:  # kept while the guard waits for the pause, then its grace
            kept = pause_kept_until(pending.expires_at, now, self._idle_s)
            run.forget_at = max(run.forget_at, max(expires_at, now) + self._grace_s,
                                kept + 2 * self._grace_s)
            self.runs.schedule(event.run_id, run.forget_at)

    def deadline_of(self, run: RoutedRun) -> float | None:
        """A closed run is forgotten after the grace (its re-sends are duplicates until)."""
        if run.closed_at:
            return run.closed_at + self._grace_s
        return run.forget_at or None


def queue_topics(names: TopicNames, rules: RoutingRules, tenant_queues: bool) -> list[str]:
    """The queue topics the router writes to that can be known ahead (`topics ensure`).

    Per tenant these are the rules file's ``tenants`` times its queues (and each one's
    expired queue); any other tenant's queue is created the first time a ticket goes to it
    (:func:`tenant_queue_spec`).
    """
    if not tenant_queues:
        return [*(names.human_queue(queue) for queue in rules.queues()), names.expired_queue]
    return [
        names.human_queue(queue, tenant)
        for tenant in sorted(rules.tenants or ())
        for queue in [*rules.queues(), "expired"]
    ]
