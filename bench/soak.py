"""``python -m bench soak``: a million open runs that never end, on one partition's typed
projector (docs/benchmarks.md, "Soak"). It reports this process's peak RSS, so it imports
nothing of the harness that talks to Kafka.
"""

from __future__ import annotations

import gc
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.harness import CollectorPauses, options, rss_bytes
from bench.workload import raw_event
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor
from symfonic_stream.projections.typed import project_typed
from symfonic_stream.state.store import write_changes

#: Records per commit of the soak.
COMMIT_EVERY = 1000
#: Documented (docs/benchmarks.md, "Soak"): peak RSS for 1M open runs at default settings.
RSS_BOUND_MIB_PER_MILLION = 2048


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

    def committed(self, processor: ProjectorProcessor, out: Collector) -> None:
        """What one commit writes counted (outputs, changelog bytes); then a fresh batch."""
        write_changes(processor.stores, out.changelog)
        self.changelog_bytes += sum(len(key) + len(value or b"")
                                    for key, value in out.changelog.items())
        self.outputs += len(out.outputs)
        out.clear()


def _soak_event(n: int) -> InputRecord:
    run_id = f"run-{n:07d}"
    value = raw_event(run_id, 5, "text_delta", 1_700_000_000.0 + n, text="only index 5")
    # A copy of its exact size, as a fetched record's value is: orjson's own bytes object
    # keeps its 4 KiB writing buffer (tracemalloc shows 4,097 bytes for a 72-byte value).
    return InputRecord("soak.agent-events", 0, n, run_id.encode(), bytes(memoryview(value)),
                       (), 0)


def _advance(processor: ProjectorProcessor, pauses: CollectorPauses, name: str, start: float,
             done: Callable[[Phase], bool]) -> Phase:
    """Punctuate once a (simulated) second from ``start`` until ``done(phase)``."""
    phase, out, now = Phase(name), Collector(), start
    while not done(phase):
        began, collecting = time.perf_counter(), pauses.total_s
        processor.punctuate(now, out)
        wall = time.perf_counter() - began
        phase.longest_wall_ms = max(phase.longest_wall_ms, wall * 1000)
        phase.longest_ms = max(phase.longest_ms, (wall - (pauses.total_s - collecting)) * 1000)
        phase.punctuations += 1
        phase.abandoned += out.counts["abandoned_runs"]
        phase.committed(processor, out)
        now += 1.0
        if phase.punctuations > 100_000:
            raise RuntimeError(f"{name}: not done after 100,000 punctuations")
    return phase


def soak(argv: list[str] | None = None) -> int:
    """Issue 16's worst case: every run sends only index 5, so every run waits behind a hole
    that never fills and never ends. One partition's live processor (no broker, the clock
    simulated) is fed them in commits of 1,000 records, then the clock passes the gap
    timeout, the idle timeout and the grace: peak RSS against the input's own size, the
    buffered bytes against their bound, changelog bytes, the longest punctuation."""
    runs = options("bench soak", argv, soak.__doc__, runs=1_000_000).runs
    pauses, limits = CollectorPauses(), GuardLimits()
    raw = [_soak_event(n).value for n in range(runs)]
    baseline_mib = (sys.getsizeof(raw) + sum(sys.getsizeof(value) for value in raw)) / 2**20
    del raw
    gc.collect()
    start_mib = rss_bytes() / 2**20
    processor = ProjectorProcessor(project_typed, "soak.stream-events", limits)
    guard = processor.guard
    started = time.perf_counter()
    fed, out = Phase("feed"), Collector()
    for n in range(runs):
        processor.process(_soak_event(n), float(n) / 100_000, out)  # 100k events a second
        if n % COMMIT_EVERY == COMMIT_EVERY - 1:
            fed.committed(processor, out)
    fed.committed(processor, out)
    feed_s = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    state_mib, buffered_peak = rss_bytes() / 2**20 - start_mib, guard.buffered_bytes
    idle = limits.run_idle_timeout_s + 60
    phases = [
        _advance(processor, pauses, "gap timeout", runs / 100_000 + limits.gap_timeout_s,
                 lambda _: guard.buffered == 0),
        _advance(processor, pauses, "idle timeout", runs / 100_000 + idle,
                 lambda phase: phase.abandoned == runs),
        _advance(processor, pauses, "grace",
                 runs / 100_000 + idle + limits.closed_run_grace_s + 60,
                 lambda _: len(guard.runs) == 0)]
    bound = RSS_BOUND_MIB_PER_MILLION * max(runs, 100_000) / 1e6
    print(f"soak: {runs:,} runs each sending only index 5, one partition, default bounds")
    print(f"  feed           {feed_s:8.1f} s   {runs / feed_s:10,.0f} events/s")
    print(f"  peak RSS       {peak:8.0f} MiB  (bound {bound:.0f} MiB); the state's own "
          f"{state_mib:.0f} MiB, {state_mib * 2**20 / runs:.0f} bytes per run; "
          f"the input alone {baseline_mib:.0f} MiB (state x{state_mib / max(baseline_mib, 1):.1f})")
    print(f"  buffered peak  {buffered_peak / 2**20:8.1f} MiB (bound "
          f"{limits.buffer_max_bytes / 2**20:.0f} MiB)")
    print(f"  changelog      {fed.changelog_bytes / runs:8.0f} bytes per event fed")
    for phase in phases:
        print(f"  {phase.name:14} {phase.punctuations:5d} punctuations, longest "
              f"{phase.longest_ms:6.1f} ms ({phase.longest_wall_ms:.1f} ms with the "
              f"collector's pauses), {phase.outputs:,} records out, "
              f"{phase.changelog_bytes / max(runs, 1):.0f} changelog bytes per run")
    print(f"  collector      longest full collection {pauses.longest_full_ms:.0f} ms, "
          f"{pauses.total_s:.1f} s in all (CPython's, anywhere in the process)")
    ok = peak <= bound and max(phase.longest_ms for phase in phases) < 100
    print(f"  verdict        {'within bounds' if ok else 'OUT OF BOUNDS'} "
          f"(RSS bound, a punctuation's own work < 100 ms)")
    return 0 if ok else 1

