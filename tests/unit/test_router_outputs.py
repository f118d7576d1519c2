"""What the pause router writes besides the ticket's body: each record's key, timestamp and
headers, the counts its metrics are made of, the dead letters' own records, its decode
limits and what survives a restore. Written for the mutants `make mutate` found alive in
router.py (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

from collections import Counter

import orjson

from symfonic_stream.models.decoding import DecodeLimits
from symfonic_stream.processors.pauses.router import ROUTED_CODEC, PauseRouter
from symfonic_stream.processors.pauses.rules import parse_rules
from tests.unit.helpers import raw, restore_from, write_changes
from tests.unit.test_pauses import NAMES, NOW, RULES, RouterHarness, pause_event


def test_a_ticket_is_keyed_by_its_run_stamped_with_its_event_and_headed_by_queue_and_kind() -> None:
    h = RouterHarness()
    h.feed(pause_event(kind="ask_user", name="ask_user"))
    h.feed(pause_event(1, interrupt_id="old", expires_at=NOW - 1))
    h.feed(pause_event(2, interrupt_id="other", run_id="run-2"))
    tickets = [o for o in h.out.outputs if o.record_type == "ticket"]
    assert [(o.topic, o.key, o.source_ts, o.headers) for o in tickets] == [
        (NAMES.human_queue("questions"), b"run-1", 100.0,
         (("symfonic-queue", b"questions"), ("symfonic-kind", b"ask_user"))),
        (NAMES.expired_queue, b"run-1", 101.0,
         (("symfonic-queue", b"expired"), ("symfonic-kind", b"interrupt"))),
        (NAMES.human_queue("default"), b"run-2", 102.0,
         (("symfonic-queue", b"default"), ("symfonic-kind", b"interrupt"))),
    ]
    assert h.out.tickets == Counter({("questions", "ask_user"): 1, ("expired", "interrupt"): 1,
                                     ("default", "interrupt"): 1})
    h.feed(pause_event(3, interrupt_id="more", run_id="run-3"))
    assert h.out.tickets[("default", "interrupt")] == 2
    assert h.out.inputs == Counter({"ask_user": 1, "interrupt": 3})


def test_a_dead_letter_carries_the_record_and_the_router_keeps_its_decode_limits() -> None:
    h = RouterHarness()
    h.router = PauseRouter(NAMES, RULES, tenant_queues=False, grace_s=60.0,
                           decode=DecodeLimits(max_bytes=64))
    h.feed(pause_event())
    [letter] = h.out.dead_letters
    assert letter.reason.value == "too_large"
    assert letter.record.value == orjson.dumps(pause_event())
    assert h.out.inputs == Counter({"invalid": 1})


def test_a_rules_problem_makes_the_ticket_unroutable() -> None:
    rules = parse_rules("tenants: [acme]\nrules: [{match: {kind: interrupt}, queue: desk}]")
    h = RouterHarness(rules, tenant_queues=True)
    h.feed(pause_event(tenant="initech"))
    h.feed(pause_event(1, interrupt_id="bad", tenant="a.b", run_id="run-2"))
    assert [letter.reason.value for letter in h.out.dead_letters] == ["unroutable"]
    assert [topic for topic, _ in h.tickets()] == ["symfonic.human.initech.desk"]


def test_a_ticket_without_scope_or_event_session_takes_the_pauses() -> None:
    h = RouterHarness()
    event = pause_event()
    del event["scope"]
    h.feed(event)
    [(_, ticket)] = h.tickets()
    assert (ticket["tenant"], ticket["principal"], ticket["session_id"]) == (None, None, "sess-1")
    h.feed({**event, "index": 1, "interrupt": {**event["interrupt"], "interrupt_id": "i2"},
            "session_id": "own"})
    assert h.tickets()[-1][1]["session_id"] == "own"


def test_a_closed_runs_memory_survives_a_restore_with_its_closing_time() -> None:
    h = RouterHarness()
    h.feed(pause_event())
    write_changes(h.router, h.out)
    h.feed(raw("done", 1, timestamp=200.0, scope={"tenant": "acme", "principal": "pat"}))
    write_changes(h.router, h.out)
    run = ROUTED_CODEC.decode(h.out.changelog[b"run/run-1"] or b"")
    assert run.closed_at == NOW
    again = RouterHarness()
    restore_from(again.router, dict(h.out.changelog))
    again.router.punctuate(NOW + 59, again.out)
    assert again.router.active_runs == 1
    again.router.punctuate(NOW + 60, again.out)
    assert again.router.active_runs == 0


def test_an_unmatched_pause_without_a_default_queue_is_unroutable_saying_why() -> None:
    h = RouterHarness(parse_rules("default: null\nrules: [{match: {kind: ask_user}, queue: q}]"))
    h.feed(pause_event(kind="interrupt"))
    [letter] = h.out.dead_letters
    assert letter.reason.value == "unroutable"
    assert letter.detail == "no rule matches and the rules file names no default queue"
