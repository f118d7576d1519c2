"""What the clock does to the guard's runs: gap timeouts, idle runs abandoned, closed runs
forgotten, and a run whose expiry fails evicted instead of stopping the partition.

A punctuation visits only the runs whose deadline passed (the run store's heap), and at
most for ``punctuate_budget_s``: what is left stays due and the next punctuation goes on,
so the event loop (and with it the consumer's heartbeat) is never held for long, however
many runs come due at once.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from symfonic_stream.engine.processor import Collector
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.processors.expiring import within_budget
from symfonic_stream.processors.ordering.guard import OrderingGuard
from symfonic_stream.processors.ordering.run_state import (
    NOT_TOUCHED,
    RunState,
    RunStatus,
    pending_key,
    split_pending_key,
)

log = logging.getLogger(__name__)

#: Runs one step of a sweep reads (between two looks at the clock).
SWEEP_SLICE = 512


def punctuate(guard: OrderingGuard, now: float, out: Collector) -> None:
    """Fire what is due at ``now``, for at most the guard's time budget."""
    runs, budget = guard.runs, guard.limits.punctuate_budget_s
    if runs.on_disk:  # the deadlines a sweep schedules: at most half the budget
        began = time.perf_counter()
        sweep(guard, now, budget / 2)
        budget = max(budget / 2, budget - (time.perf_counter() - began))
    for run_id in within_budget(runs.due(now), budget, out):
        run = runs.get(run_id)
        if run is not None:
            _expire_isolated(guard, run_id, run, now, out)


def _expire_isolated(
    guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector
) -> None:
    """:func:`_expire`, and if it raises: nothing it emitted is kept, the run is evicted."""
    outputs, letters = len(out.outputs), len(out.dead_letters)
    counters = run.next_index, run.next_seq
    try:
        _expire(guard, run_id, run, now, out)
    except Exception as exc:
        del out.outputs[outputs:]
        del out.dead_letters[letters:]
        run.next_index, run.next_seq = counters
        log.exception("expiring a run failed; the run is evicted", extra={"run_id": run_id})
        evict(guard, run_id, run, now, out, f"{type(exc).__name__}: {exc}")


def _expire(guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector) -> None:
    limits = guard.limits
    if run.status is RunStatus.CLOSED:
        if run.closed_at + limits.closed_run_grace_s <= now:
            guard.runs.delete(run_id)  # its grace is over: a tombstone at the next commit
            return
    else:
        if run.touched_at == NOT_TOUCHED:  # from 0.x state: its idle clock starts now
            run.touched_at = now
            if run.status is RunStatus.PAUSED and not run.pause_expires_at:
                run.pause_expires_at = now + limits.run_idle_timeout_s
            guard.runs.touch(run_id)
        while ((oldest := guard.oldest_arrival(run_id)) is not None
               and oldest + limits.gap_timeout_s <= now):
            guard.fill_first_hole(run_id, run, now, out)
        due = guard.deadline(run_id, run)
        if _still_open(run) and due is not None and due <= now:
            abandon(guard, run_id, run, now, out)
    due = guard.deadline(run_id, run)
    if due is not None:
        guard.runs.schedule(run_id, due)  # (its entry was taken off the heap)


def abandon(guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector) -> None:
    """No event for the idle timeout (or a pause long expired): every hole becomes a gap,
    then ``end: abandoned`` (``source_index`` null, ``ts`` the last event's), and the run
    closes like any other (contract §5)."""
    while run_id in guard.held and run.status is not RunStatus.CLOSED:
        guard.fill_first_hole(run_id, run, now, out)
    if run.status is RunStatus.CLOSED:  # a filled hole released its closing event
        return
    envelope = {"run_id": run_id, "seq": run.next_seq, "source_index": None,
                "ts": run.last_ts, "end": {"status": "abandoned", "error": None}}
    guard.emit(run_id, run, envelope, "end_abandoned", run.last_ts, out)
    out.count("abandoned_runs")
    guard.close(run_id, run, now, out)


def evict(
    guard: OrderingGuard, run_id: str, run: RunState, now: float, out: Collector, why: str
) -> None:
    """A run the guard cannot go on with: what it holds is dead-lettered with ``why``, and
    it is closed (so what comes later for it is ``run_closed``, and its grace forgets it)."""
    for index in sorted(guard.held.get(run_id, ())):
        pending = guard.unbuffer(run_id, run, index)
        out.dead_letter(pending.record, DeadLetterReason.INVALID_EVENT,
                        f"run {run_id!r} was evicted: {why}")
    out.count("evicted_runs")
    guard.close(run_id, run, now, out)


