"""The metric families: every metric's name, help text, labels and buckets, in one place.

:class:`~symfonic_stream.observability.metrics.ConsumerMetrics` binds a consumer's label on
them; a registry gets its families once (several consumers may share a process).
"""

from __future__ import annotations

import platform
import threading
import weakref
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from symfonic_stream import __version__, installed_version, native
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.observability.histogram import BatchHistogram
from symfonic_stream.observability.queues import QueueGauges

PREFIX: Final = "symfonic_stream_"

#: End-to-end and transaction latency: 1 ms up to the 60 s transaction timeout.
LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
#: State restore replays a changelog partition: seconds to many minutes on a large store.
RESTORE_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

#: Dead-letter reasons, contract §6; anything else is a programming error, not a new label.
DEAD_LETTER_REASONS: Final = frozenset(reason.value for reason in DeadLetterReason)
#: Resume outcomes, contract §7: ``accepted`` or a rejection reason.
RESUME_OUTCOMES: Final = frozenset(
    {"accepted", "unknown_ticket", "bad_token", "expired", "already_answered", "claimed",
     "invalid_answer"}
)
#: How the resume validator decided a claim of a ticket (docs/pauses.md, "Claims"): a new
#: claim ``granted``, the holder's ``renewed``, or refused: another reviewer ``held`` it,
#: it was ``answered``, or its claimant ``rested`` after a claim of its total lifetime.
CLAIM_OUTCOMES: Final = ("granted", "renewed", "held", "answered", "rested")
#: The keys of ``Collector.counts`` (engine/processor.py) and the counter each one feeds.
COUNT_KEYS: Final = frozenset({
    "duplicates", "gaps", "unknown_kind", "abandoned_runs", "evicted_runs",
    "punctuations_cut_short",
})
#: The consumer whose resume outcomes are pre-initialised (only it ever resumes).
RESUMES_CONSUMER: Final = "resumes"


class _Families:
    """The metric families of one registry, each labelled by consumer and bounded labels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._records()
        self._state()
        self._engine()
        self._process()

    def _counter(self, name: str, doc: str, *labels: str) -> Counter:
        # prometheus-client appends ``_total`` to a counter's name itself.
        return Counter(PREFIX + name, doc, ("consumer", *labels), registry=self._registry)

    def _gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(PREFIX + name, doc, ("consumer", *labels), registry=self._registry)

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(PREFIX + name, doc, ("consumer",), buckets=buckets,
                         registry=self._registry)

    def _records(self) -> None:
        """Records in and out, dead letters, and the guard's counts."""
        counter = self._counter
        self.records_in = counter(
            "records_in", "Records consumed, by what the consumer read them as.", "topic", "type"
        )
        self.records_out = counter(
            "records_out", "Records produced, by output record type.", "topic", "type"
        )
        self.dead_letters = counter(
            "dead_letters", "Records sent to the dead-letter topic.", "reason"
        )
        self.duplicates = counter(
            "duplicates", "Input events dropped as duplicates by the ordering guard."
        )
        self.gaps = counter("gaps", "Gap records written for holes that never filled.")
        self.unknown_kinds = counter(
            "unknown_kinds", "Input events of an unknown kind (projected to nothing)."
        )
        self.abandoned_runs = counter(
            "abandoned_runs", "Runs ended `abandoned`: no event for the idle timeout."
        )
        self.evicted_runs = counter(
            "evicted_runs", "Runs the guard could not go on with: held events dead-lettered."
        )
        self.punctuations_cut_short = counter(
            "punctuations_cut_short", "Punctuations that stopped at their time budget."
        )

    def _state(self) -> None:
        """What the stores hold, and where the consumer stands."""
        gauge = self._gauge
        self.buffered = gauge("buffered_events", "Events held behind holes by the ordering guard.")
        self.active_runs = gauge("active_runs", "Runs held in the state store.")
        self.lag = gauge(
            "consumer_lag_records",
            "Records between the consumer position and the last stable offset.",
            "topic",
            "partition",
        )
        self.assigned = gauge(
            "partition_assigned",
            "1 for each input partition this instance owns, set up and consuming.",
            "topic",
            "partition",
        )

    def _engine(self) -> None:
        """Latency, transactions, fencing, rebalances, restores, tickets, resumes, claims,
        the queues."""
        counter, histogram = self._counter, self._histogram
        # Observed for every output record: a transaction's worth in one call.
        self.end_to_end = BatchHistogram(
            PREFIX + "end_to_end_latency_seconds",
            "Kernel timestamp of the source event to the commit of its output.",
            "consumer",
            LATENCY_BUCKETS,
            self._registry,
        )
        self.txn_duration = histogram(
            "transaction_duration_seconds",
            "Begin to commit or abort of one Kafka transaction.",
            LATENCY_BUCKETS,
        )
        self.transactions = counter("transactions", "Kafka transactions, by outcome.", "outcome")
        self.commit_steps = counter(
            "commit_step_seconds", "Time spent in each step of the commit protocol.", "step"
        )
        self.loop_time = counter(
            "loop_seconds", "Where the consume loop's time goes: processing fetched records, "
            "waiting on a fetch, or waiting for room (too much processed, not yet committed).",
            "activity",
        )
        self.fenced = counter("producers_fenced", "Times this instance's producer was fenced.")
        self.rebalances = counter("rebalances", "Consumer group rebalances seen.")
        self.restore_duration = histogram(
            "state_restore_duration_seconds",
            "Time to restore one partition's state from its changelog.",
            RESTORE_BUCKETS,
        )
        self.restored = counter("state_records_restored", "Changelog records replayed into state.")
        self.tickets = counter(
            "tickets_routed", "Tickets written to human queues.", "queue", "kind"
        )
        self.resumes = counter("resumes", "Resume requests, by outcome.", "outcome")
        # Read from the processors at each scrape (observability/queues.py); registered
        # before the claims counter, whose series it makes for each queue it shows.
        self.queues = QueueGauges(
            (PREFIX + "review_open_tickets", PREFIX + "review_oldest_open_ticket_seconds",
             PREFIX + "review_next_expiry_seconds"), self._registry)
        self.claims = counter(
            "review_claims", "Claims of tickets the resume validator decided, by the ticket's "
            "queue and the outcome.", "queue", "outcome"
        )
        self.queues.claims = (self.claims, CLAIM_OUTCOMES)

    def _process(self) -> None:
        """The process: ready or not, and what it is."""
        self.ready = self._gauge(
            "ready", "1 when partitions are assigned, state restored and consuming."
        )
        # The one family without a consumer label: it describes the process, not a consumer.
        build_info = Gauge(
            PREFIX + "build_info",
            "Always 1; the labels say what is running.",
            ("version", "python_version", "aiokafka_version", "native"),
            registry=self._registry,
        )
        # native="false": the pure-Python paths run (symfonic_stream/native.py).
        build_info.labels(__version__, platform.python_version(),
                          installed_version("aiokafka"), str(native.AVAILABLE).lower()).set(1)


_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()
_FAMILIES_LOCK = threading.Lock()


def _families(registry: CollectorRegistry) -> _Families:
    with _FAMILIES_LOCK:
        families = _FAMILIES.get(registry)
        if families is None:
            families = _FAMILIES[registry] = _Families(registry)
        return families
