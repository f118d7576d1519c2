"""Who may register a ticket and who may answer one (issue 17), as pure processors: the
intake takes everything on resume-requests for an answer, the validator takes a
registration only from the registrations topic, answered tickets stay answered, and tenant
queue names cannot collide or escape."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.models.decoding import DecodeLimits
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.pauses.intake import ResumeIntake
from symfonic_stream.processors.pauses.registry import TICKET_CODEC
from symfonic_stream.processors.pauses.router import PauseRouter
from symfonic_stream.processors.pauses.rules import RulesError, is_topic_part, parse_rules
from symfonic_stream.processors.pauses.validator import (
    MAX_INVALID_ANSWERS,
    MAX_INVALID_ANSWERS_PER_TICKET,
)
from tests.unit.helpers import Verdicts, restore_from, write_changes
from tests.unit.test_pauses import (
    NAMES,
    NOW,
    RouterHarness,
    ValidatorHarness,
    pause_event,
    routed,
)

TICKET_HEADER = (("symfonic-record-type", b"ticket"),)


def intake(record: InputRecord, limits: DecodeLimits | None = None) -> Collector:
    out = Verdicts()
    processor = ResumeIntake(NAMES.pause_registrations, *([limits] if limits else []))
    processor.process(record, NOW, out)
    return out


def request(value: bytes, key: bytes | None = b"whatever",
            headers: tuple[tuple[str, bytes], ...] = ()) -> InputRecord:
    return InputRecord(NAMES.resume_requests, 0, 7, key, value, headers)


def through_intake(v: ValidatorHarness, record: InputRecord) -> None:
    """What a reviewer's record on resume-requests becomes at the validator."""
    for copy in intake(record).outputs:
        v.validator.process(v.record(copy.key, copy.value or b"", copy.headers), NOW, v.out)


def forged_registration(token: str = "forged") -> bytes:
    [registration] = [o for o in routed(run_id="victim").outputs
                      if o.record_type == "registration"]
    ticket = orjson.loads(registration.value or b"")
    return orjson.dumps({**ticket, "token": token})


def test_the_intake_keys_each_answer_by_its_ticket_and_drops_client_headers() -> None:
    value = orjson.dumps({"ticket_id": "intr-1", "token": "t", "answer": 1})
    out = intake(request(value, key=None, headers=(("symfonic-record-type", b"ticket"),
                                                    ("symfonic-queue", b"made-up"))))
    assert out.outputs == [OutputRecord(NAMES.pause_registrations, b"intr-1", value, "answer",
                                        None, (("symfonic-record-type", b"answer"),))]


@pytest.mark.parametrize(("value", "reason"), [
    (b"{nope", "invalid_json"),
    (b"[1]", "invalid_event"),
    (b'{"ticket_id": 5}', "invalid_event"),
    (b'{"ticket_id": ""}', "invalid_event"),
    (orjson.dumps({"ticket_id": "x" * 257}), "invalid_event"),
    (b'{"ticket_id": "a", "ticket_id": "b"}', "invalid_event"),  # duplicate keys
    (b'{"ticket_id": "a", "answer": ' + b"[" * 100 + b"]" * 100 + b"}", "invalid_event"),
    (b'{"ticket_id": "a", "answer": "' + b"x" * 2000 + b'"}', "too_large"),
])
def test_the_intake_dead_letters_what_names_no_ticket(value: bytes, reason: str) -> None:
    out = intake(request(value), DecodeLimits(max_bytes=1024))
    assert out.outputs == []
    assert [letter.reason.value for letter in out.dead_letters] == [reason]


def test_a_forged_registration_on_resume_requests_registers_nothing() -> None:
    v = ValidatorHarness()
    through_intake(v, request(forged_registration(), key=b"intr-1", headers=TICKET_HEADER))
    through_intake(v, request(orjson.dumps({"ticket_id": "intr-1", "token": "forged",
                                            "answer": "pwned"})))
    assert v.validator.active_runs == 0
    assert "accepted" not in v.outcomes()
    assert v.outcomes() == ["invalid_answer", "unknown_ticket"]


