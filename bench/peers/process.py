"""A peer as a benchmark consumer process: its command line, and readiness by its group.

A peer has no health endpoint; it is ready when its consumer group is ``Stable`` with a
member (the group coordinator says so), which is what ``/readyz`` says of the project's
own consumers: partitions assigned. CPU, RSS and stopping are :class:`bench.consumers.Consumer`'s.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from bench.consumers import Consumer
from bench.peers.environment import quix_python
from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import admin_kwargs
from symfonic_stream.models.names import TopicNames

ROOT = Path(__file__).resolve().parents[2]
#: Peer rows: name → (program, its extra arguments). The name is the group's suffix.
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "naive-copier": ("naive", ("--copy",)),
    "naive-typed": ("naive", ()),
    "naive-typed-1p": ("naive", ("--one-producer",)),
    "quix": ("quix", ("--commit-interval", "5")),
    "quix-0.1s": ("quix", ("--commit-interval", "0.1")),
    "rdkafka-copier": ("rdkafka", ("--copy",)),
    "rdkafka-typed": ("rdkafka", ()),
}
#: The programs run in the peer environment, by path (the project is not installed there).
IN_PEER_ENV = {"quix": "quix_app.py", "rdkafka": "rdkafka_peer.py"}


class PeerConsumer(Consumer):
    """One peer process, writing to the prefix's stream-events topic."""

    def __init__(self, name: str, settings: Settings, log_dir: Path) -> None:
        super().__init__(name, settings, log_dir)
        program, extra = PEERS[name]
        names = TopicNames(settings.topic_prefix)
        self.group = names.group(name)
        self._settings = settings
        topics = ["--bootstrap", settings.bootstrap_servers, "--input", names.agent_events,
                  "--output", names.stream_events, "--group", self.group, *extra]
        if program == "naive":
            self.command = [sys.executable, "-m", "bench.peers.naive", *topics]
        else:
            script = ROOT / "bench" / "peers" / IN_PEER_ENV[program]
            self.command = [str(quix_python()), str(script), *topics]

    async def wait_ready(self, within: float = 120.0) -> float:
        admin = AIOKafkaAdminClient(**admin_kwargs(self._settings))
        await admin.start()
        try:
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                if not self.alive():
                    raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
                if await _stable(admin, self.group):
                    return time.monotonic()
                await asyncio.sleep(0.1)
        finally:
            await admin.close()
        raise RuntimeError(f"{self.name} not ready after {within}s:\n{self.log_tail()}")


async def _stable(admin: AIOKafkaAdminClient, group: str) -> bool:
    """The group is Stable and has a member (partitions assigned)."""
    for response in await admin.describe_consumer_groups([group]):
        for described in response.groups:
            error, _, state, _, _, members = described[:6]
            if error == 0 and state == "Stable" and members:
                return True
    return False


