"""The resume validator's intake: each answer on resume-requests, appended to the
registrations topic under its ticket's id (contract §7).

Reviewers may write ``<prefix>.resume-requests``, so nothing there can be trusted to be a
ticket registration, and an answer can come with any key. The intake takes every record
there as an answer: one whose ``ticket_id`` it can read is written, unchanged, to
``<prefix>.pause-registrations`` keyed by that id and marked ``symfonic-record-type:
answer`` (its own headers are dropped: a client's headers are not ours to pass on; only its
trace context, checked, is carried, as on every output: docs/metrics.md, "Tracing").
Only the router and the intake may write that topic, so the validator, reading it, meets
each ticket's registration before any answer to it, on one partition, in one order, with
no join of two topics: the answer was written after its reviewer saw the ticket, which the
router committed with the registration.

Like a Kafka Streams repartition step, stateless and transactional: the copy and the
input's offset commit together. A record without a readable ticket id is dead-lettered
``invalid_event`` here; anything else about an answer is the validator's to refuse.
"""

from __future__ import annotations

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord, Stateless
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import (
    DEFAULT_LIMITS,
    DecodeError,
    DecodeLimits,
    parse_json,
)
from symfonic_stream.models.headers import ANSWER_MARK, RECORD_TYPE_HEADER
from symfonic_stream.models.pauses import MAX_TICKET_ID

#: The ``type`` of records in and out (the records metrics' label).
ANSWER_INPUT = "request"
ANSWER_OUTPUT = "answer"


def ticket_id_of(value: bytes | None, limits: DecodeLimits) -> str:
    """The ``ticket_id`` an answer names, or ``DecodeError`` saying why there is none."""
    parsed = parse_json(value, limits)
    if not isinstance(parsed, dict):
        raise DecodeError(DeadLetterReason.INVALID_EVENT, "a resume request is a JSON object")
    ticket_id = parsed.get("ticket_id")
    if not isinstance(ticket_id, str) or not 0 < len(ticket_id) <= MAX_TICKET_ID:
        raise DecodeError(
            DeadLetterReason.INVALID_EVENT,
            f"a resume request needs a ticket_id: a string of 1 to {MAX_TICKET_ID} characters",
        )
    return ticket_id


class ResumeIntake(Stateless):
    """The intake's processor for one resume-requests partition: stateless."""

    def __init__(self, registrations_topic: str, decode: DecodeLimits = DEFAULT_LIMITS) -> None:
        self._topic = registrations_topic
        self._decode = decode

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        try:
            ticket_id = ticket_id_of(record.value, self._decode)
        except DecodeError as rejected:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(record, rejected.reason, rejected.detail)
            return
        out.count_input(ANSWER_INPUT)
        out.emit(OutputRecord(self._topic, ticket_id.encode(), record.value, ANSWER_OUTPUT,
                              None, ((RECORD_TYPE_HEADER, ANSWER_MARK),)))