def test_a_forged_registration_before_the_routers_cannot_hijack_the_ticket() -> None:
    v = ValidatorHarness()
    through_intake(v, request(forged_registration(), key=b"intr-1", headers=TICKET_HEADER))
    v.register(routed(run_id="victim"))  # the router's own, on the registrations topic
    through_intake(v, request(orjson.dumps({"ticket_id": "intr-1", "token": "forged",
                                            "answer": "pwned"})))
    through_intake(v, request(orjson.dumps({"ticket_id": "intr-1", "token": "tok-1",
                                            "answer": "real"})))
    assert v.outcomes() == ["invalid_answer", "bad_token", "accepted"]
    resume = orjson.loads(v.out.outputs[-1].value or b"")
    assert (resume["answer"], resume["run_id"]) == ("real", "victim")


def test_an_answered_ticket_is_never_answered_again_even_after_it_is_forgotten() -> None:
    h = RouterHarness()
    event = pause_event(expires_at=1.79e308)
    h.feed(event)
    v = ValidatorHarness()
    v.register(h.out)
    v.answer("intr-1", "tok-1", "first")
    # Remembered (a tombstone of the answer) until its capped expiry plus the grace ...
    [(_, ticket)] = h.tickets()
    forgotten = ticket["expires_at"] + 100
    v.validator.punctuate(forgotten - 1, v.out)
    assert v.validator.active_runs == 1
    v.validator.punctuate(forgotten, v.out)
    assert v.validator.active_runs == 0
    # ... and a kernel's late re-send, routed again by a router that forgot the run too,
    # gets the same capped expiry: the ticket it registers is already expired.
    late = RouterHarness()
    late.feed(event, now=forgotten + 10)
    [(_, again)] = late.tickets()
    assert again["expires_at"] == ticket["expires_at"]
    v.out = Verdicts()
    for output in late.out.outputs:
        if output.record_type == "registration":
            v.validator.process(v.record(output.key, output.value or b"", output.headers),
                                forgotten + 10, v.out)
    v.answer("intr-1", "tok-1", "second", now=forgotten + 11)
    assert v.outcomes() == ["expired"]


def test_a_registration_seen_twice_keeps_the_first() -> None:
    v = ValidatorHarness()
    v.register(routed(token="first"))
    v.register(routed(token="second"))
    v.answer("intr-1", "second", 1)
    v.answer("intr-1", "first", 1)
    assert v.outcomes() == ["bad_token", "accepted"]
    assert v.out.counts["duplicates"] == 1


@pytest.mark.parametrize("tenant", ["a.b", "a\n", "", "a/b", "ü", "x" * 101, "a b"])
def test_a_tenant_that_cannot_be_one_topic_part_is_unroutable(tenant: str) -> None:
    h = RouterHarness(tenant_queues=True)
    h.feed(pause_event(tenant=tenant))
    assert h.tickets() == [] and h.registrations() == []
    [letter] = h.out.dead_letters
    assert letter.reason.value == "unroutable"


def test_a_queue_topic_over_kafkas_249_characters_is_unroutable() -> None:
    rules = parse_rules(f"default: {'q' * 100}")
    h = RouterHarness(rules, tenant_queues=True)
    h.feed(pause_event(tenant="t" * 100))  # symfonic.human. + 100 + . + 100 = 216: fits
    assert len(h.tickets()) == 1
    long_prefix = RouterHarness(rules, tenant_queues=True)
    long_prefix.router = PauseRouter(TopicNames("p" * 60), rules, tenant_queues=True,
                                     grace_s=60.0)  # 60 + 7 + 201 = 268 characters
    long_prefix.feed(pause_event(tenant="t" * 100))
    assert long_prefix.tickets() == []
    [letter] = long_prefix.out.dead_letters
    assert (letter.reason.value, "249" in letter.detail) == ("unroutable", True)


def test_expired_tickets_of_each_tenant_go_to_that_tenants_expired_queue() -> None:
    h = RouterHarness(tenant_queues=True)
    h.feed(pause_event(tenant="acme", expires_at=NOW - 1))
    h.feed(pause_event(tenant="globex", expires_at=NOW - 1, interrupt_id="g", run_id="run-g"))
    assert [topic for topic, _ in h.tickets()] == [
        "symfonic.human.acme.expired", "symfonic.human.globex.expired"
    ]


@pytest.mark.parametrize("queue", ["b.c", "expired", "a\n"])
def test_rules_refuse_a_queue_that_is_not_one_topic_part(queue: str) -> None:
    with pytest.raises(RulesError):
        parse_rules(orjson.dumps({"rules": [{"queue": queue}]}).decode())


