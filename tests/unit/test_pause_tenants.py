"""Tickets are per tenant (issue 33 item 5), as pure processors: another tenant's ticket
with an interrupt id already used is registered and answered on its own, and the state the
previous version wrote is still read. Verdicts are the reference's
(tests/reference/pauses.py); the same on a live broker: test_pause_tenants_live.py."""

from __future__ import annotations

from typing import Any

import orjson

from symfonic_stream.processors.pauses.router import ROUTED_CODEC
from tests.reference.pauses import ACCEPTED, ReferenceReview
from tests.unit.helpers import Verdicts, restore_from, write_changes
from tests.unit.test_pauses import NAMES, NOW, RouterHarness, ValidatorHarness, pause_event


def _route(*events: dict[str, Any]) -> tuple[RouterHarness, ReferenceReview]:
    router, reference = RouterHarness(), ReferenceReview()
    for event in events:
        router.feed(event)
        reference.pause(event)
    return router, reference


def _answer(v: ValidatorHarness, **request: Any) -> None:
    request.setdefault("answer", "yes")
    key = request["ticket_id"].encode()
    v.validator.process(v.record(key, orjson.dumps(request)), NOW, v.out)


def _verdicts(v: ValidatorHarness) -> list[tuple[str, str | None]]:
    verdicts: list[tuple[str, str | None]] = []
    for output in v.out.outputs:
        body = orjson.loads(output.value or b"")
        verdicts.append((ACCEPTED, body["run_id"]) if "run_id" in body else (body["reason"], None))
    return verdicts


