"""Kafka header names the consumers put on their outputs (dead-letter ones: dead_letter.py)."""

from __future__ import annotations

#: On ``resume-requests``: ``ticket`` marks the pause router's registration of a ticket.
RECORD_TYPE_HEADER = "symfonic-record-type"
TICKET_MARK = b"ticket"
#: On ``resume-requests``: the key an answer came with, on the validator's re-keyed copy.
REKEYED_FROM_HEADER = "symfonic-rekeyed-from"
#: On tickets: the queue (``<queue>`` or ``<tenant>.<queue>``, or ``expired``) and the kind.
QUEUE_HEADER = "symfonic-queue"
KIND_HEADER = "symfonic-kind"
#: On resumes and rejections: ``accepted`` or the rejection reason.
OUTCOME_HEADER = "symfonic-outcome"
