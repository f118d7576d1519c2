"""The resume validator: every human answer checked once, the first good one wins (SPEC §7).

It reads ``<prefix>.resume-requests``, keyed by ticket id, where the pause router also
registers each ticket (header ``symfonic-record-type: ticket``) before any human can see
it. Its state store, the ticket registry, maps ticket id → what checking an answer needs
and whether it was answered; it lives in the ``<prefix>-resumes-state-changelog`` topic,
co-partitioned with the requests, so a ticket and all its answers meet in one instance
and "first answer wins" holds across restarts and rebalances.

An answer keyed otherwise (no key, the run id) would be checked on the wrong partition, so
it is first written back to resume-requests keyed by its ticket id, in the same
transaction (a repartition step, header ``symfonic-rekeyed-from``), and checked when that
copy arrives.

Checks, in SPEC §7's order: the ticket exists (``unknown_ticket``), the token matches in
constant time (``bad_token``: checked before anything else is revealed about the ticket),
it has not expired (``expired``), it was not answered (``already_answered``), the answer
fits the ticket's ``payload.response_schema`` when it has one (``invalid_answer``; also
when the schema cannot be applied). A request with a readable ``ticket_id`` but missing or
mistyped fields is refused ``invalid_answer`` on that ticket's key; one without is
dead-lettered ``invalid_event``.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import jsonschema
import orjson
from pydantic import ValidationError

from symfonic_stream.engine.records import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.store import Codec, StateStore
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import (
    DEFAULT_LIMITS,
    DecodeError,
    DecodeLimits,
    check_size,
    describe_validation_error,
    parse_json,
)
from symfonic_stream.models.headers import (
    OUTCOME_HEADER,
    RECORD_TYPE_HEADER,
    REKEYED_FROM_HEADER,
    TICKET_MARK,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import RejectionReason, ResumeRequest, Ticket
from symfonic_stream.processors.expiring import ExpiringState, pause_kept_until


@dataclass(slots=True)
class Registered:
    """One ticket as the registry keeps it."""

    token: str
    run_id: str
    tool_call_id: str | None
    expires_at: float
    response_schema: dict[str, Any] | None
    #: When this registry got it (its own clock: a ticket's ``routed_at`` is the router's).
    registered_at: float
    answered_at: float = 0.0

    def encode(self) -> bytes:
        return orjson.dumps(
            [
                self.token,
                self.run_id,
                self.tool_call_id,
                self.expires_at,
                self.response_schema,
                self.registered_at,
                self.answered_at,
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> Registered:
        return cls(*orjson.loads(data))

    def forget_after(self, grace_s: float, idle_timeout_s: float = 0.0) -> float:
        """When the registry may drop it: answered, expired (at most
        ``PAUSE_KEPT_IDLE_TIMEOUTS`` idle timeouts after it was registered) or registered,
        plus the grace."""
        expires = pause_kept_until(self.expires_at, self.registered_at, idle_timeout_s)
        return max(expires, self.answered_at, self.registered_at) + grace_s


#: How a ticket travels in the changelog.
TICKET_CODEC: Codec[Registered] = Codec(Registered.encode, Registered.decode)


def answer_problem(answer: Any, schema: dict[str, Any] | None) -> str | None:
    """Why ``answer`` does not fit ``schema`` (None when it fits or there is no schema)."""
    if schema is None:
        return None
    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"the ticket's response_schema is not a valid JSON Schema: {exc.message}"
    try:
        error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(answer))
    except Exception as exc:
        # A well-formed schema can still fail while validating: a $ref that resolves
        # nowhere (or remotely), runaway recursion. The answer cannot be accepted, and the
        # error must not escape: it would fail the batch again at every retry.
        return f"the ticket's response_schema cannot be applied: {type(exc).__name__}: {exc}"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "answer"
    return f"{where}: {error.message}"


#: The ``type`` of records in: the router's ticket registrations and the reviewers' answers.
REGISTRATION_INPUT = "registration"
REQUEST_INPUT = "request"


class ResumeValidator(ExpiringState[Registered]):
    """The validator's processor for one resume-requests partition."""

    def __init__(
        self, names: TopicNames, *, grace_s: float, decode: DecodeLimits = DEFAULT_LIMITS,
        idle_timeout_s: float = 3600.0, punctuate_budget_s: float = 0.05,
    ) -> None:
        self._names = names
        self._grace_s = grace_s
        self._idle_timeout_s = idle_timeout_s
        self._decode = decode
        super().__init__(StateStore("ticket", TICKET_CODEC), punctuate_budget_s)
        self.tickets = self.state

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        try:
            check_size(record.value, self._decode.max_bytes)
            parsed = parse_json(record.value, self._decode)
            if (RECORD_TYPE_HEADER, TICKET_MARK) in record.headers:
                self._register(parsed, record, now, out)
                out.count_input(REGISTRATION_INPUT)
            else:
                self._answer(parsed, record, now, out)
                out.count_input(REQUEST_INPUT)
        except DecodeError as rejected:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(record, rejected.reason, rejected.detail)

    def _register(self, parsed: Any, record: InputRecord, now: float, out: Collector) -> None:
        try:
            ticket = Ticket.model_validate(parsed)
        except ValidationError as exc:
            raise DecodeError(
                DeadLetterReason.INVALID_EVENT, "ticket: " + describe_validation_error(exc)
            ) from None
        _check_key(record, ticket.ticket_id)
        if ticket.ticket_id in self.tickets:
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
        )
        self.tickets.put(ticket.ticket_id, registered)
        self.tickets.schedule(ticket.ticket_id, self.deadline_of(registered))

    def _answer(self, parsed: Any, record: InputRecord, now: float, out: Collector) -> None:
        if not isinstance(parsed, dict):
            raise DecodeError(DeadLetterReason.INVALID_EVENT, "a resume request is a JSON object")
        ticket_id = parsed.get("ticket_id")
        if isinstance(ticket_id, str) and ticket_id and record.key != ticket_id.encode():
            self._rekey(record, ticket_id, out)
            return
        try:
            request = ResumeRequest.model_validate(parsed)
        except ValidationError as exc:
            if not (isinstance(ticket_id, str) and ticket_id):
                raise DecodeError(
                    DeadLetterReason.INVALID_EVENT, describe_validation_error(exc)
                ) from None
            # The reviewer can be told: its answer is refused, on the ticket's key.
            responder = parsed.get("responder")
            self._refuse(
                ticket_id,
                responder if isinstance(responder, str) else None,
                RejectionReason.INVALID_ANSWER,
                "the request is malformed: " + describe_validation_error(exc),
                now,
                out,
            )
            return
        ticket = self.tickets.get(request.ticket_id)
        refusal = _refusal(request, ticket, now)
        if refusal is not None:
            self._reject(request, *refusal, now, out)
        else:
            assert ticket is not None
            self._accept(request, ticket, now, out)

    def _accept(self, request: ResumeRequest, ticket: Registered, now: float,
                out: Collector) -> None:
        """The first good answer: remembered as answered, a resume for the kernel."""
        ticket.answered_at = now
        self.tickets.touch(request.ticket_id)
        self.tickets.schedule(request.ticket_id, self.deadline_of(ticket))
        resume = {
            "ticket_id": request.ticket_id,
            "run_id": ticket.run_id,
            "tool_call_id": ticket.tool_call_id,
            "interrupt_id": request.ticket_id,
            "answer": request.answer,
            "responder": request.responder,
            "answered_at": now,
        }
        out.emit(OutputRecord(self._names.resumes, ticket.run_id.encode(), orjson.dumps(resume),
                              "resume", None, ((OUTCOME_HEADER, b"accepted"),)))
        out.resumes["accepted"] += 1

    def _rekey(self, record: InputRecord, ticket_id: str, out: Collector) -> None:
        """Send an answer keyed otherwise back to resume-requests on its ticket's key.

        Only the instance owning the ticket id's partition knows the ticket (the router's
        registration is keyed by it). Like a Kafka Streams repartition: the copy is written
        in this record's transaction, and validated when it arrives on that partition.
        """
        was = b"" if record.key is None else record.key
        out.emit(
            OutputRecord(
                self._names.resume_requests,
                ticket_id.encode(),
                record.value,
                "rekeyed_request",
                None,
                (*record.headers, (REKEYED_FROM_HEADER, was)),
            )
        )

    def _reject(
        self,
        request: ResumeRequest,
        reason: RejectionReason,
        detail: str,
        now: float,
        out: Collector,
    ) -> None:
        self._refuse(request.ticket_id, request.responder, reason, detail, now, out)

    def _refuse(
        self,
        ticket_id: str,
        responder: str | None,
        reason: RejectionReason,
        detail: str,
        now: float,
        out: Collector,
    ) -> None:
        rejection = {
            "ticket_id": ticket_id,
            "reason": reason.value,
            "detail": detail[:1024],
            "responder": responder,
            "rejected_at": now,
        }
        out.emit(
            OutputRecord(
                self._names.resume_rejections,
                ticket_id.encode(),
                orjson.dumps(rejection),
                "rejection",
                None,
                ((OUTCOME_HEADER, reason.value.encode()),),
            )
        )
        out.resumes[reason.value] += 1

    def deadline_of(self, ticket: Registered) -> float:
        """Answered, expired (and routed) longer than the grace period ago."""
        return ticket.forget_after(self._grace_s, self._idle_timeout_s)


