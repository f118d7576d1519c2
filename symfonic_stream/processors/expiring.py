"""A processor whose one state store forgets each key at a deadline derived from its value.

The pause router remembers a paused run until its grace after it closed; the resume
validator remembers a ticket until its expiry (or answer) plus the grace. Both are this:
a punctuation forgets what is due (a tombstone at the next commit), a restore schedules
each key again from its value, and nothing is held back to the end of an input.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from symfonic_stream.engine.records import Collector
from symfonic_stream.engine.store import StateStore

V = TypeVar("V")


class ExpiringState(Generic[V]):
    """The state side of a processor with one store of keys that expire."""

    def __init__(self, store: StateStore[V]) -> None:
        self.state = store

    def deadline_of(self, value: V) -> float | None:
        """When ``value``'s key may be forgotten (None: not yet known)."""
        raise NotImplementedError

    @property
    def stores(self) -> tuple[StateStore[V]]:
        return (self.state,)

    def punctuate(self, now: float, out: Collector) -> None:
        """Forget every key whose deadline passed."""
        for key in list(self.state.due(now)):
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
