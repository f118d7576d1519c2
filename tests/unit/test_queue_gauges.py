"""The human queues' metrics (docs/metrics.md, "Metrics"): the resume validator's open
tickets per queue, the oldest one's age and the next expiry, read at each scrape from what
its processors hold, exact after a restore and a roll-back; its claims by queue and outcome.
"""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.engine.transaction import report_commit
from symfonic_stream.observability.families import CLAIM_OUTCOMES, PREFIX
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.observability.queues import QueueGauges, QueueTickets
from symfonic_stream.processors.pauses.desk import ReviewDesk
from symfonic_stream.processors.pauses.router import PauseRouter
from symfonic_stream.processors.pauses.rules import parse_rules
from symfonic_stream.processors.pauses.validator import ResumeValidator
from symfonic_stream.state.store import partitions_of
from tests.unit.helpers import Verdicts, restore_from, write_changes
from tests.unit.test_pauses import ANSWER, NAMES, NOW, pause_event

RULES = parse_rules("""
rules:
  - match: {name: approval}
    queue: payments
  - match: {kind: ask_user}
    queue: questions
escalations:
  - {queue: payments, after_minutes: 1, to: oversight}
""")
#: Every queue the rules name (the default one too): each has its gauges, 0 when empty.
QUEUES = ("payments", "questions", "default", "oversight")
LEASE_S = 30.0


def validator(max_claim_s: float = 1800.0) -> ResumeValidator:
    return ResumeValidator(NAMES, grace_s=100.0,
                           desk=ReviewDesk(NAMES, RULES, False, LEASE_S, max_claim_s))


class Queues:
    """A pause router and a resume validator with a review desk: tickets routed and
    registered, claims and answers sent, at the times the test gives."""

    def __init__(self, max_claim_s: float = 1800.0) -> None:
        self.router = PauseRouter(NAMES, RULES, tenant_queues=False, grace_s=60.0)
        self.validator = validator(max_claim_s)
        self.out = Verdicts()
        self.offset = 0

    def _feed(self, topic: str, key: bytes | None, value: bytes, headers: Any, at: float,
              processor: Any, out: Collector) -> None:
        self.offset += 1
        processor.process(InputRecord(topic, 0, self.offset, key, value, headers), at, out)

    def route(self, ticket: str, at: float, expires_at: float, kind: str = "interrupt") -> None:
        event = pause_event(kind=kind, name="approval" if kind == "interrupt" else kind,
                            interrupt_id=ticket, run_id=f"run-{ticket}", token=f"tok-{ticket}",
                            expires_at=expires_at)
        routed = Verdicts()
        self._feed(NAMES.agent_events, event["run_id"].encode(), orjson.dumps(event), (), at,
                   self.router, routed)
        [registration] = [o for o in routed.outputs if o.record_type == "registration"]
        self._feed(NAMES.pause_registrations, registration.key, registration.value or b"",
                   registration.headers, at, self.validator, self.out)

    def send(self, ticket: str, at: float, **request: Any) -> None:
        body = {"ticket_id": ticket, "token": f"tok-{ticket}", "tenant": "acme", **request}
        self._feed(NAMES.pause_registrations, ticket.encode(), orjson.dumps(body), ANSWER, at,
                   self.validator, self.out)


def gauges(processor: ResumeValidator, now: float
           ) -> dict[str, tuple[int, float | None, float | None]]:
    """Per queue: open tickets, the oldest's age, seconds to the next expiry (None: none)."""
    return {queue: (t.open, now - t.oldest if t.open else None,
                    t.next_expiry - now if t.open else None)
            for queue, t in processor.review_queues(now).items()}


def busy() -> Queues:
    """Three tickets on two queues, one answered, one claimed."""
    q = Queues()
    q.route("a", NOW, expires_at=NOW + 600)
    q.route("b", NOW + 10, expires_at=NOW + 300)
    q.route("c", NOW + 20, expires_at=NOW + 900, kind="ask_user")
    q.route("d", NOW + 25, expires_at=NOW + 1200, kind="ask_user")
    q.send("d", NOW + 27, answer="yes", responder="ana")
    q.send("c", NOW + 28, action="claim", responder="bo")
    return q


