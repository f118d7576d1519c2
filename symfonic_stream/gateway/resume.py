"""AG-UI resume through the gateway: ``POST /v1/runs/{run_id}/events`` with a
``RunAgentInput`` whose ``resume`` answers the run's pause (docs/gateway.md, "Answering a
pause"; AG-UI's interrupts: https://docs.ag-ui.com/concepts/interrupts).

The pause the resume answers is found in the run's own stream: the paused ``end`` whose
interrupts the entries name (the last one the run reached, or an earlier one for a replay).
Its every interrupt must be answered, each entry ``resolved``, each id one of them; each
interrupt's ticket must be this run's (its ``run_id``), and the token the run's own
principal (``sub`` is the ticket's ``principal``) or a reviewer of the ticket's queue
(:meth:`.auth.Grant.reviews`); anything else is a ``RUN_ERROR`` with a code and nothing is
written. Each answer then goes through the validator like every other (:mod:`.answers`):
the response's first events are ``RUN_STARTED`` and one ``CUSTOM`` ``verdict`` per
interrupt, then the run's continuation up to its next end; a refusal is a ``RUN_ERROR``
whose ``code`` is the validator's reason, and nothing else. An answer accepted already is
not sent again: the same answer (a replayed resume) is accepted as it was, another one is
``already_answered``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from ag_ui.core import RunAgentInput
from pydantic import ValidationError

from symfonic_stream.gateway.agui import AgUiRun, Event
from symfonic_stream.gateway.answers import ReviewSender, Verdict
from symfonic_stream.gateway.auth import Grant
from symfonic_stream.gateway.reviews import Reviewed, ReviewStore
from symfonic_stream.gateway.runs import Held, Run
from symfonic_stream.gateway.sse import BadRequest
from symfonic_stream.gateway.tail import TopicTail
from symfonic_stream.gateway.viewer import Viewing, agui_messages, records
from symfonic_stream.models.event_types import (
    CANCEL_UNSUPPORTED,
    DUPLICATE_INTERRUPT,
    NOT_PERMITTED,
    RESUME_INCOMPLETE,
    UNKNOWN_INTERRUPT,
    VERDICT,
    WRONG_THREAD,
)

#: The most bytes of a RunAgentInput read: a resume's answers are bounded by the validator
#: (SYMFONIC_MAX_ANSWER_BYTES each); the rest (messages, state) the gateway ignores.
MAX_INPUT_BYTES = 1024 * 1024


class ResumeError(Exception):
    """A resume refused: its AG-UI ``RUN_ERROR`` code, one of the registry's
    (``models.event_types.RESUME_ERROR_CODES``: the contract's, then the validator's)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True, slots=True)
class Pause:
    """A paused end of the run: its seq and its interrupts' ids."""

    seq: int
    interrupt_ids: tuple[str, ...]


def parse_input(body: bytes) -> RunAgentInput:
    """The request's RunAgentInput (ag-ui-protocol's model), or BadRequest."""
    if len(body) > MAX_INPUT_BYTES:
        raise BadRequest(f"a RunAgentInput is at most {MAX_INPUT_BYTES} bytes")
    try:
        return RunAgentInput.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"not a RunAgentInput: {where}: {first['msg']}") from None


async def pauses_of(tail: TopicTail, run: Run) -> list[Pause]:
    """The run's paused ends so far, in order (the run translated as a viewer's is)."""
    target = run.next_seq - 1
    translation, found = AgUiRun(run.run_id), []
    if target < 0:
        return []
    async with contextlib.aclosing(records(tail, run, -1, Viewing())) as batches:
        async for batch in batches:
            for item in batch:
                if not isinstance(item, Held):
                    continue
                for event in translation.translate(orjson.loads(item.data)):
                    outcome = event.get("outcome") or {}
                    if event["type"] == "RUN_FINISHED" and outcome.get("type") == "interrupt":
                        found.append(Pause(item.seq, tuple(i["id"] for i in
                                                           outcome["interrupts"])))
                if item.seq >= target:
                    return found
    return found


