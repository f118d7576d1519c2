"""What the resume validator writes besides its verdicts: each record's type and outcome
header, the counts its metrics are made of, the dead letters' own records, its decode
limits, the key check and what survives a restore. Written for the mutants `make mutate`
found alive in validator.py (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

from collections import Counter

import orjson

from symfonic_stream.models.decoding import DecodeLimits
from symfonic_stream.processors.pauses.validator import (
    MAX_INVALID_ANSWERS,
    REGISTRATION_INPUT,
    REQUEST_INPUT,
    ResumeValidator,
)
from tests.unit.helpers import restore_from, write_changes
from tests.unit.test_pauses import ANSWER, NAMES, NOW, ValidatorHarness, routed

STRICT = {"type": "object", "required": ["approved"]}


def test_each_verdict_carries_its_type_and_outcome_header_and_is_counted() -> None:
    v = ValidatorHarness()
    v.register(routed())
    v.answer("intr-1", "tok-1", "yes")
    v.answer("intr-1", "tok-1", "again")
    v.answer("intr-1", "nope", "x")
    v.answer("ghost", "tok-1", "x")
    got = [(o.topic, o.record_type, o.source_ts, o.headers) for o in v.out.outputs]
    v.register(routed(interrupt_id="intr-2"))
    v.answer("intr-2", "tok-1", "yes")
    v.answer("intr-2", "tok-1", "again")
    tenant = ("symfonic-tenant", b"acme")  # the run's; not told to a request without its token
    assert got == [
        (NAMES.resumes, "resume", None, (("symfonic-outcome", b"accepted"), tenant)),
        (NAMES.resume_rejections, "rejection", None,
         (("symfonic-outcome", b"already_answered"), tenant)),
        (NAMES.resume_rejections, "rejection", None, (("symfonic-outcome", b"bad_token"),)),
        (NAMES.resume_rejections, "rejection", None, (("symfonic-outcome", b"unknown_ticket"),)),
    ]
    assert v.out.resumes == Counter(
        {"accepted": 2, "already_answered": 2, "bad_token": 1, "unknown_ticket": 1})
    assert v.out.inputs == Counter({REGISTRATION_INPUT: 2, REQUEST_INPUT: 6})
    rejected = [orjson.loads(o.value or b"") for o in v.out.outputs[1:4]]
    assert [r["responder"] for r in rejected] == ["reviewer@example.test"] * 3
    assert [r["tenant"] for r in rejected] == ["acme", None, None]


def test_a_dead_letter_carries_the_record_it_refuses() -> None:
    v = ValidatorHarness()
    record = v.record(b"intr-1", b"{not json")
    v.validator.process(record, NOW, v.out)
    [letter] = v.out.dead_letters
    assert letter.record is record
    assert v.out.inputs == Counter({"invalid": 1})


def test_its_own_decode_limits_apply() -> None:
    v = ValidatorHarness()
    v.validator = ResumeValidator(NAMES, grace_s=100.0, decode=DecodeLimits(max_bytes=64))
    request = orjson.dumps({"ticket_id": "intr-1", "token": "tok-1", "answer": "x" * 64})
    v.validator.process(v.record(b"intr-1", request), NOW, v.out)
    assert [letter.reason.value for letter in v.out.dead_letters] == ["too_large"]


def test_a_record_on_another_key_than_its_ticket_is_dead_lettered_naming_the_key() -> None:
    v = ValidatorHarness()
    [registration] = [o for o in routed().outputs if o.record_type == "registration"]
    v.validator.process(v.record(b"other", registration.value or b"", registration.headers),
                        NOW, v.out)
    v.answer("intr-1", "tok-1", "x", key=b"\xff-elsewhere")
    v.validator.process(v.record(None, orjson.dumps(
        {"ticket_id": "intr-1", "token": "tok-1", "answer": 1}), ANSWER), NOW, v.out)
    letters = [(letter.reason.value, letter.detail) for letter in v.out.dead_letters]
    assert letters == [
        ("key_mismatch", "record key 'other' differs from ticket_id 'intr-1'"),
        ("key_mismatch", "record key '\ufffd-elsewhere' differs from ticket_id 'intr-1'"),
        ("key_mismatch", "record key '<no key>' differs from ticket_id 'intr-1'"),
    ]
    assert v.validator.active_runs == 0 and v.out.outputs == []


def test_refused_answers_are_counted_across_a_restore() -> None:
    """Its share of invalid answers is state: a restart does not grant a fresh share."""
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": STRICT}))
    write_changes(v.validator, v.out)  # the registration committed, then the answers
    for _ in range(MAX_INVALID_ANSWERS):
        v.answer("intr-1", "tok-1", "not an object")
    write_changes(v.validator, v.out)
    again = ValidatorHarness()
    restore_from(again.validator, v.out.changelog)
    again.answer("intr-1", "tok-1", {"approved": True})
    [refused] = again.out.outputs
    body = orjson.loads(refused.value or b"")
    assert body["reason"] == "invalid_answer" and "no more of its are checked" in body["detail"]


def test_an_ambiguous_token_is_refused_naming_the_tenant_it_lacks() -> None:
    v = ValidatorHarness()
    v.register(routed(tenant="acme"))
    v.register(routed(tenant="globex", run_id="run-g"))
    v.answer("intr-1", "tok-1", "x")
    [refused] = v.out.outputs
    body = orjson.loads(refused.value or b"")
    assert (body["reason"], body["detail"]) == (
        "bad_token",
        "the token matches tickets of several tenants with this id: the request must name "
        "its tenant")
    assert body["rejected_at"] == NOW


def test_a_wrong_token_is_told_only_that() -> None:
    v = ValidatorHarness()
    v.register(routed())
    v.answer("intr-1", "nope", "x")
    [refused] = v.out.outputs
    assert orjson.loads(refused.value or b"")["detail"] == "token does not match"




def test_a_registration_that_is_no_ticket_is_dead_lettered_saying_so() -> None:
    v = ValidatorHarness()
    v.validator.process(v.record(b"t", orjson.dumps({"ticket_id": "t"}),
                                 (("symfonic-record-type", b"ticket"),)), NOW, v.out)
    [letter] = v.out.dead_letters
    assert letter.reason.value == "invalid_event" and letter.detail.startswith("ticket: ")
    assert v.validator.active_runs == 0


def test_a_response_schema_that_is_no_object_is_no_schema() -> None:
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": "must be yes"}))
    v.answer("intr-1", "tok-1", 42)
    assert v.outcomes() == ["accepted"]


def test_a_malformed_requests_responder_that_is_no_string_is_not_repeated() -> None:
    v = ValidatorHarness()
    v.validator.process(v.record(b"t", orjson.dumps(
        {"ticket_id": "t", "responder": 5, "token": 5, "answer": 1})), NOW, v.out)
    [refused] = v.out.outputs
    assert orjson.loads(refused.value or b"")["responder"] is None


def test_wrong_tokens_do_not_use_up_a_tickets_share_of_invalid_answers() -> None:
    v = ValidatorHarness()
    v.register(routed(payload={"response_schema": STRICT}))
    for _ in range(MAX_INVALID_ANSWERS + 1):
        v.answer("intr-1", "wrong", {"approved": True})
    v.answer("intr-1", "tok-1", {"approved": True})
    assert v.outcomes()[-1] == "accepted"
