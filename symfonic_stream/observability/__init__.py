"""Observability: Prometheus metrics, health probes and JSON logs (contract §8).

A library the engine calls; it knows nothing of Kafka. One process builds one
:class:`ConsumerMetrics` per consumer it runs, one :class:`HealthState`, starts the HTTP
server with :func:`start_configured_health_server` and calls :func:`configure_logging` once.
"""

from symfonic_stream.observability.families import (
    COUNT_KEYS,
    DEAD_LETTER_REASONS,
    LATENCY_BUCKETS,
    RESUME_OUTCOMES,
)
from symfonic_stream.observability.health import (
    HealthState,
    server_port,
    start_configured_health_server,
    start_health_server,
)
from symfonic_stream.observability.logs import (
    JsonFormatter,
    configure_logging,
    redact,
    redact_text,
)
from symfonic_stream.observability.metrics import ConsumerMetrics

__all__ = [
    "COUNT_KEYS",
    "DEAD_LETTER_REASONS",
    "LATENCY_BUCKETS",
    "RESUME_OUTCOMES",
    "ConsumerMetrics",
    "HealthState",
    "JsonFormatter",
    "configure_logging",
    "redact",
    "redact_text",
    "server_port",
    "start_configured_health_server",
    "start_health_server",
]
