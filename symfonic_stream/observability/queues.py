"""The human queues' gauges (docs/metrics.md, "Metrics"): per queue, the open tickets, the
oldest one's age and the time left before the next one expires, read when Prometheus scrapes.

A ticket's age and the time it has left change with the clock, not with records, and an
open ticket stops being open when its expiry passes, which no record says. So the gauges
are computed at each scrape from what the resume validator's processors hold
(:class:`ReviewQueues`: one summary per queue, from an index they keep up to date with a dict
update per change), over the processors of the partitions the engine owns at that moment:
exact after a restore, a rebalance or an aborted transaction, and nothing per record.

Each queue also gets its claim series (``review_claims_total``, every outcome) at the first
scrape that shows it, so that ``increase()`` sees the queue's first claim (a series that
appears at 1 would hide it).
"""

from __future__ import annotations

import inspect
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(slots=True)
class QueueTickets:
    """One queue's open tickets (registered, unanswered, not expired) at one moment."""

    open: int = 0
    #: When the oldest was registered, and the earliest expiry (Unix s; inf: none open).
    oldest: float = float("inf")
    next_expiry: float = float("inf")

    def add(self, registered_at: float, expires_at: float) -> None:
        self.open += 1
        self.oldest = min(self.oldest, registered_at)
        self.next_expiry = min(self.next_expiry, expires_at)

    def merge(self, other: QueueTickets) -> None:
        self.open += other.open
        self.oldest = min(self.oldest, other.oldest)
        self.next_expiry = min(self.next_expiry, other.next_expiry)


@runtime_checkable
class ReviewQueues(Protocol):
    """A processor that keeps tickets on human queues (the resume validator)."""

    def review_queues(self, now: float) -> Mapping[str, QueueTickets]:
        """Per queue, its tickets open at ``now``; a queue it knows with none may be there
        with ``open`` 0."""


#: What a consumer's engine gives: the processors of the partitions it owns now.
Processors = Callable[[], Iterable[object]]


class QueueGauges(Collector):
    """The three queue gauges of every consumer on one registry (labels consumer, queue)."""

    def __init__(self, names: tuple[str, str, str], registry: CollectorRegistry,
                 clock: Callable[[], float] = time.time) -> None:
        self._names = names
        #: The claims counter and its outcomes, whose series each queue shown gets. Set
        #: after the counter is made, so that it registers after this collector: a scrape
        #: reads the counter after this made the series, and so shows them.
        self.claims: tuple[Counter, tuple[str, ...]] | None = None
        self._clock = clock
        self._sources: dict[str, list[Callable[[], Processors | None]]] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def watch(self, consumer: str, processors: Processors) -> None:
        """Read ``consumer``'s queues from ``processors()`` at each scrape; a bound method
        is held weakly (an engine that is gone leaves no source behind)."""
        held: Callable[[], Processors | None] = (
            weakref.WeakMethod(processors) if inspect.ismethod(processors)
            else lambda: processors)
        with self._lock:
            self._sources.setdefault(consumer, []).append(held)

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        open_, oldest, expiry = self._names
        labels = ["consumer", "queue"]
        return (
            GaugeMetricFamily(open_, "Tickets on the queue registered, unanswered and not "
                              "expired.", labels=labels),
            GaugeMetricFamily(oldest, "Seconds since the oldest open ticket of the queue "
                              "was registered.", labels=labels),
            GaugeMetricFamily(expiry, "Seconds until the earliest expiry among the queue's "
                              "open tickets.", labels=labels),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        open_, oldest, expiry = families = self._families()
        with self._lock:
            for consumer, held in list(self._sources.items()):
                self._sources[consumer] = [h for h in held if h() is not None]
            sources = [(consumer, [p for h in held if (p := h()) is not None])
                       for consumer, held in self._sources.items()]
        for consumer, each in sources:
            for queue, tickets in sorted(_merged(each, now).items()):
                open_.add_metric([consumer, queue], tickets.open)
                if tickets.open:
                    oldest.add_metric([consumer, queue], max(0.0, now - tickets.oldest))
                    expiry.add_metric([consumer, queue], max(0.0, tickets.next_expiry - now))
                if self.claims is not None:  # (created at 0 once; a no-op after)
                    counter, outcomes = self.claims
                    for outcome in outcomes:
                        counter.labels(consumer, queue, outcome)
        yield from families


def _merged(sources: list[Processors], now: float) -> dict[str, QueueTickets]:
    """Every queue of the processors' summaries, summed over them."""
    merged: dict[str, QueueTickets] = {}
    for processors in sources:
        for processor in processors():
            if isinstance(processor, ReviewQueues):
                for queue, tickets in processor.review_queues(now).items():
                    merged.setdefault(queue, QueueTickets()).merge(tickets)
    return merged
