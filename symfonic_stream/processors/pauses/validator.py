"""The resume validator: every human answer checked once, the first good one wins (contract §7).

It reads ``<prefix>.pause-registrations``, keyed by ticket id, which only the pause router
(each ticket's registration, header ``symfonic-record-type: ticket``) and the validator's
own intake (each answer from resume-requests, header ``answer``:
:mod:`symfonic_stream.processors.pauses.intake`) may write. So a ticket is registered
before any answer to it, on the same partition, and no reviewer can forge or pre-empt one.
Its state, the ticket registry (:mod:`.registry`), maps each tenant's ticket → what
checking an answer needs and whether it was answered; it lives in the
``<prefix>-resumes-state-changelog`` topic, co-partitioned with the registrations, so
"first answer wins" holds across restarts and rebalances.

A ticket is its tenant's: another tenant's ticket with the same interrupt id is registered
and answered on its own. A ticket is remembered, answered or not, until its expiry plus
the grace: while it is, a second registration of its tenant and id is a duplicate (an
answered ticket cannot be answered again), and its expiry is capped at
``SYMFONIC_TICKET_MAX_LIFETIME_S`` after it was registered, so nothing is remembered for
ever.

Checks, in contract §7's order: the ticket exists (``unknown_ticket``; the request's
``tenant``, when it names one, narrows which), the token matches in constant time
(``bad_token``: checked before anything else is revealed about the ticket; also when it
matches tickets of several tenants and the request names none),
it has not expired (``expired``), it was not answered (``already_answered``), no other
responder holds its claim (``claimed``: :mod:`.review`), the answer
fits the ticket's ``payload.response_schema`` when it has one (``invalid_answer``; also
when the schema cannot be applied safely: :mod:`.answer_schema`). A request with a
readable ``ticket_id`` but missing or mistyped fields is refused ``invalid_answer``, and so
is one over ``SYMFONIC_MAX_ANSWER_BYTES``, unread (on its key, the ticket id the intake
read).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import (
    DEFAULT_LIMITS,
    DecodeError,
    DecodeLimits,
    describe_validation_error,
    parse_json,
)
from symfonic_stream.models.headers import (
    ANSWER_MARK,
    OUTCOME_HEADER,
    RECORD_TYPE_HEADER,
    TENANT_HEADER,
    TICKET_MARK,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import (
    DEFAULT_MAX_ANSWER_BYTES,
    MAX_REQUEST_ID,
    ClaimRequest,
    RejectionReason,
    ResumeRequest,
    Ticket,
)
from symfonic_stream.processors.pauses.answer_schema import answer_problem, schema_problem
from symfonic_stream.processors.pauses.desk import ReviewDesk
from symfonic_stream.processors.pauses.registry import Registered, TicketRegistry
from symfonic_stream.processors.pauses.router import DEFAULT_TICKET_MAX_LIFETIME_S
from symfonic_stream.processors.pauses.rules import RoutingRules

#: How many of one responder's answers a ticket's schema is applied to and refuses before
#: it refuses that responder's others unchecked, and how many of all responders' (each
#: check is bounded: answer_schema.MAX_ANSWER_CPU_S). One responder can so lock only
#: itself out; locking the ticket for everyone takes five.
MAX_INVALID_ANSWERS = 20
MAX_INVALID_ANSWERS_PER_TICKET = 5 * MAX_INVALID_ANSWERS

#: The ``type`` of records in: the router's ticket registrations and the reviewers' answers.
REGISTRATION_INPUT = "registration"
REQUEST_INPUT = "request"


class ResumeValidator(TicketRegistry):
    """The validator's processor for one registrations partition."""

    def __init__(
        self, names: TopicNames, *, grace_s: float, decode: DecodeLimits = DEFAULT_LIMITS,
        max_lifetime_s: float = DEFAULT_TICKET_MAX_LIFETIME_S, punctuate_budget_s: float = 0.05,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES, desk: ReviewDesk | None = None,
    ) -> None:
        self._names = names
        self._max_answer_bytes = max_answer_bytes
        self._max_lifetime_s = max_lifetime_s
        self._decode = decode
        self._desk = desk or ReviewDesk(names, RoutingRules())
        super().__init__(grace_s, punctuate_budget_s, self._desk.rules.queues())

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        try:
            record_type = _record_type(record)
            if record_type == ANSWER_MARK and self._too_large(record, now, out):
                out.count_input(REQUEST_INPUT)
                return
            parsed = parse_json(record.value, self._decode)
            if record_type == TICKET_MARK:
                self._register(parsed, record, now, out)
                out.count_input(REGISTRATION_INPUT)
            elif record_type == ANSWER_MARK:
                self._answer(parsed, record, now, out)
                out.count_input(REQUEST_INPUT)
            else:
                raise DecodeError(DeadLetterReason.INVALID_EVENT,
                                  "a record on the registrations topic is a ticket or an answer")
        except DecodeError as rejected:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(record, rejected.reason, rejected.detail)

    def _too_large(self, record: InputRecord, now: float, out: Collector) -> bool:
        """Refuses, unread, a request over the answer limit (``invalid_answer`` on the
        ticket its key names: the intake keyed it by the ticket id it read)."""
        size = len(record.value or b"")
        if size <= self._max_answer_bytes or not record.key:
            return False  # (a keyless one: parse_json's record limit and a dead letter)
        self._refuse(Refused(record.key.decode("utf-8", "replace")),
                     RejectionReason.INVALID_ANSWER,
                     f"the request is {size} bytes, over the {self._max_answer_bytes} an "
                     "answer may take (SYMFONIC_MAX_ANSWER_BYTES): not read", now, out)
        return True

    def _register(self, parsed: Any, record: InputRecord, now: float, out: Collector) -> None:
        try:
            ticket = Ticket.model_validate(parsed)
        except ValidationError as exc:
            raise DecodeError(
                DeadLetterReason.INVALID_EVENT, "ticket: " + describe_validation_error(exc)
            ) from None
        _check_key(record, ticket.ticket_id)
        key = self.key_for(ticket.ticket_id, ticket.tenant, ticket.run_id)
        if key is None:
            out.count("duplicates")
            return
        schema = ticket.payload.get("response_schema")
        registered = Registered(
            ticket.token,
            ticket.run_id,
            ticket.tool_call_id,
            ticket.expires_at,
            schema if isinstance(schema, dict) else None,
            now,
            tenant=ticket.tenant,
            trace=out.trace,
        )
        # (The router caps it too; a registry that must forget does not rely on that.)
        registered.expires_at = min(registered.expires_at, now + self._max_lifetime_s)
        if registered.response_schema is not None:
            registered.schema_refused = schema_problem(registered.response_schema)
            if registered.schema_refused is not None:
                registered.response_schema = None
        self.add(ticket.ticket_id, key, registered)
        self._desk.registered(key, registered, ticket.model_dump(), out)
        self.tickets.schedule(key, self.deadline_of(registered))  # (now with its review's)
        self.open.track(key, registered)

    def on_timer(self, key: str, ticket: Registered, now: float, out: Collector) -> None:
        with out.carrying(ticket.trace):  # (a punctuation: the ticket's context, the run's)
            self._desk.timer(key, ticket, now, out)

    def on_forget(self, key: str, ticket: Registered, out: Collector) -> None:
        with out.carrying(ticket.trace):
            self._desk.forget(key, ticket, out)

    def _answer(self, parsed: Any, record: InputRecord, now: float, out: Collector) -> None:
        if not isinstance(parsed, dict):
            raise DecodeError(DeadLetterReason.INVALID_EVENT, "a resume request is a JSON object")
        ticket_id = parsed.get("ticket_id")
        if isinstance(ticket_id, str):
            _check_key(record, ticket_id)  # (the intake keyed it so: paranoid)
        if "action" in parsed:
            self._claim(parsed, now, out)
            return
        try:
            request = ResumeRequest.model_validate(parsed)
        except ValidationError as exc:
            if not (isinstance(ticket_id, str) and ticket_id):
                raise DecodeError(
                    DeadLetterReason.INVALID_EVENT, describe_validation_error(exc)
                ) from None
            # The reviewer can be told: its answer is refused, on the ticket's key.
            self._refuse(Refused.of_malformed(ticket_id, parsed), RejectionReason.INVALID_ANSWER,
                         "the request is malformed: " + describe_validation_error(exc), now, out)
            return
        named = self.named(request.ticket_id, request.token, request.tenant,
                           "tenant" in request.model_fields_set)
        key, ticket = named.key, named.ticket
        if named.ambiguous:
            self._refuse(Refused.of(request), RejectionReason.BAD_TOKEN, "the token matches "
                         "tickets of several tenants with this id: the request must name its "
                         "tenant", now, out)
            return
        refusal = _refusal(request, ticket, now)
        if refusal is None:
            assert key is not None and ticket is not None
            with out.carrying(out.trace or ticket.trace):
                self._accept(request, key, ticket, now, out)
            return
        reason, detail = refusal
        if reason in _UNTOLD or key is None or ticket is None:
            self._refuse(Refused.of(request), reason, detail, now, out)
            return
        with out.carrying(out.trace or ticket.trace):  # (its token matched)
            self._refuse_told(request, reason, detail, key, ticket, now, out)

    def _refuse_told(self, request: ResumeRequest, reason: RejectionReason, detail: str,
                     key: str, ticket: Registered, now: float, out: Collector) -> None:
        """Refuse an answer whose token matched its ticket: on the ticket's history too."""
        if reason is RejectionReason.INVALID_ANSWER:
            ticket.count_invalid(request.responder, MAX_INVALID_ANSWERS,
                                 MAX_INVALID_ANSWERS_PER_TICKET)
        if ticket.review is not None:
            ticket.review.refuse(request.responder, reason.value, detail, now,
                                 request.request_id)
            self._desk.publish(key, ticket.review, out)
        self._refuse(Refused.of(request, ticket.tenant), reason, detail, now, out)

    def _accept(self, request: ResumeRequest, key: str, ticket: Registered, now: float,
                out: Collector) -> None:
        """The first good answer: remembered as answered, a resume for the kernel."""
        ticket.answered_at = now
        if ticket.review is not None:
            ticket.review.answer(request.responder, request.answer, now, request.request_id)
            self._desk.publish(key, ticket.review, out)
        self.tickets.schedule(key, self.deadline_of(ticket))
        self.open.track(key, ticket)
        resume = {
            "ticket_id": request.ticket_id,
            "run_id": ticket.run_id,
            "tool_call_id": ticket.tool_call_id,
            "interrupt_id": request.ticket_id,
            "answer": request.answer,
            "responder": request.responder,
            "answered_at": now,
            "tenant": ticket.tenant,
            "request_id": request.request_id,
        }
        out.emit(OutputRecord(self._names.resumes, ticket.run_id.encode(), orjson.dumps(resume),
                              "resume", None, _verdict_headers("accepted", ticket.tenant)))
        out.resumes["accepted"] += 1
        out.note_span("answer verdict", **{"symfonic.outcome": "accepted",
                                           "symfonic.ticket_id": request.ticket_id,
                                           "symfonic.run_id": ticket.run_id})

    def _claim(self, parsed: dict[str, Any], now: float, out: Collector) -> None:
        """A claim or a release (docs/pauses.md, "Claims"): its ticket and token checked as
        an answer's are; refused, like an answer, on resume-rejections; else decided on the
        ticket's review, in the order the requests came."""
        try:
            request = ClaimRequest.model_validate(parsed)
        except ValidationError as exc:
            self._refuse(Refused.of_malformed(str(parsed.get("ticket_id")), parsed),
                         RejectionReason.INVALID_ANSWER,
                         "the claim is malformed: " + describe_validation_error(exc), now, out,
                         "ticket claimed")
            return
        named = self.named(request.ticket_id, request.token, request.tenant,
                           "tenant" in request.model_fields_set)
        key, ticket = named.key, named.ticket
        why: tuple[RejectionReason, str] | None = None
        if named.ambiguous or key is None or ticket is None:
            why = (RejectionReason.UNKNOWN_TICKET, "no such ticket")
        elif not hmac.compare_digest(request.token.encode(), ticket.token.encode()):
            why = (RejectionReason.BAD_TOKEN, "token does not match")
        elif ticket.expires_at <= now:
            why = (RejectionReason.EXPIRED, f"expired at {ticket.expires_at}")
        if why is not None:
            told = ticket.tenant if ticket is not None and why[0] not in _UNTOLD else None
            self._refuse(Refused.of(request, told), *why, now, out, "ticket claimed")
            return
        assert key is not None and ticket is not None
        with out.carrying(out.trace or ticket.trace):
            self._desk.claim(request, key, ticket, now, out)
        self.tickets.schedule(key, self.deadline_of(ticket))

    def _refuse(self, refused: Refused, reason: RejectionReason, detail: str, now: float,
                out: Collector, span: str = "answer verdict") -> None:
        """A rejection; its span (when tracing is on) is the refused request's: an answer's
        verdict, or a claim's."""
        rejection = {
            "ticket_id": refused.ticket_id,
            "reason": reason.value,
            "detail": detail[:1024],
            "responder": refused.responder,
            "rejected_at": now,
            "tenant": refused.tenant,
            "request_id": refused.request_id,
        }
        out.emit(
            OutputRecord(
                self._names.resume_rejections,
                refused.ticket_id.encode(),
                orjson.dumps(rejection),
                "rejection",
                None,
                _verdict_headers(reason.value, refused.tenant),
            )
        )
        out.resumes[reason.value] += 1
        out.note_span(span, **{"symfonic.outcome": reason.value,
                               "symfonic.ticket_id": refused.ticket_id})


