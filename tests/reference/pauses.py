"""A plain-Python reference of contract §7's tickets and verdicts: which ticket an answer
names, and what becomes of the answer.

Written from contract §7, §9 and docs/contract.md (decision 15: first answer wins, a ticket
remembered; decision 18: a ticket is its tenant's; §9: a run id is its first event's
tenant's), never from ``symfonic_stream``'s code, which this module must not import. Its
scope is what the tenancy tests need: tickets routed from raw events (one per tenant and
interrupt id, the first wins; none from another tenant's event under an owned run id) and
answers checked in contract §7's order, with no response schemas and nothing forgotten
(the tests keep within a ticket's life).
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
    tenant: str | None
    answered: bool = False


class ReferenceReview:
    """Tickets of every tenant, and the verdicts on answers to them, in order."""

    def __init__(self) -> None:
        self._tickets: dict[tuple[str | None, str], _Ticket] = {}
        #: Each run id's owner: the tenant of its first event (contract §9).
        self.owners: dict[str, str | None] = {}
        #: The events another tenant's kernel wrote under an owned run id, in order.
        self.foreign: list[dict[str, Any]] = []

    def see(self, event: dict[str, Any]) -> bool:
        """Any raw AgentEvent: whether it is its run's owner's (the first event of a run
        id names the owner)."""
        tenant = (event.get("scope") or {}).get("tenant")
        if self.owners.setdefault(event["run_id"], tenant) != tenant:
            self.foreign.append(event)
            return False
        return True

    def pause(self, event: dict[str, Any]) -> None:
        """A raw AgentEvent with an ``interrupt``: its ticket, unless its tenant already
        has one of that interrupt id (a re-send), or its run is another tenant's."""
        if not self.see(event):
            return
        pending = event["interrupt"]
        tenant = (event.get("scope") or {}).get("tenant")
        self._tickets.setdefault((tenant, pending["interrupt_id"]), _Ticket(
            event["run_id"], pending["token"], float(pending["expires_at"]), tenant))

    def tenant_of(self, run_id: str) -> str | None:
        """The tenant a resume of ``run_id`` carries: its run's owner."""
        return self.owners[run_id]

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