def test_open_tickets_the_oldest_age_and_the_next_expiry_per_queue() -> None:
    q = busy()
    assert gauges(q.validator, NOW + 30) == {
        "payments": (2, 30.0, 270.0),
        "questions": (1, 10.0, 870.0),  # d is answered; c is claimed, still open
        "default": (0, None, None),
        "oversight": (0, None, None),
    }
    q.send("b", NOW + 40, answer={"approved": True}, responder="ana")
    assert gauges(q.validator, NOW + 50)["payments"] == (1, 50.0, 550.0)
    # Past its expiry a ticket is not open (it can no longer be answered), though the
    # validator remembers it until its grace ends.
    assert gauges(q.validator, NOW + 600)["payments"] == (0, None, None)


def test_an_escalated_ticket_counts_on_the_queue_it_went_to_and_a_forgotten_one_nowhere() -> None:
    q = Queues()
    q.route("a", NOW, expires_at=NOW + 600)
    q.validator.punctuate(NOW + 61, q.out)  # unclaimed a minute: payments -> oversight
    assert gauges(q.validator, NOW + 62)["payments"] == (0, None, None)
    assert gauges(q.validator, NOW + 62)["oversight"] == (1, 62.0, 538.0)
    q.validator.punctuate(NOW + 600 + 100, q.out)  # its expiry and the grace: forgotten
    assert len(q.validator.tickets) == 0
    assert gauges(q.validator, NOW + 700) == dict.fromkeys(QUEUES, (0, None, None))


def test_the_gauges_are_the_same_after_a_restore_and_after_a_roll_back() -> None:
    """Derived from the store, never stored: a validator restored from the changelog (a
    restart, a rebalance) and one rolled back (an aborted transaction) count the same."""
    q = busy()
    committed = Verdicts()
    write_changes(q.validator, committed)
    restored = validator()
    restore_from(restored, dict(committed.changelog))
    for at in (NOW + 30, NOW + 299, NOW + 300, NOW + 899):
        assert gauges(restored, at) == gauges(q.validator, at), at
    before = gauges(q.validator, NOW + 60)
    q.send("a", NOW + 50, answer={"approved": True}, responder="ana")
    q.route("e", NOW + 55, expires_at=NOW + 100, kind="ask_user")
    assert gauges(q.validator, NOW + 60) != before
    for partition in partitions_of(q.validator.stores):  # an aborted transaction
        partition.abort()
    q.validator.restored()
    assert gauges(q.validator, NOW + 60) == before


def test_claims_are_counted_by_queue_and_outcome() -> None:
    q = Queues(max_claim_s=50.0)
    q.route("a", NOW, expires_at=NOW + 3600)
    q.route("c", NOW, expires_at=NOW + 3600, kind="ask_user")
    q.send("a", NOW + 1, action="claim", responder="ana")
    q.send("a", NOW + 2, action="claim", responder="ana")  # the holder again
    q.send("a", NOW + 3, action="claim", responder="bo")  # ana holds it
    q.send("a", NOW + 4, action="release", responder="ana")  # (not a claim)
    q.send("c", NOW + 5, action="claim", responder="bo")
    q.send("c", NOW + 6, answer="yes", responder="bo")
    q.send("c", NOW + 7, action="claim", responder="cy")  # answered already
    q.route("e", NOW, expires_at=NOW + 3600, kind="ask_user")
    q.send("e", NOW + 10, action="claim", responder="dee")
    q.send("e", NOW + 35, action="claim", responder="dee")
    q.validator.punctuate(NOW + 60, q.out)  # dee's claim ran its total lifetime: rests
    q.send("e", NOW + 61, action="claim", responder="dee")
    assert q.out.claims == Counter({
        ("payments", "granted"): 1, ("payments", "renewed"): 1, ("payments", "held"): 1,
        ("questions", "granted"): 2, ("questions", "renewed"): 1,
        ("questions", "answered"): 1, ("questions", "rested"): 1})
    assert {outcome for _, outcome in q.out.claims} == set(CLAIM_OUTCOMES)
    registry = CollectorRegistry()
    metrics = ConsumerMetrics("resumes", registry)
    report_commit(metrics, NAMES.pause_registrations, q.out, 0)
    assert registry.get_sample_value(PREFIX + "review_claims_total", {
        "consumer": "resumes", "queue": "questions", "outcome": "granted"}) == 2
    with pytest.raises(ValueError, match="claim outcome"):
        metrics.claim("payments", "grant")


