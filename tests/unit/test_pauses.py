"""The pause router and resume validator as pure processors (contract §7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.app.topologies import router_topology
from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Resume, ResumeRejection, Ticket
from symfonic_stream.processors.pauses.router import PauseRouter, queue_topics
from symfonic_stream.processors.pauses.rules import (
    RoutingRules,
    RulesError,
    load_rules,
    parse_rules,
)
from symfonic_stream.processors.pauses.validator import ResumeValidator
from tests.unit.helpers import Verdicts, interrupt, raw, restore_from, write_changes

NAMES = TopicNames("symfonic")
RULES = parse_rules(
    """
tenants: [acme, globex]
rules:
  - match: {name: approve_payment, tenant: acme}
    queue: payments
  - match: {kind: ask_user}
    queue: questions
  - match: {tenant: globex}
    queue: globex-desk
"""
)
NOW = 1000.0
#: The scope of ``pause_event``'s default tenant: a run's events are all its owner's.
ACME = {"tenant": "acme", "principal": "pat"}


def pause_event(
    index: int = 0,
    *,
    kind: str = "interrupt",
    name: str = "approval",
    tenant: str | None = "acme",
    interrupt_id: str = "intr-1",
    expires_at: float = 5000.0,
    run_id: str = "run-1",
    token: str = "tok-1",
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    pending = interrupt(
        kind,
        name=name,
        interrupt_id=interrupt_id,
        expires_at=expires_at,
        run_id=run_id,
        token=token,
    )
    if payload is not None:
        pending["payload"] = payload
    return raw(
        kind,
        index,
        run_id,
        interrupt=pending,
        scope={"tenant": tenant, "principal": "pat"},
        thread_id="th-1",
    )


class RouterHarness:
    def __init__(self, rules: RoutingRules = RULES, tenant_queues: bool = False) -> None:
        self.router = PauseRouter(NAMES, rules, tenant_queues=tenant_queues, grace_s=60.0)
        self.out = Verdicts()
        self.offset = 0

    def feed(self, event: dict[str, Any], now: float = NOW) -> None:
        self.offset += 1
        record = InputRecord(
            NAMES.agent_events, 3, self.offset, event["run_id"].encode(), orjson.dumps(event)
        )
        self.router.process(record, now, self.out)

    def tickets(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (o.topic, orjson.loads(o.value or b""))
            for o in self.out.outputs
            if o.record_type == "ticket"
        ]

    def registrations(self) -> list[OutputRecord]:
        return [o for o in self.out.outputs if o.record_type == "registration"]


def test_ticket_has_every_contract_field() -> None:
    h = RouterHarness()
    h.feed(pause_event(kind="ask_user", name="ask_user", tenant="acme"))
    [(topic, ticket)] = h.tickets()
    assert topic == "symfonic.human.questions"
    assert Ticket.model_validate(ticket).model_dump() == ticket
    assert ticket == {
        "ticket_id": "intr-1",
        "queue": "questions",
        "kind": "ask_user",
        "name": "ask_user",
        "questions": [{"question": "Continue?"}],
        "payload": {"questions": [{"question": "Continue?"}]},
        "token": "tok-1",
        "run_id": "run-1",
        "root_run_id": None,
        "session_id": "sess-1",
        "thread_id": "th-1",
        "tool_call_id": "call-9",
        "tenant": "acme",
        "principal": "pat",
        "expires_at": 5000.0,
        "resumable": True,
        "routed_at": NOW,
        "source": "symfonic.agent-events/3/1",
    }
    [registration] = h.registrations()
    assert registration.topic == "symfonic.pause-registrations"
    assert registration.key == b"intr-1"
    assert registration.headers == (("symfonic-record-type", b"ticket"),)


@pytest.mark.parametrize(
    ("fields", "queue"),
    [
        ({"name": "approve_payment", "tenant": "acme"}, "payments"),  # name + tenant
        ({"name": "approve_payment", "tenant": "globex"}, "globex-desk"),  # tenant only
        ({"kind": "ask_user", "name": "ask_user", "tenant": None}, "questions"),  # kind
        ({"name": "other", "tenant": "acme"}, "default"),  # nothing matches: default
    ],
)
def test_first_matching_rule_wins(fields: dict[str, Any], queue: str) -> None:
    h = RouterHarness()
    h.feed(pause_event(**fields))
    [(topic, ticket)] = h.tickets()
    assert (topic, ticket["queue"]) == (f"symfonic.human.{queue}", queue)


def test_interrupt_ticket_has_no_questions() -> None:
    h = RouterHarness()
    h.feed(pause_event(kind="interrupt"))
    [(_, ticket)] = h.tickets()
    assert ticket["kind"] == "interrupt" and ticket["questions"] is None


def test_per_tenant_queues_keep_tenants_apart() -> None:
    h = RouterHarness(tenant_queues=True)
    h.feed(pause_event(tenant="acme", interrupt_id="a", run_id="run-a"))
    h.feed(pause_event(tenant="globex", interrupt_id="g", run_id="run-g"))
    h.feed(pause_event(tenant="acme", name="approve_payment", interrupt_id="p", run_id="run-p"))
    h.feed(pause_event(tenant="initech", interrupt_id="x", run_id="run-x"))
    h.feed(pause_event(tenant=None, interrupt_id="n", run_id="run-n"))
    assert [(topic, t["tenant"]) for topic, t in h.tickets()] == [
        ("symfonic.human.acme.default", "acme"),
        ("symfonic.human.globex.globex-desk", "globex"),
        ("symfonic.human.acme.payments", "acme"),
        ("symfonic.human.initech.default", "initech"),  # not listed: its queue made on use
    ]
    [letter] = h.out.dead_letters
    assert letter.reason.value == "unroutable"
    assert "no scope.tenant" in letter.detail


def test_ticket_expired_when_routed_goes_to_the_expired_queue() -> None:
    h = RouterHarness()
    h.feed(pause_event(expires_at=NOW - 1))
    [(topic, ticket)] = h.tickets()
    assert topic == "symfonic.human.expired"
    assert ticket["queue"] == "default"
    assert len(h.registrations()) == 1  # answers to it are rejected as expired, not unknown


def test_a_ticket_expiring_the_moment_it_is_routed_goes_to_the_expired_queue() -> None:
    """The boundary: ``expires_at == now`` is expired (a ticket no one can answer in time
    must not wait on a live queue); a moment later it is not."""
    h = RouterHarness()
    h.feed(pause_event(expires_at=NOW))
    h.feed(pause_event(1, interrupt_id="intr-2", expires_at=NOW + 0.001))
    assert [topic for topic, _ in h.tickets()] == [
        "symfonic.human.expired", "symfonic.human.default"]


def test_unmatched_ticket_without_default_is_unroutable() -> None:
    h = RouterHarness(parse_rules("default: null\nrules: [{match: {kind: ask_user}, queue: q}]"))
    h.feed(pause_event(kind="interrupt"))
    assert h.tickets() == []
    [letter] = h.out.dead_letters
    assert letter.reason.value == "unroutable"
    assert letter.record.value == orjson.dumps(pause_event(kind="interrupt"))


def test_kernel_resending_a_run_gets_no_second_ticket_even_after_a_restore() -> None:
    h = RouterHarness()
    run = [
        raw("text_delta", 0, text="hi", scope=ACME),
        pause_event(1),
        raw("text_delta", 2, text="x", scope=ACME),
        pause_event(3, interrupt_id="intr-2"),
    ]
    for event in run:
        h.feed(event)
    write_changes(h.router, h.out)
    restored = RouterHarness()
    restore_from(restored.router, h.out.changelog)
    for event in run:  # the whole run again
        restored.feed(event)
    assert [t["ticket_id"] for _, t in h.tickets()] == ["intr-1", "intr-2"]
    assert restored.tickets() == []
    assert restored.out.counts["duplicates"] == 2


def test_closed_run_memory_is_tombstoned_after_grace() -> None:
    h = RouterHarness()
    h.feed(pause_event(0))
    h.feed(raw("done", 1, scope=ACME), now=NOW)
    write_changes(h.router, h.out)  # the run committed, closed
    assert h.out.changelog[b"run/run-1"] is not None
    h.router.punctuate(NOW + 59, h.out)
    assert h.router.active_runs == 1
    h.router.punctuate(NOW + 60, h.out)
    assert h.router.active_runs == 0
    write_changes(h.router, h.out)
    assert h.out.changelog[b"run/run-1"] is None


def test_a_run_put_and_deleted_before_any_commit_writes_nothing() -> None:
    h = RouterHarness()
    h.feed(pause_event(0))
    h.feed(raw("done", 1, scope=ACME), now=NOW)
    h.router.punctuate(NOW + 60, h.out)
    assert h.router.active_runs == 0
    write_changes(h.router, h.out)
    assert b"run/run-1" not in h.out.changelog  # never committed: no tombstone needed


def test_bad_raw_records_are_dead_lettered() -> None:
    h = RouterHarness()
    h.offset += 1
    h.router.process(InputRecord("in", 0, 1, b"k", b"{nope"), NOW, h.out)
    h.router.process(InputRecord("in", 0, 2, b"other", orjson.dumps(pause_event())), NOW, h.out)
    assert [letter.reason.value for letter in h.out.dead_letters] == [
        "invalid_json",
        "key_mismatch",
    ]


def test_rules_file_problems_name_the_file_and_rule(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "rules:\n  - match: {name: a}\n    queue: ok\n  - match: {shade: b}\n    queue: q\n"
    )
    with pytest.raises(RulesError) as caught:
        load_rules(path)
    assert str(path) in str(caught.value) and "rule 2" in str(caught.value)
    assert "shade" in str(caught.value)
    with pytest.raises(RulesError, match="cannot read"):
        load_rules(tmp_path / "missing.yaml")


def test_per_tenant_queues_are_created_on_use_and_nothing_else_is(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("- {match: {kind: ask_user}, queue: q}\n")
    topology = router_topology(Settings(routing_rules=path, tenant_queues=True, partitions=3))
    assert topology.on_demand_topic is not None
    spec = topology.on_demand_topic("symfonic.human.acme-eu.q")
    assert spec is not None
    assert (spec.name, spec.partitions, spec.configs["cleanup.policy"]) == (
        "symfonic.human.acme-eu.q", 3, "delete"
    )
    assert topology.on_demand_topic("symfonic.human.acme.default") is not None
    assert topology.on_demand_topic("symfonic.human.acme.expired") is not None
    for never in ("symfonic.human.acme.other", "symfonic.human.q", "symfonic.resumes",
                  "symfonic.human.expired", "other.human.acme.q", "symfonic.human.acme.eu.q",
                  "symfonic.human.acme.q\n"):
        assert topology.on_demand_topic(never) is None, never
    shared = router_topology(Settings(routing_rules=path))
    assert shared.on_demand_topic is None


def test_queue_topics_cover_every_rule_and_tenant() -> None:
    assert queue_topics(NAMES, RULES, tenant_queues=False) == [
        "symfonic.human.payments",
        "symfonic.human.questions",
        "symfonic.human.globex-desk",
        "symfonic.human.default",
        "symfonic.human.expired",
    ]
    per_tenant = queue_topics(NAMES, RULES, tenant_queues=True)
    assert "symfonic.human.acme.payments" in per_tenant
    assert "symfonic.human.globex.default" in per_tenant
    # Each tenant has its own expired queue; none is shared.
    assert {"symfonic.human.acme.expired", "symfonic.human.globex.expired"} <= set(per_tenant)
    assert len(per_tenant) == 2 * (4 + 1)


# -- the validator -----------------------------------------------------------------------


ANSWER = (("symfonic-record-type", b"answer"),)


class ValidatorHarness:
    def __init__(self) -> None:
        self.validator = ResumeValidator(NAMES, grace_s=100.0)
        self.out = Verdicts()
        self.offset = 0

    def record(
        self, key: bytes | None, value: bytes, headers: tuple[tuple[str, bytes], ...] = ANSWER
    ) -> InputRecord:
        """A record on pause-registrations: an answer the intake appended, by default."""
        self.offset += 1
        return InputRecord(NAMES.pause_registrations, 0, self.offset, key, value, headers)

    def register(self, router_out: Collector) -> None:
        for output in router_out.outputs:
            if output.record_type == "registration":
                self.validator.process(
                    self.record(output.key, output.value or b"", output.headers), NOW, self.out
                )

    def answer(
        self, ticket_id: str, token: str, answer: Any, now: float = NOW, key: bytes | None = None,
        responder: str = "reviewer@example.test",
    ) -> None:
        request = {
            "ticket_id": ticket_id,
            "token": token,
            "answer": answer,
            "responder": responder,
        }
        self.validator.process(
            self.record(key if key is not None else ticket_id.encode(), orjson.dumps(request)),
            now,
            self.out,
        )

    def outcomes(self) -> list[str]:
        results = []
        for output in self.out.outputs:
            body = orjson.loads(output.value or b"")
            if output.topic == NAMES.resumes:
                Resume.model_validate(body)
                results.append("accepted")
            else:
                results.append(ResumeRejection.model_validate(body).reason.value)
        return results


def routed(**fields: Any) -> Collector:
    h = RouterHarness()
    h.feed(pause_event(**fields))
    return h.out


def test_accepted_answer_becomes_a_resume_keyed_by_run_id() -> None:
    v = ValidatorHarness()
    v.register(routed())
    v.answer("intr-1", "tok-1", {"approved": True})
    [resume] = v.out.outputs
    assert (resume.topic, resume.key) == ("symfonic.resumes", b"run-1")
    assert orjson.loads(resume.value or b"") == {
        "ticket_id": "intr-1",
        "run_id": "run-1",
        "tool_call_id": "call-9",
        "interrupt_id": "intr-1",
        "answer": {"approved": True},
        "responder": "reviewer@example.test",
        "answered_at": NOW,
        "tenant": "acme",
        "request_id": None,
    }
    assert resume.headers == (("symfonic-outcome", b"accepted"), ("symfonic-tenant", b"acme"))


def test_each_rejection_reason() -> None:
    v = ValidatorHarness()
    v.register(routed())
    v.register(routed(interrupt_id="old", expires_at=NOW - 10))
    schema = {
        "type": "object",
        "required": ["approved"],
        "properties": {"approved": {"type": "boolean"}},
    }
    v.register(routed(interrupt_id="strict", payload={"response_schema": schema}))
    v.answer("nope", "tok-1", 1)
    v.answer("intr-1", "tok-2", 1)
    v.answer("old", "tok-1", 1)
    v.answer("strict", "tok-1", {"approved": "yes"})
    v.answer("strict", "tok-1", {"approved": True})
    v.answer("intr-1", "tok-1", 1)
    v.answer("intr-1", "tok-1", 2)
    v.answer("intr-1", "wrong", 2)
    assert v.outcomes() == [
        "unknown_ticket",
        "bad_token",
        "expired",
        "invalid_answer",
        "accepted",
        "accepted",
        "already_answered",
        "bad_token",
    ]
    invalid = orjson.loads(v.out.outputs[3].value or b"")
    assert "approved" in invalid["detail"]


def test_tenant_b_token_on_tenant_a_ticket_is_bad_token() -> None:
    v = ValidatorHarness()
    v.register(routed(tenant="acme", interrupt_id="a", token="acme-secret"))
    v.register(routed(tenant="globex", interrupt_id="g", token="globex-secret", run_id="run-g"))
    v.answer("a", "globex-secret", "ok")
    assert v.outcomes() == ["bad_token"]


def test_first_answer_wins_across_a_restore() -> None:
    v = ValidatorHarness()
    v.register(routed())
    v.answer("intr-1", "tok-1", "first")
    write_changes(v.validator, v.out)
    again = ValidatorHarness()
    restore_from(again.validator, v.out.changelog)
    again.answer("intr-1", "tok-1", "second")
    assert again.outcomes() == ["already_answered"]


def test_unreadable_requests_are_dead_lettered_and_malformed_answers_refused() -> None:
    v = ValidatorHarness()
    v.register(routed())
    v.validator.process(v.record(b"intr-1", b"{bad"), NOW, v.out)
    v.validator.process(v.record(b"intr-1", b"[1]"), NOW, v.out)
    v.validator.process(
        v.record(b"intr-1", b'{"ticket_id": 5, "token": "t", "answer": 1}'), NOW, v.out
    )
    assert [letter.reason.value for letter in v.out.dead_letters] == [
        "invalid_json",
        "invalid_event",
        "invalid_event",
    ]
    # A readable ticket id: the reviewer is told, on the ticket's key.
    v.validator.process(
        v.record(b"intr-1", b'{"ticket_id": "intr-1", "responder": "ann"}'), NOW, v.out
    )
    [refused] = v.out.outputs
    body = orjson.loads(refused.value or b"")
    assert (refused.topic, refused.key) == (NAMES.resume_rejections, b"intr-1")
    assert (body["reason"], body["responder"]) == ("invalid_answer", "ann")
    assert "token" in body["detail"] and "answer" in body["detail"]


def test_only_marked_records_count_on_the_registrations_topic() -> None:
    v = ValidatorHarness()
    [registration] = [o for o in routed().outputs if o.record_type == "registration"]
    v.validator.process(v.record(registration.key, registration.value or b"", ()), NOW, v.out)
    v.validator.process(
        v.record(registration.key, registration.value or b"", (("symfonic-record-type", b"x"),)),
        NOW, v.out,
    )
    assert [letter.reason.value for letter in v.out.dead_letters] == ["invalid_event"] * 2
    assert v.validator.active_runs == 0


def test_an_expired_ticket_answered_again_is_expired_not_already_answered() -> None:
    v = ValidatorHarness()
    v.register(routed(expires_at=NOW + 5))
    v.answer("intr-1", "tok-1", "first")
    v.answer("intr-1", "tok-1", "again", now=NOW + 1)
    v.answer("intr-1", "tok-1", "late", now=NOW + 10)
    assert v.outcomes() == ["accepted", "already_answered", "expired"]


def test_a_wrong_token_on_an_expired_ticket_is_bad_token_never_expired() -> None:
    """contract §7's order: the token is checked before anything else about the ticket is
    revealed, its expiry included; with the right token the same ticket is expired."""
    v = ValidatorHarness()
    v.register(routed(expires_at=NOW + 5))
    v.answer("intr-1", "wrong", "x", now=NOW + 5)
    v.answer("intr-1", "tok-1", "x", now=NOW + 5)
    assert v.outcomes() == ["bad_token", "expired"]


@pytest.mark.parametrize(
    "schema",
    [{"$ref": "#/nowhere"}, {"$ref": "https://schemas.example.test/answer.json"}],
)
def test_a_response_schema_that_cannot_be_applied_refuses_the_answer(
    schema: dict[str, Any],
) -> None:
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": schema}))
    v.answer("intr-1", "tok-1", {"approved": True})
    assert v.outcomes() == ["invalid_answer"]
    detail = orjson.loads(v.out.outputs[0].value or b"")["detail"]
    assert "cannot be applied" in detail


def test_answered_and_expired_tickets_are_forgotten_after_grace() -> None:
    v = ValidatorHarness()
    v.register(routed(expires_at=NOW + 50))
    write_changes(v.validator, v.out)
    v.validator.punctuate(NOW + 149, v.out)
    assert v.validator.active_runs == 1
    v.validator.punctuate(NOW + 150, v.out)
    assert v.validator.active_runs == 0
    write_changes(v.validator, v.out)
    assert v.out.changelog[b'tenant-ticket/["acme","intr-1"]'] is None


def test_topics_ensure_creates_every_queue_the_rules_can_reach(tmp_path: Path) -> None:
    from symfonic_stream.app.topics import required_topics

    path = tmp_path / "rules.yaml"
    path.write_text("tenants: [acme]\nrules:\n  - {match: {kind: ask_user}, queue: questions}\n")
    shared = {spec.name for spec in required_topics(Settings(routing_rules=path))}
    assert {
        "symfonic.human.questions",
        "symfonic.human.default",
        "symfonic.human.expired",
    } <= shared
    per_tenant = {
        spec.name for spec in required_topics(Settings(routing_rules=path, tenant_queues=True))
    }
    assert {"symfonic.human.acme.questions", "symfonic.human.acme.default"} <= per_tenant
    names = [spec.name for spec in required_topics(Settings(routing_rules=path))]
    assert len(names) == len(set(names))
