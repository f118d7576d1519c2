"""Prometheus metrics of one consumer: the only place a metric is named.

Every series carries a ``consumer`` label (typed, chunks, pauses, resumes, copier, …) and
never a run id: labels stay bounded whatever the traffic (SPEC §8). The engine calls the
methods of :class:`ConsumerMetrics`; nothing else touches prometheus-client directly, so the
names in the Grafana dashboard and the alert rules can be checked against one source.

The metric families of a registry are created once and shared: several consumers may run
in one process (the demo does) and each binds its own ``consumer`` label on the same
families, where registering the families twice would fail.
"""

from __future__ import annotations

import contextlib
import platform
import threading
import weakref
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from symfonic_stream import __version__
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.observability.histogram import BatchHistogram

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

#: Dead-letter reasons, SPEC §6; anything else is a programming error, not a new label.
DEAD_LETTER_REASONS: Final = frozenset(reason.value for reason in DeadLetterReason)
#: Resume outcomes, SPEC §7: ``accepted`` or a rejection reason.
RESUME_OUTCOMES: Final = frozenset(
    {"accepted", "unknown_ticket", "bad_token", "expired", "already_answered", "invalid_answer"}
)
#: The keys of ``Collector.counts`` (engine/records.py) and the counter each one feeds.
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
        """Latency, transactions, fencing, rebalances, restores, tickets, resumes."""
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

    def _process(self) -> None:
        """The process: ready or not, and what it is."""
        self.ready = self._gauge(
            "ready", "1 when partitions are assigned, state restored and consuming."
        )
        # The one family without a consumer label: it describes the process, not a consumer.
        build_info = Gauge(
            PREFIX + "build_info",
            "Always 1; the labels say what is running.",
            ("version", "python_version", "aiokafka_version"),
            registry=self._registry,
        )
        build_info.labels(__version__, platform.python_version(), _aiokafka_version()).set(1)


def _aiokafka_version() -> str:
    # Read from the installed metadata: importing aiokafka just for a label is wasteful.
    try:
        return metadata.version("aiokafka")
    except metadata.PackageNotFoundError:
        return "unknown"


_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()
_FAMILIES_LOCK = threading.Lock()


def _families(registry: CollectorRegistry) -> _Families:
    with _FAMILIES_LOCK:
        families = _FAMILIES.get(registry)
        if families is None:
            families = _FAMILIES[registry] = _Families(registry)
        return families


