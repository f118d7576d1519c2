"""How often one responder may send review requests (claims, releases, answers) through the
gateway: ``SYMFONIC_GATEWAY_REVIEW_REQUESTS_PER_MINUTE``, a token bucket per responder.

Each request is a write to resume-requests and a change of its ticket, which every console
stream of the tenant is sent; a claim renewed in a loop would also keep others from the
ticket. The bucket holds a minute's requests and refills at that rate, so a reviewer's
bursts pass and a loop is held to the rate.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

#: Past this many responders tracked, those whose bucket is full again are forgotten.
PRUNE_AT = 10_000


@dataclass(slots=True)
class PerMinute:
    """A token bucket per key: ``per_minute`` requests, refilled at that rate."""

    per_minute: int
    #: key -> (tokens left, when counted)
    _buckets: dict[Hashable, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: Hashable, now: float) -> float | None:
        """Take one request for ``key`` at ``now`` (monotonic seconds): None when it may be
        sent, else how many seconds until it may."""
        rate = self.per_minute / 60.0
        tokens = self._level(key, now)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / rate
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > PRUNE_AT:
            self._prune(now)
        return None

    def _level(self, key: Hashable, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)

    def _prune(self, now: float) -> None:
        full = [key for key in self._buckets if self._level(key, now) >= self.per_minute]
        for key in full:
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)


def rate_limited(per_minute: int) -> str:
    """What a refused request is told."""
    return (f"more than SYMFONIC_GATEWAY_REVIEW_REQUESTS_PER_MINUTE={per_minute} review "
            "requests of this responder: wait for Retry-After")
