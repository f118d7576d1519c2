"""Kafka header names the consumers put on their outputs (dead-letter ones: dead_letter.py)."""

from __future__ import annotations

#: On ``pause-registrations``: ``ticket`` marks the pause router's registration of a
#: ticket, ``answer`` an answer the validator's intake appended (no one else may write it).
RECORD_TYPE_HEADER = "symfonic-record-type"
TICKET_MARK = b"ticket"
ANSWER_MARK = b"answer"
#: On tickets: the queue (``<queue>`` or ``<tenant>.<queue>``, or ``expired``) and the kind.
QUEUE_HEADER = "symfonic-queue"
KIND_HEADER = "symfonic-kind"
#: On resumes and rejections: ``accepted`` or the rejection reason.
OUTCOME_HEADER = "symfonic-outcome"
#: On stream-events and stream-chunks records projected from an event with a
#: ``scope.tenant``: that tenant (UTF-8), which the gateway checks a viewer's token against.
TENANT_HEADER = "symfonic-tenant"
#: W3C Trace Context (https://www.w3.org/TR/trace-context/): a raw record's checked trace
#: context, carried onto every record projected from it (:mod:`.trace`; docs/metrics.md,
#: "Tracing"). The names are the W3C header names, as OpenTelemetry's Kafka
#: instrumentations write them.
TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