def _check(v: ValidatorHarness, reference: ReferenceReview,
           requests: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Every request answered by the validator and the reference: the same verdicts."""
    want = [reference.answer({"answer": "yes", **r}, NOW) for r in requests]
    for request in requests:
        _answer(v, **request)
    assert _verdicts(v) == want
    return want


ACME = pause_event(tenant="acme", run_id="acme-run", interrupt_id="shared", token="acme-tok")
GLOBEX = pause_event(tenant="globex", run_id="globex-run", interrupt_id="shared",
                     token="globex-tok")


def test_another_tenants_ticket_with_the_same_id_is_registered_and_answered_on_its_own() -> None:
    router, reference = _route(ACME, GLOBEX)
    v = ValidatorHarness()
    v.register(router.out)
    assert v.out.counts["duplicates"] == 0 and v.validator.active_runs == 2
    verdicts = _check(v, reference, [
        {"ticket_id": "shared", "token": "globex-tok"},  # the second registrant's answer
        {"ticket_id": "shared", "token": "acme-tok"},
        {"ticket_id": "shared", "token": "acme-tok", "tenant": "globex"},  # not globex's
        {"ticket_id": "shared", "token": "globex-tok"},
    ])
    assert verdicts == [(ACCEPTED, "globex-run"), (ACCEPTED, "acme-run"), ("bad_token", None),
                        ("already_answered", None)]


def test_tickets_sharing_an_id_and_a_token_are_told_apart_by_the_tenant_named() -> None:
    router, reference = _route({**ACME, "interrupt": {**ACME["interrupt"], "token": "t"}},
                               {**GLOBEX, "interrupt": {**GLOBEX["interrupt"], "token": "t"}})
    v = ValidatorHarness()
    v.register(router.out)
    verdicts = _check(v, reference, [
        {"ticket_id": "shared", "token": "t"},  # whose? never guessed
        {"ticket_id": "shared", "token": "t", "tenant": "globex"},
        {"ticket_id": "shared", "token": "t", "tenant": "acme"},
        {"ticket_id": "shared", "token": "t", "tenant": "initech"},
    ])
    assert verdicts == [("bad_token", None), (ACCEPTED, "globex-run"), (ACCEPTED, "acme-run"),
                        ("unknown_ticket", None)]
    detail = orjson.loads(v.out.outputs[0].value or b"")["detail"]
    assert "must name its tenant" in detail


def test_another_tenants_interrupt_under_an_owned_run_id_makes_no_ticket_and_resumes_nothing(
) -> None:
    """Issue 43: globex's kernel published an interrupt under acme's run id (acme's
    interrupt id, globex's own token); the router made a globex ticket, and its answer
    wrote a resume for acme's run that acme's kernel could not tell from its own."""
    acme = pause_event(0, tenant="acme", run_id="acme-run-42", interrupt_id="call-9",
                       token="a")
    globex = pause_event(1, tenant="globex", run_id="acme-run-42", interrupt_id="call-9",
                         token="g")
    router, reference = _route(acme, globex, acme)  # and a re-send of acme's
    assert [t["tenant"] for _, t in router.tickets()] == ["acme"]
    assert [d.reason.value for d in router.out.dead_letters] == ["foreign_tenant"]
    assert router.out.counts["duplicates"] == 1 and reference.foreign == [globex]
    v = ValidatorHarness()
    v.register(router.out)
    _check(v, reference, [{"ticket_id": "call-9", "token": "g", "tenant": "globex"},
                          {"ticket_id": "call-9", "token": "g"},
                          {"ticket_id": "call-9", "token": "a"}])
    [resume] = [orjson.loads(o.value or b"") for o in v.out.outputs if o.topic == NAMES.resumes]
    assert resume["tenant"] == reference.tenant_of("acme-run-42") == "acme"


def test_both_tenants_tickets_survive_a_restore() -> None:
    router, reference = _route(ACME, GLOBEX)
    v = ValidatorHarness()
    v.register(router.out)
    write_changes(v.validator, v.out)
    again = ValidatorHarness()
    restore_from(again.validator, v.out.changelog)
    assert again.validator.active_runs == 2
    _check(again, reference, [{"ticket_id": "shared", "token": "acme-tok"},
                              {"ticket_id": "shared", "token": "globex-tok"}])
    again.validator.punctuate(1e12, again.out)  # both forgotten, and their index entries
    again.out = Verdicts()
    _answer(again, ticket_id="shared", token="acme-tok")
    assert _verdicts(again) == [("unknown_ticket", None)]


#: A ticket record as c805f61 (the version before tickets were per tenant) wrote it:
#: ``ticket/<id>`` → [token, run_id, tool_call_id, expires_at, response_schema,
#: registered_at, answered_at, schema_refused, invalid_answers].
PREVIOUS_KEY = b"ticket/shared"
PREVIOUS_VALUE = b'["acme-tok","acme-run","call-9",5000.0,null,900.0,0.0,null,0]'


def test_the_previous_versions_tickets_are_restored_and_moved() -> None:
    v = ValidatorHarness()
    restore_from(v.validator, {PREVIOUS_KEY: PREVIOUS_VALUE})
    assert v.validator.active_runs == 1
    router, _ = _route(ACME, GLOBEX)  # acme's: a re-send of the same run; globex's: new
    v.register(router.out)
    assert (v.out.counts["duplicates"], v.validator.active_runs) == (1, 2)
    _answer(v, ticket_id="shared", token="acme-tok", tenant="acme")  # any tenant's, as it was
    _answer(v, ticket_id="shared", token="globex-tok")
    assert _verdicts(v) == [(ACCEPTED, "acme-run"), (ACCEPTED, "globex-run")]
    write_changes(v.validator, v.out)
    assert v.out.changelog[PREVIOUS_KEY] is None  # moved: a tombstone for the old key
    again = ValidatorHarness()
    restore_from(again.validator, v.out.changelog)
    _answer(again, ticket_id="shared", token="acme-tok")
    assert _verdicts(again) == [("already_answered", None)]


def test_the_previous_routers_interrupts_stand_for_every_tenant() -> None:
    router = RouterHarness()
    restore_from(router.router, {b"run/acme-run": b'[0.0,["shared"],0.0]'})
    router.feed(pause_event(tenant="globex", run_id="acme-run", interrupt_id="shared"))
    assert router.tickets() == [] and router.out.counts["duplicates"] == 1
    router.feed(pause_event(tenant="globex", run_id="acme-run", interrupt_id="next"))
    write_changes(router.router, router.out)
    run = ROUTED_CODEC.decode(router.out.changelog[b"run/acme-run"] or b"")
    assert run.interrupt_ids == ["shared", ("globex", "next")]