def restored(guard: OrderingGuard) -> None:
    """After a restore (or an abort): the events held behind holes, by run (oldest first),
    their counts, and every run's deadline.

    With the runs on disk (``state/disk.py``) only the runs with events held are scheduled
    here; every other run's deadline is left to the sweeps (:func:`sweep`), the first of
    which begins at the next punctuation: reading half a million runs back from the
    database was most of a restart's time (docs/engine.md, "Values on disk")."""
    runs, waiting = guard.runs, guard.waiting
    guard.held = OrderedDict()
    guard.buffered = guard.buffered_bytes = 0
    for key, pending in sorted(waiting.items(), key=lambda item: item[1].arrived_at):
        run_id, index = split_pending_key(key)
        run = runs.peek(run_id)
        if run is None or run.status is RunStatus.CLOSED or index < run.next_index:
            waiting.delete(key)  # (paranoid: its run moved on in the same transaction)
            continue
        guard.held.setdefault(run_id, {})[index] = pending
        guard.buffered += 1
        guard.buffered_bytes += pending.size
    guard.sweeping, guard.horizon = False, 0.0  # (a sweep begins at the next punctuation)
    runs.keep_deadlines_until(None)
    if runs.on_disk:
        for run_id in list(guard.held):
            run = runs.peek(run_id)
            if run is not None:
                _restore_run(guard, run_id, run)
    else:
        for run_id, run in runs.items():
            _restore_run(guard, run_id, run)


def sweep(guard: OrderingGuard, now: float, budget_s: float) -> None:
    """With the runs on disk, keep in memory only the deadlines due within the horizon.

    Their store drops any deadline later than ``guard.horizon``; a sweep over every run,
    begun each time half of the horizon has passed (``GuardLimits.deadline_horizon_s``),
    schedules the deadlines that are within the new one, a slice of runs at a time for at
    most ``budget_s`` per punctuation, each run read as it is then. A run scheduled meanwhile
    (its events, a punctuation) is passed over. So a deadline beyond the horizon is found by
    the sweep that begins before the horizon passes, as long as a sweep takes less than half
    of it (83,000 runs take a few seconds of punctuations; the horizon is minutes)."""
    runs, limits = guard.runs, guard.limits
    if not guard.sweeping:
        if now < guard.horizon - limits.deadline_horizon_s / 2:
            return
        guard.sweeping, guard.swept_to = True, None
        guard.horizon = now + limits.deadline_horizon_s
        runs.keep_deadlines_until(guard.horizon)
    stop = time.perf_counter() + budget_s
    while time.perf_counter() < stop:
        keys = runs.keys_after(guard.swept_to, SWEEP_SLICE)
        if not keys:
            guard.sweeping = False
            return
        for key in keys:
            if runs.deadline(key) is None:
                _schedule_swept(guard, key)
        guard.swept_to = keys[-1]


def _schedule_swept(guard: OrderingGuard, key: str) -> None:
    run = guard.runs.peek(key)
    if run is not None:
        _restore_run(guard, key, run)


def _restore_run(guard: OrderingGuard, run_id: str, run: RunState) -> None:
    """One restored run (read, not changed): its events of a 0.x record moved under ``buf``
    keys of their own, its deadline scheduled."""
    if run.legacy_buffer:
        held = guard.held.setdefault(run_id, {})
        for index, pending in sorted(run.legacy_buffer.items()):
            key = pending_key(run_id, index)
            if key not in guard.waiting:
                guard.waiting.put(key, pending)
                held[index] = pending
                guard.buffered += 1
                guard.buffered_bytes += pending.size
        if not held:
            del guard.held[run_id]
        changed = guard.runs.get(run_id)  # (written again, without them)
        assert changed is not None
        changed.legacy_buffer = None
        guard.runs.touch(run_id)
    due = guard.deadline(run_id, run)
    if due is not None:
        guard.runs.schedule(run_id, due)


def _still_open(run: RunState) -> bool:
    """(A function, not an expression: a filled hole may have closed the run.)"""
    return run.status is not RunStatus.CLOSED