@dataclass(frozen=True, slots=True)
class Refused:
    """What a rejection says of the request it refuses: its ticket id, responder and
    request id as the request gave them, and the ticket's tenant when the request showed
    it may know the ticket (its token matched: contract §9), else None."""

    ticket_id: str
    responder: str | None = None
    request_id: str | None = None
    tenant: str | None = None

    @classmethod
    def of(cls, request: ResumeRequest | ClaimRequest, tenant: str | None = None) -> Refused:
        return cls(request.ticket_id, request.responder, request.request_id, tenant)

    @classmethod
    def of_malformed(cls, ticket_id: str, parsed: dict[str, Any]) -> Refused:
        responder, request_id = parsed.get("responder"), parsed.get("request_id")
        return cls(ticket_id, responder if isinstance(responder, str) else None,
                   request_id[:MAX_REQUEST_ID] if isinstance(request_id, str) else None)


def _verdict_headers(outcome: str, tenant: str | None) -> tuple[tuple[str, bytes], ...]:
    """A verdict's headers: its outcome, and its run's tenant (contract §9)."""
    if tenant is None:
        return ((OUTCOME_HEADER, outcome.encode()),)
    return ((OUTCOME_HEADER, outcome.encode()), (TENANT_HEADER, tenant.encode()))


def _refusal(
    request: ResumeRequest, ticket: Registered | None, now: float
) -> tuple[RejectionReason, str] | None:
    """Why ``request`` is refused, in contract §7's order: the ticket exists, the token matches
    (in constant time, before anything else about the ticket is revealed), it has not
    expired, it was not answered, (ours) no other responder holds its claim, the answer
    fits its schema. None: accepted."""
    if ticket is None:
        return RejectionReason.UNKNOWN_TICKET, "no such ticket"
    if not hmac.compare_digest(request.token.encode(), ticket.token.encode()):
        return RejectionReason.BAD_TOKEN, "token does not match"
    if ticket.expires_at <= now:
        return RejectionReason.EXPIRED, f"expired at {ticket.expires_at}"
    if ticket.answered_at:
        return RejectionReason.ALREADY_ANSWERED, f"answered at {ticket.answered_at}"
    review = ticket.review
    holder = review.holder(now) if review is not None else None
    if review is not None and holder not in (None, request.responder):
        return RejectionReason.CLAIMED, f"claimed by {holder} until {review.claim_until}"
    if ticket.schema_refused is not None:
        return RejectionReason.INVALID_ANSWER, ticket.schema_refused
    if ticket.invalid_answers >= MAX_INVALID_ANSWERS_PER_TICKET:
        return RejectionReason.INVALID_ANSWER, (
            f"{MAX_INVALID_ANSWERS_PER_TICKET} answers to this ticket did not fit its "
            "response_schema: no more are checked")
    if ticket.invalid_of(request.responder) >= MAX_INVALID_ANSWERS:
        return RejectionReason.INVALID_ANSWER, (
            f"{MAX_INVALID_ANSWERS} of this responder's answers to this ticket did not fit its "
            "response_schema: no more of its are checked")
    problem = answer_problem(request.answer, ticket.response_schema)
    if problem is not None:
        return RejectionReason.INVALID_ANSWER, problem
    return None


#: Refusals not written on the ticket's history: the request did not show it may see it.
_UNTOLD = frozenset({RejectionReason.UNKNOWN_TICKET, RejectionReason.BAD_TOKEN})


def _record_type(record: InputRecord) -> bytes | None:
    for name, value in record.headers:
        if name == RECORD_TYPE_HEADER:
            return value
    return None


def _check_key(record: InputRecord, ticket_id: str) -> None:
    # A request on another key would land on another partition than its ticket.
    if record.key != ticket_id.encode():
        shown = record.key.decode("utf-8", "replace") if record.key is not None else "<no key>"
        raise DecodeError(
            DeadLetterReason.KEY_MISMATCH,
            f"record key {shown!r} differs from ticket_id {ticket_id!r}",
        )
