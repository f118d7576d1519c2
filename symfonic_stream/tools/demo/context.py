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
from symfonic_stream.models.names import TopicNames


@dataclass(frozen=True, slots=True)
class DemoOptions:
    runs: int = 300
    seed: int = 7
    prefix: str | None = None
    max_events: int = 120
    #: The projectors' SYMFONIC_GAP_TIMEOUT_S, short so the demo's lost events show as gaps.
    gap_timeout_s: float = 3.0
    timeout_s: float = 300.0
    delete_topics: bool = False
    #: Leave the consumers running after the summary (to scrape /metrics) until Ctrl-C.
    keep_running: bool = False


@dataclass
class OutputStats:
    """What was read back from one output topic."""

    by_type: Counter[str] = field(default_factory=Counter)
    ended: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)


@dataclass
class DemoContext:
    options: DemoOptions
    settings: Settings
    console: Console
    consumers: list[str] = field(
        default_factory=lambda: ["typed", "chunks", "pauses", "resumes"]
    )
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="symfonic-demo-")))
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
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
    review_loop_closed: bool = False

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.settings.topic_prefix)

    @property
    def output_topics(self) -> dict[str, str]:
        """Output topic → consumer, for the projectors in this demo."""
        topics = {"typed": self.names.stream_events, "chunks": self.names.stream_chunks}
        return {topics[c]: c for c in self.consumers if c in topics}
