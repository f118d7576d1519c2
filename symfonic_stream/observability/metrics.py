"""Prometheus metrics of one consumer (and of a supervisor of workers); their names,
help texts and buckets are :mod:`~symfonic_stream.observability.families`, the only place a
metric is named.

Every series carries a ``consumer`` label (typed, chunks, pauses, resumes, copier, …) and
never a run id: labels stay bounded whatever the traffic (contract §8). The engine calls the
methods of :class:`ConsumerMetrics`; nothing else touches prometheus-client directly, so the
names in the Grafana dashboard and the alert rules can be checked against one source.

The metric families of a registry are created once and shared: several consumers may run
in one process (the demo does) and each binds its own ``consumer`` label on the same
families, where registering the families twice would fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from symfonic_stream.observability.families import (
    CLAIM_OUTCOMES,
    COUNT_KEYS,
    DEAD_LETTER_REASONS,
    PREFIX,
    RESUME_OUTCOMES,
    RESUMES_CONSUMER,
    _families,
)
from symfonic_stream.observability.queues import Processors

__all__ = ["ConsumerMetrics", "SupervisorMetrics"]

class ConsumerMetrics:
    """The metrics one consumer reports, with its ``consumer`` label bound.

    ``registry`` defaults to prometheus-client's global ``REGISTRY``, which is what the
    ``/metrics`` endpoint of a process serves; tests pass a fresh ``CollectorRegistry``.
    Two instances with the same consumer name on one registry share their series.

    Label values that the contract enumerates (dead-letter reasons, resume outcomes, count keys)
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
        self._commit_steps: dict[str, Counter] = {}
        self._loop_time: dict[str, Counter] = {}
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
        self._claims: dict[tuple[str, str], Counter] = {}
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

    def add_commit_steps(self, steps: Iterable[tuple[str, float]]) -> None:
        """One transaction's time per commit step (docs/engine.md names the steps)."""
        children = self._commit_steps
        for step, seconds in steps:
            child = children.get(step)
            if child is None:
                child = children[step] = self._f.commit_steps.labels(self.consumer, step)
            child.inc(seconds)

    def add_loop_time(self, activity: str, seconds: float) -> None:
        child = self._loop_time.get(activity)
        if child is None:
            child = self._loop_time[activity] = self._f.loop_time.labels(self.consumer, activity)
        child.inc(seconds)

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

    def claim(self, queue: str, outcome: str, n: int = 1) -> None:
        """``n`` claims of tickets of ``queue`` (a queue of the routing rules) decided
        ``outcome`` (:data:`CLAIM_OUTCOMES`)."""
        child = self._claims.get((queue, outcome))
        if child is None:
            if outcome not in CLAIM_OUTCOMES:
                raise ValueError(
                    f"unknown claim outcome {outcome!r}; expected one of {list(CLAIM_OUTCOMES)}"
                )
            child = self._claims[queue, outcome] = self._f.claims.labels(
                self.consumer, queue, outcome)
        child.inc(n)

    def watch(self, processors: Processors) -> None:
        """Read the queue gauges at each scrape from ``processors()``, the processors of
        the partitions this consumer owns then (observability/queues.py)."""
        self._f.queues.watch(self.consumer, processors)

    # -- readiness --------------------------------------------------------------------------

    def set_ready(self, ready: bool) -> None:
        """1 when partitions are assigned, state restored and the loop consuming."""
        self._ready.set(1 if ready else 0)


class SupervisorMetrics:
    """The supervisor of ``run --workers N``'s own gauges, on a registry of their own (its
    ``/metrics`` is its workers', merged: ``symfonic_stream.observability.aggregate``)."""

    def __init__(self, consumer: str, workers: int) -> None:
        self.registry = CollectorRegistry()
        labels = ("consumer",)
        self._workers = Gauge(PREFIX + "workers", "Worker processes configured.", labels,
                              registry=self.registry).labels(consumer)
        self._up = Gauge(PREFIX + "workers_up", "Worker processes whose /metrics answered the "
                         "last scrape.", labels, registry=self.registry).labels(consumer)
        self._workers.set(workers)

    def set_up(self, workers: int) -> None:
        """``workers`` answered this scrape; the others' series are missing from it."""
        self._up.set(workers)
