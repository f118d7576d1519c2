"""A Prometheus histogram that takes a whole transaction's observations in one call.

The engine observes the end-to-end latency of every output record (1.2 per input event for
the typed projector). prometheus-client's ``Histogram.observe`` takes a lock and walks the
buckets for each value: one call per record was a tenth of a projector's CPU
(docs/benchmarks.md). :class:`BatchHistogram` keeps plain counts per label value, adds a
batch of values under one lock, and is exported as a prometheus-client histogram is
(``_bucket`` with cumulative ``le``, ``_count``, ``_sum``; only the ``_created`` sample is
left out), through the public custom collector API.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client import utils as prometheus_utils
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

#: How prometheus-client writes a bucket bound (``1.0``, ``2.5``, ``+Inf``): the same here.
_le: Callable[[float], str] = prometheus_utils.floatToGoString


class BatchHistogramChild:
    """The series of one label value."""

    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; last: +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        self.observe_many((value,))

    def observe_many(self, values: Iterable[float]) -> None:
        """Count every value (a negative one as 0, like a clock skew) in one update.

        The values are sorted once and each bucket's bound looked up in them: C-level
        work per value (the sort, the sum), where a Python loop placing each value in its
        bucket cost ~1,500 instructions per value (docs/benchmarks.md)."""
        seen = values if isinstance(values, list) else list(values)
        if not seen:
            return
        ordered = sorted(seen)
        if ordered[0] < 0.0:  # the negatives lead: as zeros the list stays sorted
            ordered = [value if value > 0.0 else 0.0 for value in ordered]
            seen = [value if value > 0.0 else 0.0 for value in seen]
        total = sum(seen)  # in the order observed, as one observe() after another adds
        # How many values are <= each bound: the cumulative count of its bucket.
        upto = [bisect_right(ordered, bound) for bound in self._bounds]
        with self._lock:
            mine = self._counts
            below = 0
            for i, cumulative in enumerate(upto):
                if cumulative != below:
                    mine[i] += cumulative - below
                    below = cumulative
            mine[-1] += len(ordered) - below
            self._sum += total

    def snapshot(self) -> tuple[list[int], float]:
        """Cumulative bucket counts (the last is the +Inf bucket, the count) and the sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        running = 0
        for i, n in enumerate(counts):
            running += n
            counts[i] = running
        return counts, total


class BatchHistogram(Collector):
    """A histogram with one label, registered on ``registry`` like a prometheus-client one."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._label = label
        self._bounds = tuple(float(b) for b in buckets)
        if list(self._bounds) != sorted(set(self._bounds)):
            raise ValueError(f"{name}: buckets must be increasing: {buckets}")
        self._children: dict[str, BatchHistogramChild] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, value: str) -> BatchHistogramChild:
        with self._lock:
            child = self._children.get(value)
            if child is None:
                child = self._children[value] = BatchHistogramChild(self._bounds)
            return child

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=[self._label])

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=[self._label])
        with self._lock:
            children = list(self._children.items())
        les = [_le(bound) for bound in self._bounds] + ["+Inf"]
        for value, child in children:
            counts, total = child.snapshot()
            family.add_metric([value], list(zip(les, counts, strict=True)), total)
        yield family
