"""The gateway's metrics (docs/metrics.md, "Gateway"): viewers, messages, delivery, the tails.

Labels are bounded: ``stream`` is ``events`` or ``chunks``, ``outcome`` one of the fixed
sets below. No run id is ever a label.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from symfonic_stream.observability.families import PREFIX
from symfonic_stream.observability.histogram import BatchHistogram
from symfonic_stream.projections.declared import PROJECTIONS

#: The gateway's streams: one per projection (``projections/declared.py``).
STREAMS: Final = tuple(projection.stream for projection in PROJECTIONS.values())
#: How a viewer's stream ended.
ENDINGS: Final = ("run_ended", "disconnected", "too_slow", "shutdown")
#: What became of a request before any stream began. ``forbidden``: the token lacks the
#: request's scope (whatever the run); a run the token may not read is ``not_found``.
REFUSALS: Final = ("bad_request", "unauthorized", "forbidden", "not_found", "too_many_clients",
                   "too_many_tenant_clients", "rate_limited", "body_too_large",
                   "body_timeout")
#: What the HTTP edge refused before any route (gateway/edge.py).
EDGE_REFUSALS: Final = ("too_many_connections", "headers_too_large", "request_timeout")
#: What the tail did with a record.
FILINGS: Final = ("filed", "repeated", "foreign", "skipped")
FIRST_EVENT_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                              2.5, 5, 10, 30)
#: A live record's timestamp to its send: milliseconds when all is well, up to a minute
#: when the tail or a viewer falls behind.
DELIVERY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics:
    """The gateway process's families, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.viewers = Gauge(f"{PREFIX}gateway_viewers", "Streams open now.", ["stream"],
                             registry=reg)
        self.streams = Counter(f"{PREFIX}gateway_streams", "Streams ended, by how.",
                               ["stream", "ending"], registry=reg)
        self.refused = Counter(f"{PREFIX}gateway_refused", "Requests refused before a stream.",
                               ["stream", "reason"], registry=reg)
        self.edge_refused = Counter(
            f"{PREFIX}gateway_edge_refused", "Connections the HTTP edge answered and closed "
            "before any route: past the connection limit, the header size or the time for "
            "the headers.", ["reason"], registry=reg)
        for reason in EDGE_REFUSALS:
            self.edge_refused.labels(reason)
        self.messages = Counter(f"{PREFIX}gateway_messages", "SSE messages sent.", ["stream"],
                                registry=reg)
        self.shed = Counter(f"{PREFIX}gateway_shed", "Sheddable events dropped for viewers "
                            "under pressure (docs/gateway.md).", ["stream"], registry=reg)
        self.coalesced = Counter(f"{PREFIX}gateway_coalesced", "Messages merged into the one "
                                 "after them for viewers under pressure.", ["stream"],
                                 registry=reg)
        self.read_backs = Counter(f"{PREFIX}gateway_read_backs",
                                  "Reads of a run's records no longer held in memory.",
                                  ["stream"], registry=reg)
        self.records = Counter(f"{PREFIX}gateway_records", "Records the tails read, by fate.",
                               ["stream", "outcome"], registry=reg)
        self.runs = Gauge(f"{PREFIX}gateway_runs", "Runs indexed.", ["stream"], registry=reg)
        self.held_bytes = Gauge(f"{PREFIX}gateway_held_bytes",
                                "Bytes of records held in memory.", ["stream"], registry=reg)
        self.first_event = Histogram(
            f"{PREFIX}gateway_first_event_seconds",
            "Request to the first message of its stream sent.", ["stream"],
            buckets=FIRST_EVENT_BUCKETS, registry=reg)
        # Observed for every live record sent to every viewer: a write's worth in one call.
        self.delivery_lag = BatchHistogram(
            f"{PREFIX}gateway_delivery_lag_seconds",
            "A live record's Kafka timestamp (set as its transaction produced it, before "
            "its commit) to its send to a viewer.", "stream", DELIVERY_BUCKETS, reg)
        self.resumes = Counter(f"{PREFIX}gateway_resumes", "Streams served from after a seq "
                               "(Last-Event-ID or ?after_seq): a client resuming.", ["stream"],
                               registry=reg)
        for stream in STREAMS:
            self.viewers.labels(stream)
            self.delivery_lag.labels(stream)
            self.resumes.labels(stream)
            self.messages.labels(stream)
            self.shed.labels(stream)
            self.coalesced.labels(stream)
            self.read_backs.labels(stream)
            self.runs.labels(stream)
            self.held_bytes.labels(stream)
            for ending in ENDINGS:
                self.streams.labels(stream, ending)
            for reason in REFUSALS:
                self.refused.labels(stream, reason)
            for outcome in FILINGS:
                self.records.labels(stream, outcome)
