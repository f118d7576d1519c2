"""Trace context through every consumer (docs/metrics.md, "Tracing"): a raw record's W3C
``traceparent`` and ``tracestate``, checked, on every record projected from it (typed,
chunks, tickets, registrations, answers, resumes, rejections, review records, dead letters,
copies); none on a record of an untraced input; an invalid one dropped, never copied, and
never a reason to dead-letter."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord, feed
from symfonic_stream.engine.transaction import dead_letter_headers
from symfonic_stream.models.dead_letter import HEADER_REASON
from symfonic_stream.models.headers import TENANT_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER
from symfonic_stream.models.pauses import Resume, Ticket
from symfonic_stream.models.trace import (
    TRACESTATE_MAX_MEMBERS,
    TraceContext,
    trace_headers,
)
from symfonic_stream.processors.copier import Copier
from symfonic_stream.processors.pauses.desk import ReviewDesk
from symfonic_stream.processors.pauses.intake import ResumeIntake
from symfonic_stream.processors.pauses.registry import TICKET_CODEC, Registered
from symfonic_stream.processors.pauses.router import PauseRouter
from symfonic_stream.processors.pauses.rules import parse_rules
from symfonic_stream.processors.pauses.validator import ResumeValidator
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor, projection_of
from symfonic_stream.sdk.resumes import resume_for
from symfonic_stream.sdk.tracing import trace_context
from tests.unit.helpers import interrupt, raw
from tests.unit.test_pauses import NAMES

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
TRACED = ((TRACEPARENT_HEADER, PARENT.encode()), (TRACESTATE_HEADER, STATE.encode()))
NOW = 1000.0


def _trace_of(output: OutputRecord) -> tuple[tuple[str, bytes], ...]:
    return tuple(h for h in output.headers if h[0] in (TRACEPARENT_HEADER, TRACESTATE_HEADER))


# -- the header rules --------------------------------------------------------------------------

def test_a_valid_context_is_carried_as_it_came() -> None:
    assert trace_headers(TRACED) == TRACED
    assert trace_headers([(TRACEPARENT_HEADER, PARENT.encode())]) == (
        (TRACEPARENT_HEADER, PARENT.encode()),)
    assert trace_headers([("other", b"x"), *TRACED]) == TRACED
    # Two tracestate headers are one list (as HTTP joins repeated headers).
    assert trace_headers([TRACED[0], (TRACESTATE_HEADER, b"a=1"), (TRACESTATE_HEADER, b"b=2")]
                         ) == (TRACED[0], (TRACESTATE_HEADER, b"a=1,b=2"))


@pytest.mark.parametrize("traceparent", [
    b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # another version
    b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # a zero trace id
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # a zero parent id
    b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
    b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",   # short
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
    b"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
    b"", b"\xff" * 55,
])
def test_an_invalid_traceparent_is_dropped_with_its_tracestate(traceparent: bytes) -> None:
    assert trace_headers([(TRACEPARENT_HEADER, traceparent), TRACED[1]]) == ()


def test_two_traceparents_or_a_tracestate_alone_carry_nothing() -> None:
    assert trace_headers([TRACED[0], (TRACEPARENT_HEADER, OTHER.encode())]) == ()
    assert trace_headers([TRACED[1]]) == ()
    assert trace_headers([]) == ()


@pytest.mark.parametrize("tracestate", [
    ",".join(f"k{n}=v" for n in range(TRACESTATE_MAX_MEMBERS + 1)),  # 33 members
    "a=" + "x" * 255 + ",b=" + "y" * 255,  # over 512 bytes
    "a=1,a=2",  # a key twice
    "Upper=1", "a=", "a=b,c", "a=1 ,=2", "a=caf\u00e9",  # not W3C list members
    "a=" + "x" * 257,
])
def test_an_invalid_tracestate_is_dropped_and_the_traceparent_kept(tracestate: str) -> None:
    assert trace_headers([TRACED[0], (TRACESTATE_HEADER, tracestate.encode())]) == (TRACED[0],)


def test_the_bounds_themselves_are_valid() -> None:
    most = ",".join(f"k{n}=v" for n in range(TRACESTATE_MAX_MEMBERS))
    assert trace_headers([TRACED[0], (TRACESTATE_HEADER, most.encode())])[1][1] == most.encode()
    multi = "t1@sys=1, ,x_y-z*/=~!"  # a multi-tenant key, an empty member, odd characters
    assert len(trace_headers([TRACED[0], (TRACESTATE_HEADER, multi.encode())])) == 2


def test_a_trace_context_is_checked_and_read() -> None:
    context = TraceContext(PARENT, STATE)
    assert (context.trace_id, context.parent_id, context.sampled) == (
        TRACE_ID, "00f067aa0ba902b7", True)
    assert context.headers == TRACED
    assert TraceContext.of_headers(TRACED) == context
    assert TraceContext.of_headers([]) is None
    assert TraceContext.of_carrier({"traceparent": OTHER}) == TraceContext(OTHER)
    with pytest.raises(ValueError, match="traceparent"):
        TraceContext("00-nope")
    with pytest.raises(ValueError, match="tracestate"):
        TraceContext(PARENT, "a=1,a=2")
    assert trace_context(PARENT) == TraceContext(PARENT)
    with pytest.raises(ValueError):
        trace_context("not a traceparent")


# -- the projectors: typed and chunks ----------------------------------------------------------

def _event(index: int, kind: str = "text_delta", **fields: Any) -> bytes:
    body = {"run_id": "r", "index": index, "kind": kind, "timestamp": 1.0 + index,
            "scope": {"tenant": "acme"}, **fields}
    if kind == "text_delta":
        body.setdefault("text", f"t{index}")
    return orjson.dumps(body)


def _record(offset: int, value: bytes, headers: Any = TRACED, key: bytes = b"r") -> InputRecord:
    return InputRecord("symfonic.agent-events", 0, offset, key, value, tuple(headers))


def _projector(name: str) -> ProjectorProcessor:
    return ProjectorProcessor(projection_of(name), "out", GuardLimits(gap_timeout_s=5.0))


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_every_projected_record_carries_its_events_context(projection: str) -> None:
    processor, out = _projector(projection), Collector()
    feed(processor, _record(0, _event(0)), NOW, out)
    feed(processor, _record(1, _event(1, "done", result=None)), NOW, out)
    assert len(out.outputs) >= 3  # events and the end
    for output in out.outputs:
        assert output.headers == ((TENANT_HEADER, b"acme"), *TRACED)


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_an_untraced_run_gets_no_context_and_an_invalid_one_is_dropped(projection: str) -> None:
    processor, out = _projector(projection), Collector()
    feed(processor, _record(0, _event(0), headers=()), NOW, out)
    bad = ((TRACEPARENT_HEADER, b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01"), TRACED[1])
    feed(processor, _record(1, _event(1), headers=bad), NOW, out)
    feed(processor, _record(2, _event(2, "done", result=None), headers=()), NOW, out)
    assert not out.dead_letters  # a bad trace header is never a reason to dead-letter
    assert [o.headers for o in out.outputs] == [((TENANT_HEADER, b"acme"),)] * len(out.outputs)


def test_a_held_event_keeps_its_own_context_and_a_gap_takes_the_one_behind_it() -> None:
    processor, out = _projector("typed"), Collector()
    own = ((TRACEPARENT_HEADER, OTHER.encode()),)
    feed(processor, _record(2, _event(2), headers=own), NOW, out)  # waits behind 0 and 1
    feed(processor, _record(0, _event(0)), NOW, out)  # released; 2 still waits behind 1
    processor.punctuate(NOW + 10, out)  # 1 never came: a gap, then 2 released
    kinds = [next(k for k in ("event", "gap", "end") if k in orjson.loads(o.value or b""))
             for o in out.outputs]
    assert kinds == ["event", "gap", "event"]
    assert [_trace_of(o) for o in out.outputs] == [TRACED, own, own]


def test_an_abandoned_end_of_a_punctuation_carries_none() -> None:
    processor = ProjectorProcessor(projection_of("typed"), "out",
                                   GuardLimits(run_idle_timeout_s=10.0))
    out = Collector()
    feed(processor, _record(0, _event(0)), NOW, out)
    processor.punctuate(NOW + 100, out)
    end = out.outputs[-1]
    assert b"abandoned" in (end.value or b"") and _trace_of(end) == ()
    assert _trace_of(out.outputs[0]) == TRACED


def test_a_dead_letter_carries_the_checked_context_and_the_rest_whole() -> None:
    processor, out = _projector("typed"), Collector()
    feed(processor, _record(0, b"{not json", headers=[("x-mine", b"\xff"), *TRACED]), NOW, out)
    bad = [("x-mine", b"1"), (TRACEPARENT_HEADER, b"garbage"), TRACED[1]]
    feed(processor, _record(1, b"{not json", headers=bad), NOW, out)
    first, second = (dead_letter_headers(letter, "typed") for letter in out.dead_letters)
    assert first[:3] == [("x-mine", b"\xff"), *TRACED] and first[3][0] == HEADER_REASON
    assert second[0] == ("x-mine", b"1") and second[1][0] == HEADER_REASON


def test_the_copier_carries_a_valid_context_once_and_drops_an_invalid_one() -> None:
    copier, out = Copier("copies"), Collector()
    feed(copier, _record(0, b"v", headers=[("a", b"1"), *TRACED]), NOW, out)
    feed(copier, _record(1, b"v", headers=[("a", b"1"), (TRACEPARENT_HEADER, b"x")]), NOW, out)
    assert [o.headers for o in out.outputs] == [(("a", b"1"), *TRACED), (("a", b"1"),)]


# -- the pause path: tickets, registrations, answers, verdicts, review records ----------------

RULES = parse_rules("""
rules:
  - match: {name: ask_user}
    queue: questions
