"""What the engine tells ``/healthz`` and ``/readyz``: progress, readiness, and why not.

The probe's answer names the reason at every moment (waiting for Kafka, rebalancing,
setting up partitions, a partition given back), so an operator looking at a pod that is
not ready knows what it waits for.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from symfonic_stream.kafka.retry import Attempt, error_text
from symfonic_stream.observability.health import HealthState
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger("symfonic_stream.engine.engine")


class Readiness:
    """The engine's side of the health state (or only the metric, without a server)."""

    def __init__(self, health: HealthState | None, metrics: ConsumerMetrics) -> None:
        self._health = health
        self._metrics = metrics
        #: The group assigned partitions (an empty assignment counts: a healthy standby).
        self.assigned = False
        #: A partition was given back (fenced producer); not ready until reassigned.
        self.dropped = False
        #: Why it is not ready when nothing more specific applies.
        self.reason = "starting"

    def progress(self) -> None:
        """The loop (or a restore, or a wait for Kafka) made progress: alive."""
        if self._health is not None:
            self._health.mark_progress()

    def set(self, ready: bool, reason: str) -> None:
        if self._health is None:
            self._metrics.set_ready(ready)
            return
        reason = "" if ready else reason
        if ready != self._health.ready or reason != self._health.reason:
            self._health.set_ready(ready, reason)

    def refresh(
        self, *, setting_up: Sequence[int], failing: Sequence[int] = (), stopping: bool
    ) -> None:
        """Ready: assigned, every assigned partition set up and consuming (an instance the
        group gave no partition is ready too: a healthy standby), none failing again and
        again with no record to blame. Else say why not."""
        if stopping:
            self.set(False, "shutting down")
        elif failing:
            self.set(False, f"partitions {sorted(failing)} keep failing and are backing off "
                            "(see the log: transaction aborted / processor failed)")
        elif self.dropped:
            self.set(False, "a partition was given back to the group (fenced or broken "
                            "producer); rejoining")
        elif self.assigned and setting_up:
            self.set(False, f"setting up partitions {sorted(setting_up)} (fencing, restoring "
                            "state, seeking)")
        else:
            self.set(self.assigned, self.reason)

    def waiting_for_kafka(self, attempt: Attempt) -> None:
        """One failed attempt to reach Kafka at start: alive, not ready, one log line."""
        self.progress()  # waiting is what it should be doing
        self.reason = f"waiting for Kafka: {attempt.describe()}"
        self.set(False, self.reason)
        log.warning("waiting for Kafka", extra={
            "step": attempt.what, "attempt": attempt.number, "error": error_text(attempt.error),
            "retry_in_s": round(attempt.retry_in_s, 1), "waited_s": round(attempt.waited_s, 1),
        })
