"""A processor whose one state store forgets each key at a deadline derived from its value.

The pause router remembers a paused run until its grace after it closed; the resume
validator remembers a ticket until its expiry (or answer) plus the grace. Both are this:
a punctuation forgets what is due (a tombstone at the next commit), a restore schedules
each key again from its value, and nothing is held back to the end of an input.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Generic, TypeVar

from symfonic_stream.engine.processor import Collector
from symfonic_stream.state.store import StateStore

V = TypeVar("V")

#: A pause is waited for until its ``expires_at``, but never more than this many idle
#: timeouts (SYMFONIC_RUN_IDLE_TIMEOUT_S) after it was seen: a kernel's far-future (or
#: hostile) expiry cannot keep state forever.
PAUSE_KEPT_IDLE_TIMEOUTS = 24


def pause_kept_until(expires_at: float, seen_at: float, idle_timeout_s: float) -> float:
    """When a pause seen at ``seen_at`` stops being waited for: its expiry, but not before
    it was seen (a kernel's clock, or a replayed stream, may be behind ours) and not more
    than the bound after (``idle_timeout_s`` 0: no bound)."""
    kept = max(expires_at, seen_at)
    if idle_timeout_s <= 0:
        return kept
    return min(kept, seen_at + PAUSE_KEPT_IDLE_TIMEOUTS * idle_timeout_s)


def within_budget(keys: Iterator[str], budget_s: float, out: Collector) -> Iterator[str]:
    """``keys`` (a store's ``due``) until ``budget_s`` has passed since the first: a
    punctuation never holds the event loop long, and what it did not reach stays due for
    the next (counted in ``punctuations_cut_short``)."""
    stop_at = time.monotonic() + budget_s
    for key in keys:
        yield key
        if time.monotonic() >= stop_at:
            out.count("punctuations_cut_short")
            return


class ExpiringState(Generic[V]):
    """The state side of a processor with one store of keys that expire."""

    def __init__(self, store: StateStore[V], budget_s: float = 0.05) -> None:
        self.state = store
        self._budget_s = budget_s

    def deadline_of(self, value: V) -> float | None:
        """When ``value``'s key may be forgotten (None: not yet known)."""
        raise NotImplementedError

    @property
    def stores(self) -> tuple[StateStore[V], ...]:
        return (self.state,)

    def punctuate(self, now: float, out: Collector) -> None:
        """Forget every key whose deadline passed, for at most the time budget (what is
        left stays due: the next punctuation goes on)."""
        for key in within_budget(self.state.due(now), self._budget_s, out):
            self.state.delete(key)

    def restored(self) -> None:
        for key, value in self.state.items():
            deadline = self.deadline_of(value)
            if deadline is not None:
                self.state.schedule(key, deadline)

    def end_of_input(self, out: Collector) -> None:
        """Nothing held back."""

    @property
    def buffered_events(self) -> int:
        return 0

    @property
    def active_runs(self) -> int:
        return len(self.state)
