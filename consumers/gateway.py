"""The gateway: it reads both projections and every ticket's review state, every partition,
in no group, and sends the answers and claims of its reviewers (docs/gateway.md)."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Reader, Write
from symfonic_stream.consumers.topics import (
    CLAIM_REQUEST,
    RESUME_REQUEST,
    RESUME_REQUESTS,
    REVIEW_TICKETS,
    RUN_STREAMS,
)

GATEWAY = Reader(
    name="gateway",
    title="the SSE gateway",
    summary="runs served to browsers and AG-UI clients from `<prefix>.stream-events` and "
    "`<prefix>.stream-chunks`; pauses answered through its review console and AG-UI resume",
    reads=(*RUN_STREAMS, REVIEW_TICKETS),
    writes=(Write(RESUME_REQUESTS, "Answers and claims on a reviewer's behalf, with the "
                  "ticket's token it read on review-tickets, keyed by ticket id (idempotent, "
                  "not transactional).", (RESUME_REQUEST, CLAIM_REQUEST)),),
    # Its own settings (config.py's ``gateway_`` fields), besides the Kafka client's.
    settings=tuple(name for name in Settings.model_fields if name.startswith("gateway_")),
)
