"""Dead-letter reasons and headers (contract §6)."""

from __future__ import annotations

import enum


class DeadLetterReason(enum.StrEnum):
    """Why a record went to the dead-letter topic (header ``symfonic-dlq-reason``)."""

    INVALID_JSON = "invalid_json"
    INVALID_EVENT = "invalid_event"
    KEY_MISMATCH = "key_mismatch"
    RUN_CLOSED = "run_closed"
    #: An event under a run id another tenant owns (contract §9).
    FOREIGN_TENANT = "foreign_tenant"
    TOO_LARGE = "too_large"
    UNROUTABLE = "unroutable"


HEADER_REASON = "symfonic-dlq-reason"
HEADER_DETAIL = "symfonic-dlq-detail"
HEADER_SOURCE = "symfonic-dlq-source"
HEADER_CONSUMER = "symfonic-dlq-consumer"
#: The detail header is cut to this many bytes of UTF-8.
DETAIL_MAX_BYTES = 1024
