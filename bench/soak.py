"""``python -m bench.soak``: a million open runs against one partition's projector.

Issue 16's worst case: every run sends one event, index 5, and nothing else, so every run
waits behind a hole that never fills and never ends. The projector (the live processor,
in process: no broker, the clock is simulated) is fed them in commits of 1,000 records,
then the clock moves on:

1. **feed**: peak RSS, changelog bytes written per event, and the partition's buffered
   bytes, held to ``SYMFONIC_BUFFER_MAX_BYTES`` by forced gaps;
2. **gap timeout**: every hole becomes a gap, punctuation by punctuation (each at most
   ``SYMFONIC_PUNCTUATE_BUDGET_MS``): the longest one and how many it took;
3. **idle timeout**: every run ends ``abandoned``; the same figures;
4. **grace**: every run is forgotten (tombstones), the store is empty.

The baseline, measured in the same run, is the input itself: the raw values held in a
list (their ``sys.getsizeof``), the least any consumer holding them could use. The
state's own RSS is printed against it.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from bench.pauses import CollectorPauses
from symfonic_stream.engine.records import Collector, InputRecord
from symfonic_stream.processors.ordering.guard import GuardLimits
from symfonic_stream.processors.projector import ProjectorProcessor
from symfonic_stream.projections.typed import project_typed
from symfonic_stream.state.store import write_changes

COMMIT_EVERY = 1000
#: Documented (docs/benchmarks.md, "Soak"): peak RSS for 1M open runs at default settings.
RSS_BOUND_MIB_PER_MILLION = 2048


PAUSES = CollectorPauses()


@dataclass
class Phase:
    name: str
    punctuations: int = 0
    #: The longest punctuation's own work (its wall time less the collector's pauses in it).
    longest_ms: float = 0.0
    #: The longest punctuation's wall time, collector pauses included.
    longest_wall_ms: float = 0.0
    outputs: int = 0
    changelog_bytes: int = 0
    abandoned: int = 0


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    """The resident set now (``VmRSS``), not the peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return _peak_rss_mib()


def _event(n: int) -> InputRecord:
    run_id = f"run-{n:07d}"
    value = orjson.dumps({"run_id": run_id, "index": 5, "kind": "text_delta",
                          "timestamp": 1_700_000_000.0 + n, "text": "only index 5"})
    # A copy of its exact size, as a fetched record's value is: orjson's own bytes object
    # keeps its 4 KiB writing buffer (tracemalloc shows 4,097 bytes for a 72-byte value).
    value = bytes(memoryview(value))
    return InputRecord("soak.agent-events", 0, n, run_id.encode(), value, (), 0)


def _commit(processor: ProjectorProcessor, out: Collector) -> tuple[int, int]:
    """What one commit writes: (outputs, changelog bytes); then a fresh batch."""
    write_changes(processor.stores, out.state)
    written = sum(len(key) + len(value or b"") for key, value in out.state.items())
    outputs = len(out.outputs)
    out.clear()
    return outputs, written


def feed(processor: ProjectorProcessor, runs: int) -> Phase:
    phase, out = Phase("feed"), Collector()
    for n in range(runs):
        processor.process(_event(n), float(n) / 100_000, out)  # 100k events a second
        if n % COMMIT_EVERY == COMMIT_EVERY - 1:
            outputs, written = _commit(processor, out)
            phase.outputs += outputs
            phase.changelog_bytes += written
    outputs, written = _commit(processor, out)
    phase.outputs += outputs
    phase.changelog_bytes += written
    return phase


def advance(
    processor: ProjectorProcessor, name: str, start: float, done: Callable[[Phase], bool]
) -> Phase:
    """Punctuate once a (simulated) second from ``start`` until ``done(phase)``."""
    phase, out, now = Phase(name), Collector(), start
    while not done(phase):
        began, collecting = time.perf_counter(), PAUSES.total_s
        processor.punctuate(now, out)
        wall = time.perf_counter() - began
        phase.longest_wall_ms = max(phase.longest_wall_ms, wall * 1000)
        phase.longest_ms = max(phase.longest_ms, (wall - (PAUSES.total_s - collecting)) * 1000)
        phase.punctuations += 1
        phase.abandoned += out.counts["abandoned_runs"]
        outputs, written = _commit(processor, out)
        phase.outputs += outputs
        phase.changelog_bytes += written
        now += 1.0
        if phase.punctuations > 100_000:
            raise RuntimeError(f"{name}: not done after 100,000 punctuations")
    return phase


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    limits = GuardLimits()
    raw = [_event(n).value for n in range(args.runs)]
    baseline_mib = (sys.getsizeof(raw) + sum(sys.getsizeof(value) for value in raw)) / 2**20
    del raw
    gc.collect()

    start_mib = _rss_mib()
    processor = ProjectorProcessor(project_typed, "soak.stream-events", limits)
    guard = processor.guard
    started = time.perf_counter()
    fed = feed(processor, args.runs)
    feed_s = time.perf_counter() - started
    peak = _peak_rss_mib()
    state_mib = _rss_mib() - start_mib
    buffered_peak = guard.buffered_bytes
    last = args.runs / 100_000
    gaps = advance(processor, "gap timeout", last + limits.gap_timeout_s,
                   lambda _: guard.buffered == 0)
    idle = advance(processor, "idle timeout", last + limits.run_idle_timeout_s + 60,
                   lambda phase: phase.abandoned == args.runs)
    grace = advance(processor, "grace", last + limits.run_idle_timeout_s + 60
                    + limits.closed_run_grace_s + 60, lambda _: len(guard.runs) == 0)

    bound = RSS_BOUND_MIB_PER_MILLION * max(args.runs, 100_000) / 1e6
    print(f"soak: {args.runs:,} runs each sending only index 5, one partition, default bounds")
    print(f"  feed           {feed_s:8.1f} s   {args.runs / feed_s:10,.0f} events/s")
    print(f"  peak RSS       {peak:8.0f} MiB  (bound {bound:.0f} MiB); the state's own "
          f"{state_mib:.0f} MiB, {state_mib * 2**20 / args.runs:.0f} bytes per run; "
          f"the input alone {baseline_mib:.0f} MiB (state x{state_mib / max(baseline_mib, 1):.1f})")
    print(f"  buffered peak  {buffered_peak / 2**20:8.1f} MiB (bound "
          f"{limits.buffer_max_bytes / 2**20:.0f} MiB)")
    print(f"  changelog      {fed.changelog_bytes / args.runs:8.0f} bytes per event fed")
    for phase in (gaps, idle, grace):
        print(f"  {phase.name:14} {phase.punctuations:5d} punctuations, longest "
              f"{phase.longest_ms:6.1f} ms ({phase.longest_wall_ms:.1f} ms with the "
              f"collector's pauses), {phase.outputs:,} records out, "
              f"{phase.changelog_bytes / max(args.runs, 1):.0f} changelog bytes per run")
    print(f"  collector      longest full collection {PAUSES.longest_full_ms:.0f} ms, "
          f"{PAUSES.total_s:.1f} s in all (CPython's, anywhere in the process)")
    longest = max(gaps.longest_ms, idle.longest_ms, grace.longest_ms)
    ok = peak <= bound and longest < 100
    print(f"  verdict        {'within bounds' if ok else 'OUT OF BOUNDS'} "
          f"(RSS bound, a punctuation's own work < 100 ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