PART = st.text(st.sampled_from("ab.-_\n"), min_size=0, max_size=4)


@given(PART, PART, PART, PART)
def test_no_two_tenant_queues_share_a_topic(t1: str, q1: str, t2: str, q2: str) -> None:
    if not all(is_topic_part(part) for part in (t1, q1, t2, q2)):
        return  # (refused before routing: the tests above)
    same = NAMES.human_queue(q1, t1) == NAMES.human_queue(q2, t2)
    assert same == ((t1, q1) == (t2, q2))
    assert NAMES.human_queue(q1, t1).startswith(NAMES.tenant_queues_prefix(t1))
    if t1 != t2:
        assert not NAMES.human_queue(q2, t2).startswith(NAMES.tenant_queues_prefix(t1))


def test_a_schema_is_checked_once_at_registration_and_its_refusal_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from symfonic_stream.processors.pauses import validator as module

    checks: list[object] = []
    real = module.schema_problem
    monkeypatch.setattr(module, "schema_problem", lambda s: checks.append(s) or real(s))
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": {"$ref": "file:///etc/passwd"}}))
    v.register(routed(interrupt_id="ok", payload={"response_schema": {"type": "integer"}}))
    for n in range(3):
        v.answer("intr-1", "tok-1", n)
        v.answer("ok", "tok-1", "not an integer")
    assert len(checks) == 2  # once per ticket, not per answer
    write_changes(v.validator, v.out)
    again = ValidatorHarness()
    restore_from(again.validator, v.out.changelog)
    again.answer("intr-1", "tok-1", 1)
    again.answer("ok", "tok-1", 7)
    assert again.outcomes() == ["invalid_answer", "accepted"]
    detail = orjson.loads(again.out.outputs[0].value or b"")["detail"]
    assert "refers outside itself" in detail and "passwd" not in detail


def test_a_ticket_checks_at_most_its_share_of_invalid_answers_per_responder() -> None:
    """Issue 43: any token holder locked a ticket for everyone with 20 invalid answers;
    now each responder has its own share, and the ticket a bound of five shares."""
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": {"type": "integer"}}))
    for _ in range(MAX_INVALID_ANSWERS + 5):
        v.answer("intr-1", "tok-1", "no", responder="mallory")
    v.answer("intr-1", "tok-1", 1, responder="mallory")  # mallory's are no longer checked
    details = [orjson.loads(o.value or b"")["detail"] for o in v.out.outputs]
    assert v.outcomes() == ["invalid_answer"] * (MAX_INVALID_ANSWERS + 6)
    assert all("fails 'type'" in d for d in details[:MAX_INVALID_ANSWERS])
    assert all("no more of its are checked" in d for d in details[MAX_INVALID_ANSWERS:])
    v.out = Verdicts()
    v.answer("intr-1", "tok-1", 1, responder="pat")  # another reviewer's is checked
    assert v.outcomes() == ["accepted"]


def test_the_invalid_answers_a_ticket_checks_are_bounded_in_all() -> None:
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": {"type": "integer"}}))
    responders = [f"r{n}" for n in range(MAX_INVALID_ANSWERS_PER_TICKET // MAX_INVALID_ANSWERS)]
    for responder in responders:
        for _ in range(MAX_INVALID_ANSWERS):
            v.answer("intr-1", "tok-1", "no", responder=responder)
    v.out = Verdicts()
    for n in range(50):  # new names: refused unchecked, and no state for them
        v.answer("intr-1", "tok-1", 1, responder=f"new-{n}")
    details = [orjson.loads(o.value or b"")["detail"] for o in v.out.outputs]
    assert all("no more are checked" in d for d in details) and len(details) == 50
    write_changes(v.validator, v.out)
    [ticket] = [TICKET_CODEC.decode(value) for value in v.out.changelog.values() if value]
    assert sorted(ticket.invalid_by) == sorted(responders)


def test_the_previous_ticket_record_is_read() -> None:
    old = b'["tok","run-1",null,5000.0,null,1000.0,0.0]'
    ticket = TICKET_CODEC.decode(old)
    assert (ticket.token, ticket.schema_refused, ticket.invalid_answers) == ("tok", None, 0)
