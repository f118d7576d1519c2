"""The benchmark's own process and CPython's cyclic garbage collector.

A full (generation 2) collection walks every tracked object. The comparison holds its
whole workload, a million events as dicts, in the process that publishes and reads the
latency runs' records: there each full collection took about a second, wherever an
allocation set it off, and the reader read nothing meanwhile. The stall was the
harness's, and it was counted to whichever row was running (docs/benchmarks.md, "The
harness's own pauses"). So a measurement freezes what it holds before its load, with the
engine's own ``symfonic_stream.engine.heap.settle``, and records the collector's pauses
during it (:class:`CollectorPauses`).
"""

from __future__ import annotations

import gc
import time


class CollectorPauses:
    """The collector's pauses in this process while recording (``gc.callbacks``): their
    total, the longest of any generation and the longest full one. :meth:`close` stops."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.longest_ms = 0.0
        self.longest_full_ms = 0.0
        self._started = 0.0
        gc.callbacks.append(self._observe)

    def close(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took_ms = (time.perf_counter() - self._started) * 1000
        self.total_s += took_ms / 1000
        self.longest_ms = max(self.longest_ms, took_ms)
        if info["generation"] == 2:
            self.longest_full_ms = max(self.longest_full_ms, took_ms)
