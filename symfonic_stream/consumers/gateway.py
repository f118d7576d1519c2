"""The gateway: it reads both projections and every ticket's review state, every partition,
in no group, and sends the answers and claims of its reviewers (docs/gateway.md)."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Reader, Write
from symfonic_stream.models.topics import (
    CLAIM_REQUEST,
    RESUME_REQUEST,
    RESUME_REQUESTS,
    REVIEW_TICKETS,
)
from symfonic_stream.projections.declared import PROJECTIONS

GATEWAY = Reader(
    name="gateway",
    title="the SSE gateway",
    summary="runs served to browsers, AG-UI and AI SDK clients from "
    + " and ".join(f"`{p.topic.template.replace('{prefix}', '<prefix>')}`"
                   for p in PROJECTIONS.values())
    + "; pauses answered through its review console, AG-UI resume and chat requests",
    reads=(*(projection.topic for projection in PROJECTIONS.values()), REVIEW_TICKETS),
    metrics_port=9405,
    writes=(Write(RESUME_REQUESTS, "Answers and claims on a reviewer's behalf, with the "
                  "ticket's token it read on review-tickets, keyed by ticket id (idempotent, "
                  "not transactional).", (RESUME_REQUEST, CLAIM_REQUEST)),),
    # Its own settings (config.py's ``gateway_`` fields), besides the Kafka client's.
    settings=tuple(name for name in Settings.model_fields if name.startswith("gateway_")),
)
