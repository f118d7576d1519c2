"""The resume validator's ticket registry: each tenant's tickets, remembered until they may
be forgotten, in a changelogged state store (docs/pauses.md, "Trust").

A ticket is its tenant's: two tenants' kernels may use the same interrupt id, and each
ticket is registered and answered on its own. So the store's key is the pair (tenant,
ticket id), and an index finds the tickets of one id. The registrations of one id share
a partition (they are keyed by ticket id), so all of an id's tickets are in one task.

An answer names its ticket by id, and by tenant when it carries ``tenant`` (the ticket's
own field, as the reviewer SDK sends it). Among the tickets it may name, the one whose
token it carries is its ticket (compared in constant time with each); if the token
matches none, any one stands in so that the token check refuses it (``bad_token``); if it
matches several (tenants' tickets sharing an id and a token), no ticket is named: the
answer must name its tenant.

**The previous version's state.** Before tickets were per tenant, the registry's store
was ``ticket`` (changelog keys ``ticket/<ticket id>``), whose values hold no tenant. When
such records are restored they are moved into this store as tickets of an unknown tenant
(the old keys get tombstones at the next commit). Such a ticket answers requests of any
tenant, as it did; and a registration of its id is its duplicate when it is of the same
run (a kernel's re-send), else another tenant's ticket, registered on its own.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from symfonic_stream.engine.processor import Collector, Headers
from symfonic_stream.observability.queues import QueueTickets
from symfonic_stream.processors.expiring import ExpiringState, within_budget
from symfonic_stream.processors.pauses.review import Review
from symfonic_stream.state.store import Codec, StateStore


@dataclass(slots=True)
class Registered:
    """One ticket as the registry keeps it."""

    token: str
    run_id: str
    tool_call_id: str | None
    expires_at: float
    response_schema: dict[str, Any] | None
    #: When this registry got it (its own clock: a ticket's ``routed_at`` is the router's).
    registered_at: float
    answered_at: float = 0.0
    #: Why its response_schema cannot be applied (checked once, at registration).
    schema_refused: str | None = None
    #: Answers with its token that its schema refused, in all and per responder (``""``:
    #: none named): past the validator's bounds no more are checked, so what the token
    #: holders' answers can cost is bounded per ticket, and one responder locks out only
    #: itself. Both stop counting at the bounds (:meth:`count_invalid`).
    invalid_answers: int = 0
    #: The ticket's tenant (its ``tenant`` field); unknown (``known`` False) for a ticket
    #: the previous version registered.
    tenant: str | None = None
    known: bool = True
    #: Its claims, escalation and history (None: registered by a version before them).
    review: Review | None = None
    invalid_by: dict[str, int] = field(default_factory=dict)
    #: Its registration's checked trace headers (the interrupt event's: the run's trace),
    #: which what its timers emit carries, and its verdicts when the answer has none.
    trace: Headers = ()

    def invalid_of(self, responder: str | None) -> int:
        return self.invalid_by.get(responder or "", 0)

    def count_invalid(self, responder: str | None, per_responder: int, per_ticket: int) -> None:
        """One more refused answer of ``responder`` (no entry for a new responder once the
        ticket's bound is reached: at most ``per_ticket`` entries)."""
        name = responder or ""
        if self.invalid_answers >= per_ticket and name not in self.invalid_by:
            return
        self.invalid_answers = min(self.invalid_answers + 1, per_ticket)
        self.invalid_by[name] = min(self.invalid_by.get(name, 0) + 1, per_responder)

    def encode(self) -> bytes:
        return orjson.dumps([
            self.token, self.run_id, self.tool_call_id, self.expires_at, self.response_schema,
            self.registered_at, self.answered_at, self.schema_refused, self.invalid_answers,
            self.tenant if self.known else False,
            self.review.encode() if self.review is not None else None,
            self.invalid_by,
            [[name, value.decode("ascii")] for name, value in self.trace] or None,
        ])

    @classmethod
    def decode(cls, data: bytes) -> Registered:
        fields = orjson.loads(data)
        ticket = cls(*fields[:9])  # (the previous versions wrote 7 fields, then 9: no tenant)
        tenant = fields[9] if len(fields) > 9 else False
        ticket.known = tenant is not False
        ticket.tenant = tenant if isinstance(tenant, str) else None
        if len(fields) > 10 and fields[10] is not None:  # (then 10: no review)
            ticket.review = Review.decode(fields[10])
        if len(fields) > 11:  # (then 11: invalid answers counted per ticket only)
            ticket.invalid_by = fields[11]
        if len(fields) > 12 and fields[12]:  # (then 12: no trace context)
            ticket.trace = tuple((str(name), str(value).encode()) for name, value in fields[12])
        return ticket

    def forget_after(self, grace_s: float) -> float:
        """When the registry may drop it: expired (its capped expiry), answered or
        registered, whichever is last, plus the grace."""
        return max(self.expires_at, self.answered_at, self.registered_at) + grace_s


#: How a ticket travels in the changelog: ``[token, run_id, tool_call_id, expires_at,
#: response_schema, registered_at, answered_at, schema_refused, invalid_answers, tenant,
#: review, invalid_by, trace]`` (``tenant`` false: unknown; ``review`` null: none;
#: ``trace`` null or ``[[header, value], ...]``).
TICKET_CODEC: Codec[Registered] = Codec(Registered.encode, Registered.decode)


def ticket_key(ticket_id: str, tenant: str | None, known: bool = True) -> str:
    """The store's key of a tenant's ticket (injective: a JSON array)."""
    return orjson.dumps([tenant if known else False, ticket_id]).decode()


class OpenTickets:
    """The registry's open tickets (registered, with a review, unanswered) by key: their
    queue, when they were registered and when they expire; what the queue gauges are read
    from (observability/queues.py). Derived from the store, never stored: each change of a
    ticket is one dict update here, and a restore rebuilds it."""

    def __init__(self, queues: Iterable[str] = ()) -> None:
        #: The routing rules' queues: each one's gauges are there, 0 when none is open.
        self._queues = tuple(queues)
        self._open: dict[str, tuple[str, float, float]] = {}

    def track(self, key: str, ticket: Registered) -> None:
        """``ticket`` just changed (registered, answered, escalated): where it stands now."""
        review = ticket.review
        if review is None or ticket.answered_at:  # (a ticket of a version before reviews:
            self._open.pop(key, None)             # no queue to count it on)
        else:
            self._open[key] = (review.queue, ticket.registered_at, ticket.expires_at)

    def drop(self, key: str) -> None:
        self._open.pop(key, None)

    def clear(self) -> None:
        self._open.clear()

    def by_queue(self, now: float) -> dict[str, QueueTickets]:
        """Per queue, its tickets open at ``now`` (an expired one is not: it can no longer
        be answered, though it is remembered until its grace ends)."""
        queues = {queue: QueueTickets() for queue in self._queues}
        for queue, registered_at, expires_at in self._open.values():
            tickets = queues.get(queue)
            if tickets is None:
                tickets = queues[queue] = QueueTickets()
            if expires_at > now:
                tickets.add(registered_at, expires_at)
        return queues


@dataclass(frozen=True, slots=True)
class Named:
    """The ticket an answer names (``key`` None: none), or that its token matched several."""

    key: str | None
    ticket: Registered | None
    ambiguous: bool = False


class TicketRegistry(ExpiringState[Registered]):
    """Every tenant's tickets of one registrations partition."""

    def __init__(self, grace_s: float, punctuate_budget_s: float,
                 queues: Iterable[str] = ()) -> None:
        super().__init__(StateStore("tenant-ticket", TICKET_CODEC), punctuate_budget_s)
        self.tickets = self.state
        #: The previous version's store, only read (restored, then moved into ``tickets``).
        self._previous = StateStore("ticket", TICKET_CODEC)
        self._grace_s = grace_s
        #: Ticket id → the keys of its tickets.
        self._by_id: dict[str, list[str]] = {}
        self.open = OpenTickets(queues)

    @property
    def stores(self) -> tuple[StateStore[Registered], ...]:
        return self.tickets, self._previous

    def restored(self) -> None:
        for ticket_id, ticket in self._previous.items():
            key = ticket_key(ticket_id, None, known=False)
            if key not in self.tickets:
                self.tickets.put(key, ticket)
            self._previous.delete(ticket_id)
        super().restored()
        self._by_id.clear()
        self.open.clear()
        for key, ticket in self.tickets.items():
            self._by_id.setdefault(orjson.loads(key)[1], []).append(key)
            self.open.track(key, ticket)

    def review_queues(self, now: float) -> dict[str, QueueTickets]:
        """Per queue, its tickets open at ``now`` (observability/queues.py reads it at each
        scrape)."""
        return self.open.by_queue(now)

    def deadline_of(self, value: Registered) -> float:
        """Its review's next timer, else answered, expired (and routed) longer than the
        grace period ago."""
        forget = value.forget_after(self._grace_s)
        due = value.review.next_due() if value.review is not None else None
        return forget if due is None else min(due, forget)

    def punctuate(self, now: float, out: Collector) -> None:
        for key in within_budget(self.tickets.due(now), self._budget_s, out):
            ticket = self.tickets.get(key)
            if ticket is not None and now < ticket.forget_after(self._grace_s):
                self.on_timer(key, ticket, now, out)  # its review's
                self.tickets.schedule(key, self.deadline_of(ticket))
                self.open.track(key, ticket)  # (an escalation moved it to another queue)
                continue
            self.tickets.delete(key)
            self.open.drop(key)
            if ticket is not None:
                self.on_forget(key, ticket, out)
            ticket_id = orjson.loads(key)[1]
            keys = self._by_id.get(ticket_id, [])
            if key in keys:
                keys.remove(key)
            if not keys:
                self._by_id.pop(ticket_id, None)

    def on_timer(self, key: str, ticket: Registered, now: float, out: Collector) -> None:
        """A timer of ``ticket``'s review is due (the validator's to act on)."""

    def on_forget(self, key: str, ticket: Registered, out: Collector) -> None:
        """``ticket`` was just forgotten (the validator's to say so)."""

    def key_for(self, ticket_id: str, tenant: str | None, run_id: str) -> str | None:
        """Where a new registration of ``tenant``'s ticket ``ticket_id`` goes; None when
        it is a duplicate (a ticket of its tenant with that id is remembered, or one of
        the previous version's of the same run)."""
        for key in self._by_id.get(ticket_id, ()):
            ticket = self.tickets.get(key)
            assert ticket is not None
            if (ticket.tenant == tenant) if ticket.known else (ticket.run_id == run_id):
                return None
        return ticket_key(ticket_id, tenant)

    def add(self, ticket_id: str, key: str, ticket: Registered) -> None:
        self.tickets.put(key, ticket)
        self.tickets.schedule(key, self.deadline_of(ticket))
        self._by_id.setdefault(ticket_id, []).append(key)

    def named(self, ticket_id: str, token: str, tenant: str | None, names_tenant: bool) -> Named:
        """The ticket an answer with ``token`` names (see the module's docstring)."""
        candidates = [(key, ticket) for key in self._by_id.get(ticket_id, ())
                      if (ticket := self.tickets.get(key)) is not None
                      and (not names_tenant or not ticket.known or ticket.tenant == tenant)]
        if not candidates:
            return Named(None, None)
        # Each compared, in constant time, whatever the others gave.
        matched = [c for c in candidates
                   if hmac.compare_digest(token.encode(), c[1].token.encode())]
        if len(matched) > 1:
            return Named(None, None, ambiguous=True)
        key, ticket = matched[0] if matched else candidates[0]
        return Named(key, ticket)