def scrape(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    return {(sample.name, sample.labels["consumer"], sample.labels.get("queue", "")): sample.value
            for family in registry.collect() for sample in family.samples
            if sample.name.startswith(PREFIX + "review_")
            and sample.labels.get("outcome", "granted") == "granted"}


class Owner:
    """What an engine gives the metrics: the processors of the partitions it owns now."""

    def __init__(self, *processors: object) -> None:
        self.owned = list(processors)

    def processors(self) -> list[object]:
        return self.owned


def test_the_gauges_are_read_at_the_scrape_from_the_processors_owned_then() -> None:
    one, two = busy(), Queues()
    two.route("x", NOW + 5, expires_at=NOW + 100)
    registry = CollectorRegistry()
    metrics = ConsumerMetrics("resumes", registry)
    clock = [NOW + 30]
    gauge = QueueGauges(("o", "a", "e"), CollectorRegistry(), clock=lambda: clock[0])
    gauge.claims = (metrics._f.claims, CLAIM_OUTCOMES)
    owner = Owner(one.validator, two.validator, object())  # (a processor without queues)
    gauge.watch("resumes", owner.processors)
    read = {(s.name, s.labels["queue"]): s.value for f in gauge.collect() for s in f.samples}
    assert read == {
        ("o", "payments"): 3, ("a", "payments"): 30.0, ("e", "payments"): 70.0,
        ("o", "questions"): 1, ("a", "questions"): 10.0, ("e", "questions"): 870.0,
        ("o", "default"): 0, ("o", "oversight"): 0}
    owner.owned = [one.validator]  # a partition given away: its tickets go with it
    read = {(s.name, s.labels["queue"]): s.value for f in gauge.collect() for s in f.samples}
    assert read[("o", "payments")] == 2
    # Each queue shown has its claim series, so that increase() sees its first claim.
    assert scrape(registry)[(PREFIX + "review_claims_total", "resumes", "oversight")] == 0
    del owner
    gc.collect()
    assert [f.samples for f in gauge.collect()] == [[], [], []]  # (held weakly)


def test_a_consumer_s_registry_exports_the_queue_families() -> None:
    """Through ConsumerMetrics.watch, on the clock of the scrape (the test's)."""
    registry = CollectorRegistry()
    metrics = ConsumerMetrics("resumes", registry)
    q = busy()
    owner = Owner(q.validator)
    metrics.watch(owner.processors)
    metrics._f.queues._clock = lambda: NOW + 30
    read = scrape(registry)
    # The first scrape that shows a queue shows its claim series.
    assert read[(PREFIX + "review_claims_total", "resumes", "oversight")] == 0
    assert read[(PREFIX + "review_open_tickets", "resumes", "payments")] == 2
    assert read[(PREFIX + "review_oldest_open_ticket_seconds", "resumes", "questions")] == 10
    assert read[(PREFIX + "review_next_expiry_seconds", "resumes", "payments")] == 270
    assert (PREFIX + "review_next_expiry_seconds", "resumes", "default") not in read


def test_queue_tickets_merge_as_one_queue() -> None:
    a, b = QueueTickets(), QueueTickets()
    a.add(10.0, 100.0)
    b.add(5.0, 200.0)
    b.add(20.0, 50.0)
    a.merge(b)
    assert (a.open, a.oldest, a.next_expiry) == (3, 5.0, 50.0)
