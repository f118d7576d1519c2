"""A ticket's review on the resume validator (docs/pauses.md, "Claims and escalation"):
claims decided in the order they come, leases that run out, an answer from someone else
refused while a lease holds, an escalation once, and every change on review-tickets."""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from symfonic_stream.engine.processor import InputRecord
from symfonic_stream.models.pauses import ReviewTicket
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.processors.pauses.desk import ReviewDesk
from symfonic_stream.processors.pauses.review import answer_digest
from symfonic_stream.processors.pauses.rules import RulesError, parse_rules
from symfonic_stream.processors.pauses.validator import ResumeValidator
from tests.unit.helpers import Verdicts, restore_from, write_changes
from tests.unit.test_pauses import ANSWER, NAMES, NOW, RouterHarness, pause_event

RULES = parse_rules("""
rules:
  - match: {name: approval}
    queue: payments
escalations:
  - {queue: payments, after_minutes: 1, to: oversight}
""")
LEASE_S = 30.0
KEY = orjson.dumps(["acme", "intr-1"])


class Desk:
    """A validator with a review desk, fed the router's registration of one ticket."""

    def __init__(self, tenant_queues: bool = False, max_claim_s: float = 1800.0) -> None:
        self.validator = ResumeValidator(NAMES, grace_s=100.0, desk=ReviewDesk(
            NAMES, RULES, tenant_queues, LEASE_S, max_claim_s))
        self.out = Verdicts()
        self.offset = 0
        router = RouterHarness(RULES, tenant_queues)
        router.feed(pause_event(expires_at=NOW + 3600))
        for output in router.out.outputs:
            if output.record_type == "registration":
                self._feed(output.key, output.value or b"", output.headers, NOW)

    def _feed(self, key: bytes | None, value: bytes, headers: Any, now: float) -> None:
        self.offset += 1
        record = InputRecord(NAMES.pause_registrations, 0, self.offset, key, value, headers)
        self.validator.process(record, now, self.out)

    def send(self, now: float, **request: Any) -> None:
        body = {"ticket_id": "intr-1", "token": "tok-1", "tenant": "acme", **request}
        self._feed(b"intr-1", orjson.dumps(body), ANSWER, now)

    def state(self) -> ReviewTicket:
        """The latest review-tickets record of the ticket, as a console reads it."""
        latest = [r for r in self.out.reviews if r.key == KEY][-1]
        return ReviewTicket.model_validate_json(latest.value or b"")

    def verdicts(self) -> list[str]:
        return [orjson.loads(o.value or b"").get("reason") or "accepted"
                for o in self.out.outputs if o.topic in (NAMES.resumes, NAMES.resume_rejections)]


def test_a_registered_ticket_is_on_review_tickets_with_its_queue_and_no_claim() -> None:
    desk = Desk()
    state = desk.state()
    assert (state.ticket.queue, state.claim, state.answered) == ("payments", None, None)
    assert [e.event for e in state.history] == ["routed"]
    assert state.ticket.token == "tok-1"  # (the gateway answers with it: never shown)


def test_of_two_claims_the_first_wins_and_the_others_answer_is_refused() -> None:
    desk = Desk()
    desk.send(NOW + 1, action="claim", responder="ana", request_id="r1")
    desk.send(NOW + 1, action="claim", responder="bo", request_id="r2")
    state = desk.state()
    assert state.claim is not None and (state.claim.by, state.claim.until) == ("ana", NOW + 31)
    refused = state.history[-1]
    assert (refused.event, refused.by, refused.request) == ("claim_refused", "bo", "r2")
    assert refused.detail == "claimed by ana"
    desk.send(NOW + 2, answer={"approved": True}, responder="bo", request_id="r3")
    assert desk.verdicts() == ["claimed"]
    assert desk.state().history[-1].reason == "claimed"
    desk.send(NOW + 3, answer={"approved": True}, responder="ana", request_id="r4")
    assert desk.verdicts() == ["claimed", "accepted"]
    answered = desk.state().answered
    assert answered is not None and answered.by == "ana"
    assert answered.digest == answer_digest({"approved": True})