def _refusal(
    request: ResumeRequest, ticket: Registered | None, now: float
) -> tuple[RejectionReason, str] | None:
    """Why ``request`` is refused, in SPEC §7's order: the ticket exists, the token matches
    (in constant time, before anything else about the ticket is revealed), it has not
    expired, it was not answered, the answer fits its schema. None: accepted."""
    if ticket is None:
        return RejectionReason.UNKNOWN_TICKET, "no such ticket"
    if not hmac.compare_digest(request.token.encode(), ticket.token.encode()):
        return RejectionReason.BAD_TOKEN, "token does not match"
    if ticket.expires_at <= now:
        return RejectionReason.EXPIRED, f"expired at {ticket.expires_at}"
    if ticket.answered_at:
        return RejectionReason.ALREADY_ANSWERED, f"answered at {ticket.answered_at}"
    problem = answer_problem(request.answer, ticket.response_schema)
    if problem is not None:
        return RejectionReason.INVALID_ANSWER, problem
    return None


def _check_key(record: InputRecord, ticket_id: str) -> None:
    # A request on another key would land on another partition than its ticket.
    if record.key != ticket_id.encode():
        shown = record.key.decode("utf-8", "replace") if record.key is not None else "<no key>"
        raise DecodeError(
            DeadLetterReason.KEY_MISMATCH,
            f"record key {shown!r} differs from ticket_id {ticket_id!r}",
        )
