"""The test kit as its users have it: this module imports nothing of ``symfonic_stream`` but
the documented ``symfonic_stream.testing`` (docs/testing-your-code.md), and its
expectations are the reference oracle's (tests/reference), never the package's.

One run, start to end: projected, a hole expired into a gap by the clock, paused, its
ticket answered with its token and the resume read, every consumer crashed and restored
from its changelog, then the run ends. tests/integration/test_testing_kit_live.py runs
:data:`STEPS` against the live consumers on the broker and compares their records with
the driver's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from symfonic_stream.testing import TopologyTestDriver
from tests.reference import oracle
from tests.reference.pauses import ACCEPTED, ReferenceReview

RUN = "run-kit"
TENANT = "acme"
TOKEN = "tok-kit"


def event(now: float, index: int, kind: str, **fields: Any) -> dict[str, Any]:
    """The kernel's event ``index``, written a second after the one before it."""
    return {"run_id": RUN, "index": index, "kind": kind, "timestamp": now + index,
            "scope": {"tenant": TENANT}, **fields}


def pause(now: float, index: int) -> dict[str, Any]:
    """An ask_user that may be answered for an hour."""
    return event(now, index, "ask_user", interrupt={
        "name": "ask_user", "kind": "ask_user",
        "payload": {"questions": [{"question": "Ship it?"}]}, "token": TOKEN,
        "tool_call_id": "call-1", "interrupt_id": "intr-kit", "run_id": RUN,
        "session_id": "sess-1", "expires_at": now + 3600, "resumable": True})


def before_the_hole(now: float) -> list[dict[str, Any]]:
    return [event(now, 0, "thinking", text="plan"), event(now, 1, "text_delta", text="Hel"),
            event(now, 3, "text_delta", text="world")]  # index 2 never comes


def after_the_resume(now: float) -> list[dict[str, Any]]:
    return [event(now, 5, "text_delta", text="shipped"), event(now, 6, "done")]


def every_event(now: float) -> list[dict[str, Any]]:
    return [*before_the_hole(now), pause(now, 4), *after_the_resume(now)]


def lines(events: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(e).encode() for e in events]


def oracle_projection(events: list[dict[str, Any]], projection: oracle.ProjectionName
                      ) -> list[bytes]:
    envelopes, dead = oracle.project(lines(events), projection)
    assert dead == []
    return [oracle.encode(envelope) for envelope in envelopes]


#: The steps, as the driver takes them (the live test takes each its own way).
Step = tuple[str, Any]


def steps(now: float) -> list[Step]:
    return [
        *(("pipe", e) for e in before_the_hole(now)),
        ("expire the gap", None),
        ("pipe", pause(now, 4)),
        ("answer", {"answers": ["yes"]}),
        ("crash", None),
        *(("pipe", e) for e in after_the_resume(now)),
    ]


def take(driver: TopologyTestDriver, step: Step,
         verdicts: list[tuple[str, str | None]]) -> None:
    what, argument = step
    if what == "pipe":
        driver.pipe(argument)
    elif what == "expire the gap":
        driver.advance(driver.settings.gap_timeout_s + 1)
    elif what == "answer":
        [ticket] = driver.tickets()
        outcome = driver.answer(ticket, argument, responder="pat")
        verdicts.append((ACCEPTED if outcome.accepted else str(outcome.reason), ticket.token))
    elif what == "crash":
        driver.crash()


def run_steps(driver: TopologyTestDriver, now: float,
              each: Callable[[Step], None] = lambda step: None
              ) -> list[tuple[str, str | None]]:
    verdicts: list[tuple[str, str | None]] = []
    for step in steps(now):
        take(driver, step, verdicts)
        each(step)
    return verdicts


def test_a_run_projected_gapped_paused_answered_resumed_crashed_and_restored() -> None:
    now = 1764480000.0
    review = ReferenceReview()
    review.pause(pause(now, 4))
    with TopologyTestDriver(start=now) as driver:
        seen: list[int] = []
        verdicts = run_steps(driver, now, lambda step: seen.append(
            len(driver.records("symfonic.stream-events"))))
        # The hole became a gap when the clock passed the gap timeout, not before.
        assert seen[2] == 2 and seen[3] == 4
        expected = oracle_projection(every_event(now), "typed")
        assert [r.value for r in driver.records("symfonic.stream-events")] == expected
        assert [r.key for r in driver.records("symfonic.stream-events")] == [RUN.encode()] * len(
            expected)
        assert [r.value for r in driver.records("symfonic.stream-chunks")] == (
            oracle_projection(every_event(now), "chunks"))
        # Paused, answered with the ticket's own token, resumed: the oracle's verdict.
        assert verdicts == [(review.answer({"ticket_id": "intr-kit", "token": TOKEN}, now)[0],
                             TOKEN)]
        [resume] = driver.resumes()
        assert (resume.run_id, resume.tenant, resume.answer) == (
            RUN, review.tenant_of(RUN), {"answers": ["yes"]})
        # The restored validator remembers the answer: a second one is refused, as the
        # oracle refuses it.
        [ticket] = driver.tickets()
        again = driver.answer(ticket, {"answers": ["no"]})
        assert again.reason is not None
        assert again.reason.value == review.answer(
            {"ticket_id": "intr-kit", "token": TOKEN}, now)[0]
        # The run reader's view: every record, its seq dense, the last one the end.
        records = driver.run(RUN)
        assert [r.seq for r in records] == list(range(len(expected)))
        assert json.loads(expected[-1])["end"]["status"] == "completed"
