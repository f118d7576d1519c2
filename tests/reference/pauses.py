"""A plain-Python reference of contract §7's tickets and verdicts: which ticket an answer
names, and what becomes of the answer.

Written from contract §7 and docs/contract.md (decision 15: first answer wins, a ticket
remembered; decision 18: a ticket is its tenant's), never from ``symfonic_stream``'s code,
which this module must not import. Its scope is what the tenancy tests need: tickets
routed from raw events (one per tenant and interrupt id, the first wins) and answers
checked in contract §7's order, with no response schemas and nothing forgotten (the tests
keep within a ticket's life).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACCEPTED = "accepted"


@dataclass
class _Ticket:
    run_id: str
    token: str
    expires_at: float
    answered: bool = False


class ReferenceReview:
    """Tickets of every tenant, and the verdicts on answers to them, in order."""

    def __init__(self) -> None:
        self._tickets: dict[tuple[str | None, str], _Ticket] = {}

    def pause(self, event: dict[str, Any]) -> None:
        """A raw AgentEvent with an ``interrupt``: its ticket, unless its tenant already
        has one of that interrupt id (a re-send)."""
        pending = event["interrupt"]
        tenant = (event.get("scope") or {}).get("tenant")
        self._tickets.setdefault((tenant, pending["interrupt_id"]), _Ticket(
            event["run_id"], pending["token"], float(pending["expires_at"])))

    def answer(self, request: dict[str, Any], now: float) -> tuple[str, str | None]:
        """``(ACCEPTED, the run it resumes)`` or ``(the rejection's reason, None)``. A
        request's ``tenant``, when present, picks among the tenants' tickets of its id;
        otherwise its token does, and a token of several tickets names none."""
        named = [ticket for (tenant, ticket_id), ticket in self._tickets.items()
                 if ticket_id == request["ticket_id"]
                 and ("tenant" not in request or tenant == request["tenant"])]
        if not named:
            return "unknown_ticket", None
        matching = [ticket for ticket in named if ticket.token == request["token"]]
        if len(matching) != 1:
            return "bad_token", None
        [ticket] = matching
        if ticket.expires_at <= now:
            return "expired", None
        if ticket.answered:
            return "already_answered", None
        ticket.answered = True
        return ACCEPTED, ticket.run_id
