"""The SDKs, for code beside the consumers: the kernel's publisher and its resume reader, a
run's reader, a review tool's reviewer (docs/tools.md, docs/pauses.md).

Each is an async context manager that starts its Kafka clients on entry and closes every one
of them on exit, also when entering fails. Each takes ``settings`` last and reads the
``SYMFONIC_*`` environment when given none. The exceptions a caller handles:

- :class:`ConfigError`: a ``SYMFONIC_*`` setting is invalid (made without ``settings``);
- :class:`KafkaUnavailable`: Kafka could not be reached when entering;
- :class:`InvalidEventError` (nothing sent) and :class:`PublishError` (not acknowledged,
  or the raw topic missing): the publisher;
- :class:`RunReadError` and its kinds :class:`TopicMissingError`, :class:`SequenceError`,
  :class:`ReaderTimeout`: the reader;
- :class:`OutcomesUnavailable`, and ``TimeoutError`` when no verdict came in time: the
  reviewer;
- ``ValueError``: a trace context given to the publisher or the reviewer that is not W3C
  (:class:`TraceContext`; docs/metrics.md, "Tracing").
"""

from symfonic_stream.config import ConfigError
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.models.envelope import ChunkEventRecord, EndRecord, GapRecord, TypedEventRecord
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.models.trace import TraceContext
from symfonic_stream.sdk.publisher import (
    EventPublisher,
    InvalidEventError,
    PublishError,
    encode_event,
)
from symfonic_stream.sdk.reader import (
    ReaderTimeout,
    RunReader,
    RunReadError,
    RunRecord,
    SequenceError,
    TopicMissingError,
    parse_run_record,
    parse_time,
)
from symfonic_stream.sdk.resumes import ResumeReader, Unowned, resume_for
from symfonic_stream.sdk.reviewer import OutcomesUnavailable, Reviewer, TicketOutcome

__all__ = [
    "ChunkEventRecord",
    "ConfigError",
    "EndRecord",
    "EventPublisher",
    "GapRecord",
    "InvalidEventError",
    "KafkaUnavailable",
    "OutcomesUnavailable",
    "PublishError",
    "ReaderTimeout",
    "ResumeReader",
    "Reviewer",
    "RunReadError",
    "RunReader",
    "RunRecord",
    "SequenceError",
    "Ticket",
    "TicketOutcome",
    "TopicMissingError",
    "TraceContext",
    "TypedEventRecord",
    "Unowned",
    "encode_event",
    "parse_run_record",
    "parse_time",
    "resume_for",
]