def test_a_lease_runs_out_on_the_punctuation_then_another_may_claim() -> None:
    desk = Desk()
    desk.send(NOW + 1, action="claim", responder="ana")
    desk.validator.punctuate(NOW + 30, desk.out)  # not yet
    assert desk.state().claim is not None
    desk.validator.punctuate(NOW + 31, desk.out)
    state = desk.state()
    assert state.claim is None and state.history[-1].event == "lease_expired"
    desk.send(NOW + 32, action="claim", responder="bo")
    claim = desk.state().claim
    assert claim is not None and claim.by == "bo"


def test_a_claim_on_an_expired_ticket_is_refused_and_not_on_the_history() -> None:
    """Issue 43: a mutant accepting claims of expired tickets survived every test."""
    desk = Desk()
    desk.send(NOW + 3600, action="claim", responder="ana", request_id="late")
    assert desk.verdicts() == ["expired"]
    assert [e.event for e in desk.state().history] == ["routed"]
    [refused] = [orjson.loads(o.value or b"") for o in desk.out.outputs
                 if o.topic == NAMES.resume_rejections]
    assert (refused["request_id"], refused["tenant"]) == ("late", "acme")


def test_a_claim_renewed_without_end_ends_at_its_total_lifetime() -> None:
    """Issue 43: a claim renewed without end blocked every other reviewer and the
    escalation. A claim lasts at most its total lifetime, renewals included; its holder
    then rests a lease, so another reviewer (or the escalation) comes first."""
    desk = Desk(max_claim_s=50.0)
    desk.send(NOW + 1, action="claim", responder="ana")
    for at in (NOW + 20, NOW + 40):  # each renewal within the lease
        desk.send(at, action="claim", responder="ana")
    claim = desk.state().claim
    assert claim is not None and claim.until == NOW + 51  # not NOW + 70
    desk.validator.punctuate(NOW + 51, desk.out)
    state = desk.state()
    assert state.claim is None and state.history[-1].event == "lease_expired"
    desk.send(NOW + 52, action="claim", responder="ana")
    refused = desk.state().history[-1]
    assert (refused.event, refused.by, refused.reason) == ("claim_refused", "ana", "rested")
    desk.send(NOW + 53, action="claim", responder="bo")
    claim = desk.state().claim
    assert claim is not None and claim.by == "bo"
    desk.send(NOW + 60, action="release", responder="bo")
    desk.send(NOW + 82, action="claim", responder="ana")  # rested a lease: may claim again
    claim = desk.state().claim
    assert claim is not None and claim.by == "ana"


def test_what_the_desk_counts_is_what_the_metrics_know() -> None:
    """(The engine's metrics refuse an unknown count key or resume outcome, after the
    commit: a claim or a ``claimed`` refusal must not be one.)"""
    desk = Desk()
    desk.send(NOW + 1, action="claim", responder="ana")
    desk.send(NOW + 1, action="claim", responder="bo")
    desk.send(NOW + 2, answer={"approved": True}, responder="bo")
    desk.send(NOW + 2, action="claim", responder="eve", token="guess")
    desk.validator.punctuate(NOW + 100, desk.out)
    metrics = ConsumerMetrics("resumes", registry=CollectorRegistry())
    metrics.add_counts(desk.out.counts)
    for outcome, n in desk.out.resumes.items():
        metrics.resume(outcome, n)
    assert desk.out.resumes == {"claimed": 1, "bad_token": 1}


def test_only_the_holder_releases() -> None:
    desk = Desk()
    desk.send(NOW + 1, action="claim", responder="ana")
    desk.send(NOW + 2, action="release", responder="bo")
    assert desk.state().claim is not None
    desk.send(NOW + 3, action="release", responder="ana")
    assert desk.state().claim is None


def test_a_claim_with_a_wrong_token_is_refused_and_not_on_the_history() -> None:
    desk = Desk()
    desk.send(NOW + 1, action="claim", responder="eve", token="guess")
    assert desk.verdicts() == ["bad_token"]
    assert [e.event for e in desk.state().history] == ["routed"]