escalations:
  - {queue: questions, after_minutes: 1, to: oversight}
""")


class PausePath:
    """The router, the intake and the validator, each record fed as the engine feeds it."""

    def __init__(self) -> None:
        self.router = PauseRouter(NAMES, RULES, tenant_queues=False, grace_s=60.0)
        self.intake = ResumeIntake(NAMES.pause_registrations)
        self.validator = ResumeValidator(NAMES, grace_s=100.0,
                                         desk=ReviewDesk(NAMES, RULES))
        self.routed, self.out = Collector(), Collector()
        self.offset = 0

    def pause(self, headers: Any, run_id: str = "run-1", interrupt_id: str = "intr-1") -> None:
        event = raw("ask_user", 0, run_id, interrupt=interrupt(
            "ask_user", interrupt_id=interrupt_id, run_id=run_id, expires_at=NOW + 3600),
            scope={"tenant": "acme"})
        self.offset += 1
        feed(self.router, _record(self.offset, orjson.dumps(event), headers, run_id.encode()),
             NOW, self.routed)
        for output in self.routed.outputs:
            if output.topic == NAMES.pause_registrations and output.key == interrupt_id.encode():
                self._validate(output)

    def answer(self, headers: Any, token: str = "tok-1", now: float = NOW,
               ticket_id: str = "intr-1", **request: Any) -> None:
        body = {"ticket_id": ticket_id, "token": token, "answer": "yes", "tenant": "acme",
                **request}
        answers = Collector()
        self.offset += 1
        feed(self.intake, InputRecord(NAMES.resume_requests, 0, self.offset, b"?",
                                      orjson.dumps(body), tuple(headers)), now, answers)
        [answer] = answers.outputs
        self._validate(answer, now)

    def _validate(self, output: OutputRecord, now: float = NOW) -> None:
        self.offset += 1
        feed(self.validator, InputRecord(NAMES.pause_registrations, 0, self.offset, output.key,
                                         output.value, output.headers), now, self.out)

    def verdicts(self) -> list[OutputRecord]:
        return [o for o in self.out.outputs
                if o.topic in (NAMES.resumes, NAMES.resume_rejections)]


def test_a_traced_interrupts_ticket_registration_and_review_carry_its_context() -> None:
    path = PausePath()
    path.pause(TRACED)
    kinds = sorted(o.record_type for o in path.routed.outputs)
    assert kinds == ["registration", "ticket"]
    assert [_trace_of(o) for o in path.routed.outputs] == [TRACED, TRACED]
    [review] = path.out.outputs
    assert review.topic == NAMES.review_tickets and _trace_of(review) == TRACED


def test_an_answer_in_the_runs_context_carries_it_to_the_resume() -> None:
    path = PausePath()
    path.pause(TRACED)
    path.answer(TRACED)
    [resume] = path.verdicts()
    assert resume.record_type == "resume" and _trace_of(resume) == TRACED
    assert (TENANT_HEADER, b"acme") in resume.headers


def test_an_answer_in_its_own_context_keeps_it_and_one_in_none_takes_the_tickets() -> None:
    own = ((TRACEPARENT_HEADER, OTHER.encode()),)
    path = PausePath()
    path.pause(TRACED)
    path.answer(own)
    path.answer(())  # already answered: refused, told (its token matched) in the run's
    resume, refused = path.verdicts()
    assert (resume.record_type, _trace_of(resume)) == ("resume", own)
    assert (refused.record_type, _trace_of(refused)) == ("rejection", TRACED)


def test_a_request_that_shows_no_token_gets_only_its_own_context() -> None:
    path = PausePath()
    path.pause(TRACED)
    path.answer((), token="wrong")
    path.answer((), ticket_id="ghost")
    assert [(o.record_type, _trace_of(o)) for o in path.verdicts()] == [
        ("rejection", ()), ("rejection", ())]


def test_a_claim_and_the_timers_of_a_ticket_carry_the_tickets_context() -> None:
    path = PausePath()
    path.pause(TRACED)
    path.answer((), action="claim", responder="ana")
    path.validator.punctuate(NOW + 3000, path.out)  # the lease ran out, it escalates
    reviews = [o for o in path.out.outputs if o.topic == NAMES.review_tickets]
    escalated = [o for o in path.out.outputs if o.record_type == "ticket"]
    assert len(reviews) >= 3 and escalated
    assert {_trace_of(o) for o in reviews + escalated} == {TRACED}


def test_an_untraced_interrupt_gets_no_context_anywhere_on_the_pause_path() -> None:
    path = PausePath()
    path.pause(())
    path.answer(())
    path.answer((), action="claim", responder="ana")
    path.validator.punctuate(NOW + 3000, path.out)
    everything = path.routed.outputs + path.out.outputs
    assert len(everything) >= 5
    assert all(_trace_of(o) == () for o in everything)


def test_an_invalid_context_on_an_interrupt_is_dropped_not_dead_lettered() -> None:
    path = PausePath()
    path.pause([(TRACEPARENT_HEADER, b"00-zz"), TRACED[1]])
    assert not path.routed.dead_letters and len(path.routed.outputs) == 2
    assert all(_trace_of(o) == () for o in path.routed.outputs + path.out.outputs)


def test_a_tickets_context_survives_the_changelog_and_an_older_record_has_none() -> None:
    ticket = Registered("tok", "run-1", None, NOW, None, NOW, trace=TRACED)
    assert TICKET_CODEC.decode(TICKET_CODEC.encode(ticket)).trace == TRACED
    older = orjson.loads(TICKET_CODEC.encode(Registered("tok", "run-1", None, NOW, None, NOW)))
    assert TICKET_CODEC.decode(orjson.dumps(older[:12])).trace == ()


# -- the SDKs' side: what a reader, a reviewer and a kernel get --------------------------------

def test_a_resume_and_a_ticket_expose_their_records_context_outside_their_json() -> None:
    resume = {"ticket_id": "t", "run_id": "run-1", "tool_call_id": None, "interrupt_id": "t",
              "answer": "yes", "responder": None, "answered_at": NOW, "tenant": None,
              "request_id": None}
    got = resume_for(orjson.dumps(resume), TRACED, lambda run_id: None)
    assert got is not None and got.trace_context == TraceContext(PARENT, STATE)
    assert "trace" not in orjson.dumps(got.model_dump()).decode()
    untraced = resume_for(orjson.dumps(resume), [], lambda run_id: None)
    assert untraced is not None and untraced.trace_context is None
    assert "trace" not in str(Ticket.model_json_schema()) + str(Resume.model_json_schema())


def test_without_a_current_span_nothing_is_injected() -> None:
    from symfonic_stream.sdk.tracing import current_context

    assert current_context() is None  # no opentelemetry-api, or no span


def test_the_callers_current_opentelemetry_span_is_injected() -> None:
    trace = pytest.importorskip("opentelemetry.trace")  # the [tracing] extra
    from symfonic_stream.sdk.tracing import current_context

    span = trace.NonRecordingSpan(trace.SpanContext(
        int(TRACE_ID, 16), 0x00F067AA0BA902B7, is_remote=False,
        trace_flags=trace.TraceFlags(1)))
    with trace.use_span(span):
        assert trace_context(None) == current_context() == TraceContext(PARENT)
        assert trace_context(OTHER) == TraceContext(OTHER)  # given: it wins
    assert current_context() is None


def test_the_test_kit_carries_a_runs_context_through_the_deployed_consumers() -> None:
    from symfonic_stream.testing import TopologyTestDriver

    def pause(run_id: str) -> dict[str, Any]:
        return raw("ask_user", 0, run_id, interrupt=interrupt(
            "ask_user", interrupt_id=f"{run_id}-i", run_id=run_id, expires_at=NOW + 3600))

    with TopologyTestDriver(start=NOW) as driver:
        driver.pipe(pause("traced"), headers=TRACED)
        driver.pipe(pause("untraced"))
        tickets = {t.run_id: t for t in driver.tickets()}
        assert tickets["traced"].trace_context == TraceContext(PARENT, STATE)
        assert tickets["untraced"].trace_context is None
        for ticket in tickets.values():
            assert driver.answer(ticket, "yes").accepted
        assert {r.run_id: r.trace_context for r in driver.resumes()} == {
            "traced": TraceContext(PARENT, STATE), "untraced": None}
        typed = driver.records(NAMES.stream_events)
        assert {r.key: r.header(TRACEPARENT_HEADER) for r in typed} == {
            b"traced": PARENT.encode(), b"untraced": None}


def test_a_flood_of_tracestate_headers_is_dropped_without_joining_them_all() -> None:
    flood = [TRACED[0], *[(TRACESTATE_HEADER, b"a=1")] * 100_000]
    assert trace_headers(flood) == (TRACED[0],)
    assert trace_headers([TRACED[0], *[(TRACESTATE_HEADER, b"k%d=1" % n) for n in range(3)]]
                         ) == (TRACED[0], (TRACESTATE_HEADER, b"k0=1,k1=1,k2=1"))
