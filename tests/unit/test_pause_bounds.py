"""The pause consumers' bounds (issue 16): state that ends even when runs never do, and
metric labels only from the project's own closed sets."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from symfonic_stream.engine.processor import OutputRecord
from symfonic_stream.engine.transaction import report_commit
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.processors.pauses.router import (
    DEFAULT_TICKET_MAX_LIFETIME_S,
    REMEMBERED_INTERRUPTS,
    ROUTED_CODEC,
)
from symfonic_stream.processors.pauses.validator import ResumeValidator
from tests.unit.helpers import Verdicts, restore_from, write_changes
from tests.unit.test_pauses import (
    NAMES,
    NOW,
    RouterHarness,
    ValidatorHarness,
    pause_event,
    routed,
)


def _router(idle_timeout_s: float = 100.0, punctuate_budget_s: float = 0.05) -> RouterHarness:
    from symfonic_stream.processors.pauses.router import PauseRouter
    from tests.unit.test_pauses import RULES

    h = RouterHarness()
    h.router = PauseRouter(NAMES, RULES, tenant_queues=False, grace_s=60.0,
                           idle_timeout_s=idle_timeout_s, punctuate_budget_s=punctuate_budget_s)
    return h


@pytest.mark.parametrize(("expires_in", "forgotten_after"), [
    (500.0, 500 + 2 * 60),  # the guard waits for the pause, abandons, then its grace
    (10.0, 100 + 100 / 8 + 60),  # its idle timeout (moved ahead by an eighth), the grace
])
def test_a_paused_run_that_never_closes_is_forgotten_once_the_guard_would_forget_it(
        expires_in: float, forgotten_after: float) -> None:
    h = _router(idle_timeout_s=100.0)
    h.feed(pause_event(expires_at=NOW + expires_in))
    assert h.router.active_runs == 1
    h.router.punctuate(NOW + forgotten_after - 0.5, h.out)
    assert h.router.active_runs == 1
    h.router.punctuate(NOW + forgotten_after, h.out)
    assert h.router.active_runs == 0


def test_a_far_future_expiry_is_capped_at_the_tickets_lifetime_after_its_event() -> None:
    h = _router(idle_timeout_s=100.0)  # (24 idle timeouts: the guard waits 2,400 s at most)
    h.feed(pause_event(expires_at=1.79e308))
    [(_, ticket)] = h.tickets()
    capped = 100.0 + DEFAULT_TICKET_MAX_LIFETIME_S  # the event's timestamp + a day
    assert ticket["expires_at"] == capped
    kept = capped + 60
    h.router.punctuate(kept - 1, h.out)
    assert h.router.active_runs == 1
    h.router.punctuate(kept, h.out)
    assert h.router.active_runs == 0


def test_a_run_remembers_only_its_latest_interrupts() -> None:
    h = RouterHarness()
    for n in range(REMEMBERED_INTERRUPTS + 50):
        h.feed(pause_event(n, interrupt_id=f"i-{n}"))
    write_changes(h.router, h.out)
    run = ROUTED_CODEC.decode(h.out.changelog[b"run/run-1"] or b"")
    assert len(run.interrupt_ids) == REMEMBERED_INTERRUPTS
    assert run.interrupt_ids[-1] == ("acme", f"i-{REMEMBERED_INTERRUPTS + 49}")
    again = RouterHarness()
    restore_from(again.router, dict(h.out.changelog))
    again.feed(pause_event(interrupt_id=f"i-{REMEMBERED_INTERRUPTS + 49}"))
    assert again.tickets() == []  # a re-send of a remembered one is still a duplicate


def test_the_previous_router_state_format_is_read() -> None:
    run = ROUTED_CODEC.decode(b'[0.0,["a","b"]]')
    assert (run.interrupt_ids, run.closed_at, run.forget_at) == (["a", "b"], 0.0, 0.0)


def test_a_ticket_with_a_far_future_expiry_is_forgotten_in_time() -> None:
    v = ValidatorHarness()
    v.register(routed(expires_at=1.79e308))
    kept = 100.0 + DEFAULT_TICKET_MAX_LIFETIME_S + 100  # the validator's grace is 100 s
    v.validator.punctuate(kept - 1, v.out)
    assert v.validator.active_runs == 1
    v.validator.punctuate(kept, v.out)
    assert v.validator.active_runs == 0


def test_the_validator_caps_a_registrations_expiry_at_its_own_ticket_lifetime() -> None:
    """A registration whose expiry no router of this configuration capped (a router with a
    longer lifetime, or an older version's) lives at most the validator's own
    ``SYMFONIC_TICKET_MAX_LIFETIME_S`` after the validator registered it."""
    v = ValidatorHarness()
    v.validator = ResumeValidator(NAMES, grace_s=100.0, max_lifetime_s=50.0)
    v.register(routed(expires_at=1.79e308))
    v.register(routed(interrupt_id="intr-2", expires_at=1.79e308))
    v.answer("intr-1", "tok-1", "in time", now=NOW + 49.5)
    v.answer("intr-2", "tok-1", "too late", now=NOW + 50)
    assert v.outcomes() == ["accepted", "expired"]
    # ... and it is forgotten at that capped expiry plus the grace, not a day later.
    v.validator.punctuate(NOW + 50 + 100 - 1, v.out)
    assert v.validator.active_runs == 2
    v.validator.punctuate(NOW + 50 + 100, v.out)
    assert v.validator.active_runs == 0


def _metrics() -> tuple[CollectorRegistry, ConsumerMetrics]:
    registry = CollectorRegistry()
    return registry, ConsumerMetrics("pauses", registry=registry)


def _series(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [dict(sample.labels) for family in registry.collect() for sample in family.samples
            if sample.name == name]


def test_ticket_metrics_name_the_rules_queue_never_the_tenant_or_a_header() -> None:
    h = RouterHarness(tenant_queues=True)
    h.feed(pause_event(tenant="acme", name="approve_payment"))
    [(topic, _)] = h.tickets()
    assert topic == NAMES.human_queue("payments", "acme")  # the tenant is in the topic ...
    registry, metrics = _metrics()
    report_commit(metrics, NAMES.agent_events, h.out, 1)
    series = _series(registry, "symfonic_stream_tickets_routed_total")
    assert series == [{"consumer": "pauses", "queue": "payments", "kind": "interrupt"}]


def test_headers_of_client_records_never_become_labels() -> None:
    out = Verdicts()
    odd = (("symfonic-queue", b"made-up-1"), ("symfonic-kind", b"\xff\xfe"),
           ("symfonic-outcome", b"\xff"))
    for n in range(100):
        out.emit(OutputRecord(NAMES.pause_registrations, b"k", b"{}", "answer", None,
                              (*odd, ("symfonic-queue", f"q{n}".encode()))))
    registry, metrics = _metrics()
    report_commit(metrics, NAMES.resume_requests, out, 100)  # no raise on non-UTF-8 either
    assert _series(registry, "symfonic_stream_tickets_routed_total") == []
    outcomes = {labels["outcome"] for labels in _series(registry, "symfonic_stream_resumes_total")}
    assert "\ufffd" not in "".join(outcomes) and len(outcomes) <= 7


def test_the_router_forgets_within_its_punctuation_budget() -> None:
    h = _router(punctuate_budget_s=0.0)
    for n in range(5):
        h.feed(pause_event(run_id=f"run-{n}", interrupt_id=f"i-{n}", expires_at=NOW + 10))
    h.router.punctuate(NOW + 1000, h.out)
    assert h.router.active_runs == 4 and h.out.counts["punctuations_cut_short"] == 1
    for _ in range(4):
        h.router.punctuate(NOW + 1000, h.out)
    assert h.router.active_runs == 0
