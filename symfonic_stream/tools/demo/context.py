"""What one demo run knows: its options, settings, processes and what it read back.

Shared by the demo's steps (:mod:`.run`), its pause answering (:mod:`.pauses`) and its
report (:mod:`.report`).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from symfonic_stream.config import Settings
from symfonic_stream.consumers import consumer, deployed_names
from symfonic_stream.models.names import TopicNames
from symfonic_stream.projections.declared import PROJECTIONS


@dataclass(frozen=True, slots=True)
class DemoOptions:
    runs: int = 300
    seed: int = 7
    prefix: str | None = None
    max_events: int = 120
    #: The projectors' SYMFONIC_GAP_TIMEOUT_S, short so the demo's lost events show as gaps.
    gap_timeout_s: float = 3.0
    timeout_s: float = 300.0
    #: Events published per second: paced, so that the steady-state latency is not the
    #: backlog of a burst faster than the consumers.
    rate: float = 1000.0
    #: Records of events published this soon after the first are the start-up's.
    startup_s: float = 2.0
    #: Leave the demo's topics behind (it deletes them at the end otherwise).
    keep_topics: bool = False
    #: Leave the consumers and the gateway running after the summary, until Ctrl-C.
    keep_running: bool = False


#: What an output record's latency says, by where its event was: published in the first
#: ``startup_s`` (consumers' first fetches and transactions), held behind a lost event
#: until the gap timeout (published before its run's gap was written), or neither (steady).
PHASES = ("steady", "start-up", "behind a gap")


@dataclass
class OutputStats:
    """What was read back from one output topic."""

    by_type: Counter[str] = field(default_factory=Counter)
    ended: set[str] = field(default_factory=set)
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {phase: [] for phase in PHASES})
    #: Run id → when its gap record was read back (events published later were not held).
    gaps_read: dict[str, float] = field(default_factory=dict)


@dataclass
class DemoContext:
    options: DemoOptions
    settings: Settings
    console: Console
    consumers: list[str] = field(default_factory=lambda: list(deployed_names()))
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="symfonic-demo-")))
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    #: The index each damaged run lost (its later events wait for the gap timeout).
    lost: dict[str, int] = field(default_factory=dict)
    #: Wall-clock time the first event was published.
    published_from: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, OutputStats] = field(default_factory=dict)
    dead_letters: Counter[str] = field(default_factory=Counter)
    metrics: dict[str, str] = field(default_factory=dict)
    bad_published: int = 0
    complete: bool = False
    #: The gateway's port and HS256 key (None: it did not start), and whether a pause was
    #: answered through its console and the run then finished (:mod:`.review`).
    gateway_port: int | None = None
    gateway_key: str | None = None
    #: The gateway's page for a run and its review console, with a reviewer's token.
    gateway_urls: list[str] = field(default_factory=list)
    review_loop_closed: bool = False
    #: The run the demo rendered (the closing names it for `tail`).
    rendered_run: str | None = None

    def phase(self, envelope: dict[str, Any], stats: OutputStats) -> str:
        """Which of :data:`PHASES` an output envelope (read back into ``stats``) is in."""
        run_id, index, ts = envelope["run_id"], envelope.get("source_index"), envelope["ts"]
        lost = self.lost.get(run_id)
        held = lost is not None and index is not None and index > lost
        if held and ts < stats.gaps_read.get(run_id, float("inf")):
            return "behind a gap"
        if ts < self.published_from + self.options.startup_s:
            return "start-up"
        return "steady"

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.settings.topic_prefix)

    @property
    def output_topics(self) -> dict[str, str]:
        """Output topic → consumer: the run streams (what the gateway serves) that the
        consumers of this demo write."""
        streams = {projection.topic.id for projection in PROJECTIONS.values()}
        return {write.topic.name(self.names): name for name in self.consumers
                for engine in consumer(name).engines for write in engine.writes
                if write.topic.id in streams}