def test_an_unanswered_ticket_escalates_once_to_its_new_queue() -> None:
    desk = Desk()
    desk.validator.punctuate(NOW + 59, desk.out)
    assert desk.state().escalated is None
    desk.validator.punctuate(NOW + 60, desk.out)
    state = desk.state()
    assert state.escalated is not None
    assert (state.escalated.from_queue, state.escalated.to_queue) == ("payments", "oversight")
    assert state.ticket.queue == "oversight" and state.history[-1].event == "escalated"
    moved = [o for o in desk.out.outputs if o.record_type == "ticket"]
    assert [(o.topic, orjson.loads(o.value or b"")["queue"]) for o in moved] == [
        ("symfonic.human.oversight", "oversight")]
    desk.validator.punctuate(NOW + 600, desk.out)
    assert len([o for o in desk.out.outputs if o.record_type == "ticket"]) == 1  # once


def test_a_claimed_ticket_escalates_when_its_lease_runs_out_unanswered() -> None:
    desk = Desk()
    desk.send(NOW + 50, action="claim", responder="ana")  # holds until NOW + 80
    desk.validator.punctuate(NOW + 60, desk.out)
    assert desk.state().escalated is None
    desk.validator.punctuate(NOW + 80, desk.out)
    assert desk.state().escalated is not None


def test_an_answered_ticket_never_escalates_and_a_forgotten_one_is_a_tombstone() -> None:
    desk = Desk()
    desk.send(NOW + 1, answer={"approved": True}, responder="ana")
    desk.validator.punctuate(NOW + 600, desk.out)
    assert desk.state().escalated is None
    desk.validator.punctuate(NOW + 3600 + 101, desk.out)  # expiry + grace: forgotten
    assert desk.out.reviews[-1].key == KEY and desk.out.reviews[-1].value is None


def test_the_escalation_timer_survives_a_restore_and_fires_once() -> None:
    desk = Desk()
    write_changes(desk.validator, desk.out)
    again = ResumeValidator(NAMES, grace_s=100.0, desk=ReviewDesk(NAMES, RULES, False, LEASE_S))
    restore_from(again, desk.out.changelog)
    out = Verdicts()
    again.punctuate(NOW + 60, out)
    again.punctuate(NOW + 61, out)
    assert len([o for o in out.outputs if o.record_type == "ticket"]) == 1
    write_changes(again, out)
    third = ResumeValidator(NAMES, grace_s=100.0, desk=ReviewDesk(NAMES, RULES, False, LEASE_S))
    restore_from(third, {**desk.out.changelog, **out.changelog})
    later = Verdicts()
    third.punctuate(NOW + 120, later)
    assert [o for o in later.outputs if o.record_type == "ticket"] == []


def test_per_tenant_queues_escalate_into_the_tenants_queue() -> None:
    desk = Desk(tenant_queues=True)
    desk.validator.punctuate(NOW + 60, desk.out)
    [moved] = [o for o in desk.out.outputs if o.record_type == "ticket"]
    assert moved.topic == "symfonic.human.acme.oversight"


def test_escalations_name_routed_queues_once_and_never_expired() -> None:
    for text, problem in (
        ("escalations: [{queue: nowhere, after_minutes: 1, to: b}]", "no rule's"),
        ("escalations: [{queue: default, after_minutes: 1, to: expired}]", "cannot escalate"),
        ("escalations: [{queue: default, after_minutes: 0, to: b}]", "greater than 0"),
        ("escalations: [{queue: default, after_minutes: 1, to: b},"
         " {queue: default, after_minutes: 2, to: c}]", "already escalates"),
    ):
        try:
            parse_rules(text, "rules.yaml")
        except RulesError as exc:
            assert problem in str(exc) and "escalation" in str(exc), exc
        else:
            raise AssertionError(f"accepted: {text}")
    assert "oversight" in RULES.queues()