class ConsumerMetrics:
    """The metrics one consumer reports, with its ``consumer`` label bound.

    ``registry`` defaults to prometheus-client's global ``REGISTRY``, which is what the
    ``/metrics`` endpoint of a process serves; tests pass a fresh ``CollectorRegistry``.
    Two instances with the same consumer name on one registry share their series.

    Label values that the SPEC enumerates (dead-letter reasons, resume outcomes, count keys)
    are checked and a wrong one raises ``ValueError``: a typo must fail a test, not quietly
    open a new series no dashboard or alert looks at.
    """

    def __init__(self, consumer: str, registry: CollectorRegistry | None = None) -> None:
        if not consumer:
            raise ValueError("consumer name must not be empty")
        self.consumer = consumer
        self.registry = REGISTRY if registry is None else registry
        f = self._f = _families(self.registry)
        # Children bound once: ``labels()`` takes a lock and builds a tuple on every call,
        # which is measurable on the per-record path.
        self._records_in: dict[tuple[str, str], Counter] = {}
        self._records_out: dict[tuple[str, str], Counter] = {}
        self._dead_letters = {
            reason: f.dead_letters.labels(consumer, reason) for reason in DEAD_LETTER_REASONS
        }
        self._counts = {
            "duplicates": f.duplicates.labels(consumer),
            "gaps": f.gaps.labels(consumer),
            "unknown_kind": f.unknown_kinds.labels(consumer),
            "abandoned_runs": f.abandoned_runs.labels(consumer),
            "evicted_runs": f.evicted_runs.labels(consumer),
            "punctuations_cut_short": f.punctuations_cut_short.labels(consumer),
        }
        self._buffered = f.buffered.labels(consumer)
        self._active_runs = f.active_runs.labels(consumer)
        self._end_to_end = f.end_to_end.labels(consumer)
        self._txn_duration = f.txn_duration.labels(consumer)
        self._committed = f.transactions.labels(consumer, "committed")
        self._aborted = f.transactions.labels(consumer, "aborted")
        self._fenced = f.fenced.labels(consumer)
        self._rebalances = f.rebalances.labels(consumer)
        self._restore_duration = f.restore_duration.labels(consumer)
        self._restored = f.restored.labels(consumer)
        self._ready = f.ready.labels(consumer)
        #: Transactions this ConsumerMetrics saw commit (a replay's "did it write" check).
        self.transactions_committed = 0
        # Only the resume validator resumes; zero series on other consumers would be noise.
        self._resumes: dict[str, Counter] = {}
        if consumer == RESUMES_CONSUMER:
            for outcome in RESUME_OUTCOMES:
                self._resume_child(outcome)
        # Every child above now exists, so it is exported as 0 from the first scrape:
        # ``rate()`` and ``increase()`` need a sample before the first event to see it.

    # -- records -------------------------------------------------------------------------

    def record_in(self, topic: str, record_type: str, n: int = 1) -> None:
        """``n`` records of ``record_type`` consumed from ``topic``."""
        key = (topic, record_type)
        child = self._records_in.get(key)
        if child is None:
            child = self._records_in[key] = self._f.records_in.labels(
                self.consumer, topic, record_type
            )
        child.inc(n)

    def record_out(self, topic: str, record_type: str, n: int = 1) -> None:
        """``n`` records of ``record_type`` (``OutputRecord.record_type``) produced to ``topic``."""
        key = (topic, record_type)
        child = self._records_out.get(key)
        if child is None:
            child = self._records_out[key] = self._f.records_out.labels(
                self.consumer, topic, record_type
            )
        child.inc(n)

    def dead_letter(self, reason: str) -> None:
        """One record dead-lettered; ``reason`` is a ``DeadLetterReason`` value."""
        child = self._dead_letters.get(str(reason))
        if child is None:
            raise ValueError(
                f"unknown dead-letter reason {reason!r}; expected one of "
                f"{sorted(DEAD_LETTER_REASONS)}"
            )
        child.inc()

    def add_counts(self, counts: Mapping[str, int]) -> None:
        """Add a batch's ``Collector.counts`` (``duplicates``, ``gaps``, ``unknown_kind``).

        An unknown key raises ``ValueError`` before anything is added, so a processor that
        counts under a misspelt name fails its tests instead of losing the count.
        """
        unknown = set(counts) - COUNT_KEYS
        if unknown:
            raise ValueError(
                f"unknown count key(s) {sorted(unknown)}; expected {sorted(COUNT_KEYS)}"
            )
        for key, n in counts.items():
            if n:
                self._counts[key].inc(n)

    # -- state of the guard --------------------------------------------------------------

    def set_buffered(self, n: int) -> None:
        """Events currently buffered behind holes, over every partition this consumer owns."""
        self._buffered.set(n)

    def set_active_runs(self, n: int) -> None:
        """Runs currently in the state store, over every partition this consumer owns."""
        self._active_runs.set(n)

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Lag of one assigned partition against its last stable offset (never below 0)."""
        # A position briefly ahead of a stale LSO reading would show as negative lag.
        self._f.lag.labels(self.consumer, topic, str(partition)).set(max(0, lag))

    def partition_assigned(self, topic: str, partition: int) -> None:
        """``partition`` is set up (fenced, restored, sought) and consumed here."""
        self._f.assigned.labels(self.consumer, topic, str(partition)).set(1)

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop a revoked partition's lag and assignment series, so another instance's value
        is not shadowed by a frozen one from here. Forgetting an unknown partition is a
        no-op."""
        for family in (self._f.lag, self._f.assigned):
            with contextlib.suppress(KeyError):
                family.remove(self.consumer, topic, str(partition))

    # -- latency and transactions ---------------------------------------------------------

    def observe_end_to_end(self, seconds: float) -> None:
        """Kernel timestamp to commit. Clock skew can make it negative: counted as 0."""
        self._end_to_end.observe(seconds)

    def observe_end_to_end_many(self, seconds: Iterable[float]) -> None:
        """:meth:`observe_end_to_end` for every output of one transaction, in one update."""
        self._end_to_end.observe_many(seconds)

    def observe_transaction(self, seconds: float, committed: bool) -> None:
        """One transaction finished: its duration and whether it committed or aborted."""
        self._txn_duration.observe(max(0.0, seconds))
        (self._committed if committed else self._aborted).inc()
        if committed:
            self.transactions_committed += 1

    def observe_transaction_duration(self, seconds: float) -> None:
        """An aborted transaction's duration (the abort itself: :meth:`count_abort`)."""
        self._txn_duration.observe(max(0.0, seconds))

    def count_abort(self) -> None:
        """What a task processed was rolled back: an aborted transaction, or a processor
        failure that drops what was pending the same way."""
        self._aborted.inc()

    def producer_fenced(self) -> None:
        """The producer was fenced by a newer instance with the same transactional id."""
        self._fenced.inc()

    def rebalance(self) -> None:
        """A consumer-group rebalance (partitions revoked or assigned)."""
        self._rebalances.inc()

    def state_restored(self, seconds: float, records: int) -> None:
        """One partition's state was restored from ``records`` changelog records."""
        self._restore_duration.observe(max(0.0, seconds))
        self._restored.inc(records)

    # -- pauses and resumes ---------------------------------------------------------------

    def ticket_routed(self, queue: str, kind: str, n: int = 1) -> None:
        """``n`` tickets written to human queue ``queue`` (a queue of the routing rules, or
        ``expired``; never a tenant) of ``kind`` (ask_user or interrupt)."""
        self._f.tickets.labels(self.consumer, queue, kind).inc(n)

    def resume(self, outcome: str, n: int = 1) -> None:
        """``n`` resume requests handled: ``accepted`` or the rejection reason."""
        self._resume_child(str(outcome)).inc(n)

    def _resume_child(self, outcome: str) -> Counter:
        child = self._resumes.get(outcome)
        if child is None:
            if outcome not in RESUME_OUTCOMES:
                raise ValueError(
                    f"unknown resume outcome {outcome!r}; expected one of {sorted(RESUME_OUTCOMES)}"
                )
            child = self._resumes[outcome] = self._f.resumes.labels(self.consumer, outcome)
        return child

    # -- readiness --------------------------------------------------------------------------

    def set_ready(self, ready: bool) -> None:
        """1 when partitions are assigned, state restored and the loop consuming."""
        self._ready.set(1 if ready else 0)
