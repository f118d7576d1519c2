"""The resume validator's review desk: what it writes when a ticket's review changes.

Every change of a ticket's :class:`~.review.Review` (registered, claimed, released, a lease
run out, escalated, answered, an answer refused) writes the whole review state to the
compacted ``<prefix>.review-tickets`` under the registry's key of the ticket, in the
transaction of the input (or punctuation) that made it; forgetting the ticket writes a
tombstone. An escalation also writes the ticket to its new queue topic, once: the review
records that it escalated in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from symfonic_stream.engine.processor import Collector, OutputRecord
from symfonic_stream.models.headers import KIND_HEADER, QUEUE_HEADER
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import ClaimRequest
from symfonic_stream.processors.pauses.registry import Registered
from symfonic_stream.processors.pauses.review import Review, review_value
from symfonic_stream.processors.pauses.rules import RoutingRules, topic_problem

#: SYMFONIC_REVIEW_CLAIM_LEASE_S's default: five minutes.
DEFAULT_CLAIM_LEASE_S = 300.0
#: SYMFONIC_REVIEW_CLAIM_MAX_S's default: a claim, renewed or not, lasts at most half an
#: hour; its holder then rests a lease before claiming again.
DEFAULT_CLAIM_MAX_S = 1800.0


@dataclass(frozen=True, slots=True)
class ReviewDesk:
    names: TopicNames
    rules: RoutingRules
    tenant_queues: bool = False
    lease_s: float = DEFAULT_CLAIM_LEASE_S
    max_claim_s: float = DEFAULT_CLAIM_MAX_S

    def registered(self, key: str, ticket: Registered, routed: dict[str, Any],
                   out: Collector) -> None:
        ticket.review = Review.of_ticket(routed, self.rules)
        self.publish(key, ticket.review, out)

    def publish(self, key: str, review: Review, out: Collector) -> None:
        out.emit(OutputRecord(self.names.review_tickets, key.encode(), review_value(review),
                              "review"))

    def forget(self, key: str, ticket: Registered, out: Collector) -> None:
        if ticket.review is not None:
            out.emit(OutputRecord(self.names.review_tickets, key.encode(), None, "review"))

    def claim(self, request: ClaimRequest, key: str, ticket: Registered, now: float,
              out: Collector) -> None:
        """A claim or release whose ticket and token were found good (the validator's
        checks), decided in the order it came."""
        review = ticket.review
        if review is None:
            return  # (a ticket of a version before reviews: nothing to claim)
        if request.action == "claim":
            queue = review.queue  # (the metric's label: a queue of the rules, no tenant)
            outcome = review.claim(request.responder, now, self.lease_s, request.request_id,
                                   self.max_claim_s)
            out.claims[queue, outcome] += 1
            out.note_span("ticket claimed", **{"symfonic.outcome": outcome,
                                               "symfonic.ticket_id": request.ticket_id,
                                               "symfonic.queue": queue,
                                               "symfonic.run_id": ticket.run_id})
        else:
            review.release(request.responder, now, request.request_id)
        self.publish(key, review, out)

    def timer(self, key: str, ticket: Registered, now: float, out: Collector) -> None:
        """The lease of ``ticket``'s claim ran out, or it escalates (or both)."""
        review = ticket.review
        if review is None:
            return
        to = review.fire(now, ticket.expires_at, self.lease_s, self.max_claim_s)
        if to is not None:
            self._escalate(review, to, out)
        self.publish(key, review, out)

    def _escalate(self, review: Review, to: str, out: Collector) -> None:
        ticket = review.ticket
        tenant = ticket.get("tenant") if self.tenant_queues else None
        topic = self.names.human_queue(to, tenant if isinstance(tenant, str) else None)
        problem = topic_problem(topic)
        if problem is not None:  # (its tenant and queue are names the router checked)
            review.history[-1]["reason"], review.history[-1]["detail"] = "unroutable", problem
            return
        label = topic.removeprefix(self.names.human_queue(""))
        out.emit(OutputRecord(topic, str(ticket["run_id"]).encode(), orjson.dumps(ticket),
                              "ticket", None, ((QUEUE_HEADER, label.encode()),
                                               (KIND_HEADER, str(ticket["kind"]).encode()))))
        out.tickets[to, str(ticket["kind"])] += 1