def answered_pause(pauses: list[Pause], given: RunAgentInput, run_id: str) -> Pause:
    """The pause ``given.resume`` answers, checked as AG-UI's contract says."""
    if given.thread_id != run_id:
        raise ResumeError(WRONG_THREAD.name, f"threadId must be the run id {run_id!r}")
    entries = given.resume or []
    ids = [entry.interrupt_id for entry in entries]
    if len(set(ids)) != len(ids):
        raise ResumeError(DUPLICATE_INTERRUPT.name, "an interrupt is answered twice")
    pause = next((p for p in reversed(pauses) if set(ids) & set(p.interrupt_ids)), None)
    unknown = sorted(set(ids) - set(pause.interrupt_ids if pause else ()))
    if pause is None or unknown:
        raise ResumeError(UNKNOWN_INTERRUPT.name,
                          f"no open interrupt {(unknown or ids)[0]!r} in this run")
    missing = sorted(set(pause.interrupt_ids) - set(ids))
    if missing:
        raise ResumeError(RESUME_INCOMPLETE.name,
                          f"a resume answers every open interrupt: {missing[0]!r} is missing")
    for entry in entries:
        if entry.status != "resolved":
            raise ResumeError(CANCEL_UNSUPPORTED.name, "a pause here is answered, not cancelled: "
                              "decline inside the payload (e.g. {\"approved\": false})")
    return pause


def run_error(code: str, message: str) -> bytes:
    return b"data: %s\n\n" % orjson.dumps({"type": "RUN_ERROR", "code": code,
                                           "message": message})


async def resumed(tail: TopicTail, run: Run, given: RunAgentInput, answerer: Grant,
                  reviews: ReviewStore, sender: ReviewSender, wait_s: float,
                  viewing: Viewing) -> AsyncIterator[bytes]:
    """The response to a resume: its verdicts, then the continuation (or a RUN_ERROR).
    ``answerer``: the token's grant, with ``reviews:answer`` and a subject."""
    try:
        pause = answered_pause(await pauses_of(tail, run), given, run.run_id)
        payloads = {e.interrupt_id: e.payload for e in given.resume or []}
        verdicts = await answer_all(run, pause, payloads, answerer, reviews, sender, wait_s)
    except ResumeError as refused:
        viewing.run_ended = True
        yield run_error(refused.code, refused.message)
        return
    started: list[Event] = [{"type": "RUN_STARTED", "threadId": run.run_id,
                             "runId": run.run_id}]
    started += [{"type": VERDICT.type, "name": VERDICT.name,
                 "value": {"interruptId": i, "outcome": v.outcome, "replayed": v.replayed}}
                for i, v in verdicts.items()]
    yield b"".join(b"data: %s\n\n" % orjson.dumps(e) for e in started)
    continuation = agui_messages(records(tail, run, -1, viewing), run.run_id, pause.seq,
                                 viewing, started=True, run=run)
    async with contextlib.aclosing(continuation):
        async for part in continuation:
            yield part


async def answer_all(run: Run, pause: Pause, payloads: dict[str, Any], answerer: Grant,
                     reviews: ReviewStore, sender: ReviewSender,
                     wait_s: float) -> dict[str, Verdict]:
    """Each of the pause's interrupts answered with its payload (at once, as the validator
    takes them apart anyway), once every ticket is known and the answerer's to answer; the
    first refusal as a ResumeError. AG-UI resumes and AI SDK chat requests both come here."""
    tenant, by = answerer.tenant, answerer.subject
    assert by is not None
    tickets = {}
    for interrupt_id in pause.interrupt_ids:
        def ticket(i: str = interrupt_id) -> Reviewed | None:
            return reviews.get(tenant, i)

        reviewed = await reviews.wait(tenant, ticket, wait_s)
        if reviewed is None or reviewed.ticket["run_id"] != run.run_id:
            # (not registered yet within the wait, forgotten, or another run's ticket)
            raise ResumeError(UNKNOWN_INTERRUPT.name, f"no ticket {interrupt_id!r} of this "
                              "run to answer")
        if not may_answer(answerer, reviewed):
            raise ResumeError(NOT_PERMITTED.name, f"{interrupt_id}: {NOT_PERMITTED.means}")
        tickets[interrupt_id] = reviewed
    answers = await asyncio.gather(*(sender.answer(tickets[i], payloads[i], by)
                                     for i in pause.interrupt_ids))
    verdicts = dict(zip(pause.interrupt_ids, answers, strict=True))
    for interrupt_id, verdict in verdicts.items():
        if not verdict.ok:
            raise ResumeError(verdict.outcome, f"{interrupt_id}: {verdict.detail}")
    return verdicts


def may_answer(answerer: Grant, reviewed: Reviewed) -> bool:
    """Whether ``answerer`` may answer the ticket: the run's own principal, or a reviewer
    of the ticket's queue (AG-UI's rule: a resume answers its own thread's interrupts)."""
    ticket = reviewed.ticket
    principal = ticket.get("principal")
    return ((principal is not None and answerer.subject == principal)
            or answerer.reviews(str(ticket["queue"])))
