"""Output topics created the first time a consumer writes to them.

Most outputs exist before a consumer starts (``topics ensure``), and the engine checks
that they do. Per-tenant human queues cannot all be known ahead: a new tenant's first
ticket names a topic nobody created, and with ``auto.create.topics.enable=false`` the
transaction would fail at every retry. A topology names such topics with
``Topology.on_demand_topic``; before a transaction writes to one for the first time, the
engine creates it (idempotently: "already exists" is fine) with the spec given. This is
I/O, so it lives here at the edge, not in the processor that chose the topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector
from symfonic_stream.kafka.admin import ensure_topics
from symfonic_stream.kafka.specs import TopicSpec

log = logging.getLogger(__name__)


class OnDemandTopics:
    """Creates a topology's on-demand output topics once per process."""

    def __init__(self, settings: Settings, spec_for: Callable[[str], TopicSpec | None]) -> None:
        self._settings = settings
        self._spec_for = spec_for
        self._ready: set[str] = set()
        self._lock = asyncio.Lock()

    async def ensure(self, out: Collector) -> None:
        """Create every on-demand topic ``out`` writes to that this process has not yet."""
        wanted = {record.topic for record in out.outputs} - self._ready
        specs = [spec for topic in sorted(wanted) if (spec := self._spec_for(topic)) is not None]
        if not specs:
            self._ready.update(wanted)  # not on-demand topics: never asked again
            return
        async with self._lock:
            report = await ensure_topics(self._settings, specs)
            if report.created:
                log.info("created on-demand topics", extra={"topics": report.created})
            if not report.ok:
                # Exists with another shape: writing to it is still possible, so say so
                # and go on (``topics ensure`` reports the same mismatch).
                log.warning("on-demand topic differs from its spec",
                            extra={"mismatches": report.mismatches})
        self._ready.update(wanted)

