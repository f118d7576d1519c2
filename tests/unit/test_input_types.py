"""What each processor says it read: the ``type`` label of records in."""

from __future__ import annotations

import orjson

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.copier import Copier
from symfonic_stream.processors.pauses.intake import ResumeIntake
from symfonic_stream.processors.pauses.validator import ResumeValidator
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor
from symfonic_stream.projections.declared import projection

NAMES = TopicNames("symfonic")


def _record(key: bytes | None, value: bytes, offset: int = 0) -> InputRecord:
    return InputRecord(NAMES.agent_events, 0, offset, key, value)


def _event(kind: str, index: int) -> bytes:
    return orjson.dumps({"run_id": "r", "index": index, "kind": kind, "timestamp": 1.0})


def test_the_projector_counts_each_kind_unknown_ones_as_unknown_and_bad_ones_as_invalid() -> None:
    processor = ProjectorProcessor(projection("typed").project, NAMES.stream_events, GuardLimits())
    out = Collector()
    values = [_event("text_delta", 0), _event("telemetry", 1), b"{no", _event("text_delta", 2)]
    for offset, value in enumerate(values):
        processor.process(_record(b"r", value, offset), 0.0, out)
    processor.process(_record(b"other", _event("done", 3)), 0.0, out)  # key_mismatch
    assert out.inputs == {"text_delta": 2, "unknown": 1, "invalid": 2}


def test_the_validator_counts_answers_and_unreadable_requests() -> None:
    validator = ResumeValidator(NAMES, grace_s=60.0)
    out = Collector()
    answer = orjson.dumps({"ticket_id": "t", "token": "x", "answer": 1})
    marked = (("symfonic-record-type", b"answer"),)
    topic = NAMES.pause_registrations
    validator.process(InputRecord(topic, 0, 0, b"t", answer, marked), 0.0, out)
    validator.process(InputRecord(topic, 0, 1, b"t", b"[1]", marked), 0.0, out)
    validator.process(InputRecord(topic, 0, 2, b"t", answer), 0.0, out)  # unmarked
    assert out.inputs == {"request": 1, "invalid": 2}


def test_the_intake_counts_requests_and_unreadable_ones() -> None:
    intake = ResumeIntake(NAMES.pause_registrations)
    out = Collector()
    answer = orjson.dumps({"ticket_id": "t", "token": "x", "answer": 1})
    intake.process(InputRecord(NAMES.resume_requests, 0, 0, None, answer), 0.0, out)
    intake.process(InputRecord(NAMES.resume_requests, 0, 1, b"t", b"[1]"), 0.0, out)
    assert out.inputs == {"request": 1, "invalid": 1}


def test_the_copier_reads_everything_raw() -> None:
    out = Collector()
    Copier("copy").process(_record(None, b"anything"), 0.0, out)
    assert out.inputs == {"raw": 1}
