"""A ticket's review state: who holds its claim and until when, where and when it escalates,
who answered it, and its history (docs/pauses.md, "Claims and escalation").

The resume validator keeps one :class:`Review` with each ticket it registers (in its
changelog, with the ticket) and decides every claim, release and answer in the order they
reach it on the ticket's partition, so exactly one claim wins a race and every console
replica, reading what the validator wrote, sees the same holder. The validator writes the
whole state to the compacted ``<prefix>.review-tickets`` after each change, in the
transaction of that change (:func:`review_value`). Its timers, the lease's end and the
escalation, are deadlines of the ticket's key in the state store: restored with the
changelog, so they fire after a crash as they would have before it.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from symfonic_stream.processors.pauses.rules import RoutingRules

#: The steps of a ticket's history kept (the latest); its claim, escalation and answer are
#: kept apart from it, whatever happened since.
MAX_HISTORY = 32
#: What of a refusal's detail a history entry keeps.
MAX_DETAIL = 300


def answer_digest(answer: Any) -> str:
    """SHA-256 of ``answer`` as sorted-key JSON: the same answer sent again (an AG-UI
    resume replayed) has the same digest, another answer another."""
    return hashlib.sha256(orjson.dumps(answer, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(slots=True)
class Review:
    """One ticket's review state, as the validator keeps it (and writes it)."""

    #: The ticket as routed (its registration), token and all: review-tickets is read by
    #: the gateway alone, which answers with it (docs/security.md).
    ticket: dict[str, Any]
    queue: str
    claim_by: str | None = None
    claim_until: float = 0.0
    #: When the ticket escalates if still unanswered (and unclaimed then), and where to;
    #: None: its queue does not escalate, or it has escalated once already.
    escalate_at: float = 0.0
    escalate_to: str | None = None
    escalated: dict[str, Any] | None = None
    answered: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    #: When the holder's claim began: renewals never take it past its total lifetime.
    claim_since: float = 0.0
    #: A holder whose claim ran its total lifetime may not claim again before this (0:
    #: nobody rests), so another reviewer can take the ticket first.
    rested_by: str | None = None
    rested_until: float = 0.0

    @classmethod
    def of_ticket(cls, ticket: dict[str, Any], rules: RoutingRules) -> Review:
        """The state of a ticket just registered: routed, no claim; its escalation, if its
        queue has one and the ticket would still be open then."""
        queue = str(ticket["queue"])
        review = cls(ticket, queue)
        escalation = rules.escalation_of(queue)
        routed_at = float(ticket["routed_at"])
        if escalation is not None and routed_at + escalation.after_s < ticket["expires_at"]:
            review.escalate_at, review.escalate_to = routed_at + escalation.after_s, escalation.to
        review.note(routed_at, "routed")
        return review

    def encode(self) -> Any:
        return asdict(self)

    @classmethod
    def decode(cls, fields: dict[str, Any]) -> Review:
        return cls(**fields)

    # -- reading ---------------------------------------------------------------------

    def holder(self, now: float) -> str | None:
        """Who holds the claim at ``now`` (None: nobody, or its lease has run out)."""
        return self.claim_by if self.claim_by is not None and self.claim_until > now else None

    def next_due(self) -> float | None:
        """The earliest timer: the lease's end, or the escalation (not before the lease
        ends: a ticket being worked on does not move)."""
        due = [self.claim_until] if self.claim_by is not None else []
        if self.escalate_to is not None and self.answered is None:
            due.append(max(self.escalate_at, self.claim_until if self.claim_by else 0.0))
        return min(due) if due else None

    # -- changes (each one also a step of the history) ---------------------------------

    def note(self, at: float, event: str, **fields: str | None) -> None:
        entry: dict[str, Any] = {"at": at, "event": event, "by": None, "request": None,
                                 "reason": None, "detail": None}
        entry.update({k: (v[:MAX_DETAIL] if k == "detail" and v else v)
                      for k, v in fields.items()})
        self.history.append(entry)
        del self.history[:-MAX_HISTORY]

    def claim(self, by: str, now: float, lease_s: float, request: str | None,
              max_claim_s: float = float("inf")) -> str:
        """``by`` claims the ticket (again: the lease is renewed, but never past
        ``max_claim_s`` after the claim began). The outcome (a metric's label,
        observability's ``CLAIM_OUTCOMES``): ``granted``, ``renewed``, or why not
        (``answered``, ``held``, ``rested``)."""
        holder = self.holder(now)
        reason, refusal = (("answered", "answered already") if self.answered is not None
                           else ("held", f"claimed by {holder}") if holder not in (None, by)
                           else ("rested", "this reviewer's claim ran its total lifetime; "
                                 f"it may claim again at {self.rested_until}")
                           if by == self.rested_by and now < self.rested_until
                           else (None, None))
        if reason is not None:
            self.note(now, "claim_refused", by=by, request=request, reason=reason,
                      detail=refusal)
            return reason
        if holder is None or not self.claim_since:  # (a claim of a version before lifetimes)
            self.claim_since = now
        self.claim_by = by
        self.claim_until = min(now + lease_s, self.claim_since + max_claim_s)
        self.note(now, "claimed", by=by, request=request)
        return "granted" if holder is None else "renewed"

    def release(self, by: str, now: float, request: str | None) -> str | None:
        """The holder gives the claim back; why not, if ``by`` does not hold it."""
        if self.holder(now) != by:
            self.note(now, "claim_refused", by=by, request=request, reason="not_holder",
                      detail="only the claim's holder may release it")
            return "not the holder"
        self.claim_by, self.claim_until = None, 0.0
        self.note(now, "released", by=by, request=request)
        return None

    def answer(self, by: str | None, answer: Any, now: float, request: str | None) -> None:
        self.answered = {"by": by, "at": now, "digest": answer_digest(answer)}
        self.claim_by, self.claim_until = None, 0.0
        self.note(now, "answered", by=by, request=request)

    def refuse(self, by: str | None, reason: str, detail: str, now: float,
               request: str | None) -> None:
        self.note(now, "answer_refused", by=by, request=request, reason=reason, detail=detail)

    def fire(self, now: float, expires_at: float, lease_s: float = 0.0,
             max_claim_s: float = float("inf")) -> str | None:
        """What is due at ``now``: a lease runs out (a claim at its total lifetime rests
        its holder for a lease), and/or the ticket escalates. The queue it escalates to
        (None: it does not now)."""
        if self.claim_by is not None and self.claim_until <= now:
            if self.claim_until >= self.claim_since + max_claim_s:
                self.rested_by, self.rested_until = self.claim_by, self.claim_until + lease_s
            self.note(self.claim_until, "lease_expired", by=self.claim_by)
            self.claim_by, self.claim_until = None, 0.0
        to = self.escalate_to
        if (to is None or self.answered is not None or self.claim_by is not None
                or self.escalate_at > now):
            return None
        self.escalate_to = None  # once
        if expires_at <= now:
            return None  # expired unanswered: nowhere to go
        self.escalated = {"from_queue": self.queue, "to_queue": to, "at": now}
        self.note(now, "escalated", detail=f"{self.queue} -> {to}")
        self.queue = to
        self.ticket = {**self.ticket, "queue": to}
        return to


def review_value(review: Review) -> bytes:
    """The ``<prefix>.review-tickets`` value (models.pauses.ReviewTicket)."""
    claim = ({"by": review.claim_by, "until": review.claim_until}
             if review.claim_by is not None else None)
    return orjson.dumps({"ticket": review.ticket, "claim": claim, "escalated": review.escalated,
                         "answered": review.answered, "history": review.history})
