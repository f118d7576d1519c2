"""The processes a benchmark starts, and which of the project's consumers it measures.

A consumer runs as deployed: its own process (``python -m symfonic_stream run <name>``),
configured only by ``SYMFONIC_*`` variables, metrics and health on a free port; a peer or
the gateway is such a process with its own command line. The consumers measured, their
outputs and the baseline come from the declarations (:mod:`symfonic_stream.consumers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

import psutil
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bench.harness import ROOT
from bench.kafka_io import until
from symfonic_stream.app.topologies import topologies
from symfonic_stream.config import Settings
from symfonic_stream.consumers import engines, registered
from symfonic_stream.consumers.copier import COPIER
from symfonic_stream.kafka.clients import admin_kwargs
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import AGENT_EVENTS
from symfonic_stream.runtime.workers import free_port

if TYPE_CHECKING:  # (its server costs a fresh interpreter measuring memory 20 MiB)
    from symfonic_stream.gateway.server import Gateway

#: The row every other row's figures are divided by: the engine's cost alone.
BASELINE = COPIER.name


def bench_consumers() -> tuple[str, ...]:
    """The consumers ``run`` starts on the raw topic alone, the baseline first (read from
    the registry when called: a consumer declared there is measured too)."""
    raw = [c.name for c in registered() if all(e.reads is AGENT_EVENTS for e in c.engines)]
    return (BASELINE, *(name for name in raw if name != BASELINE))


def outputs(consumer: str, settings: Settings) -> list[str]:
    """What ``consumer`` writes that no engine reads: where its output leaves the consumers
    (the pause router's tickets, not its registrations with the validator)."""
    read = {engine.reads.name(TopicNames(settings.topic_prefix)) for engine in engines()}
    return [topic for topology in topologies(consumer, settings)
            for topic in topology.output_topics if topic not in read]


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a table: the processes it runs at once, the groups they commit as, and
    where its outputs land."""

    name: str
    groups: tuple[str, ...]
    #: Its processes (default: ``run <group>`` for each group).
    start: Callable[[Settings, Path], list[Process]] | None = None
    #: Where its outputs land (default: its consumers' :func:`outputs`).
    outputs: Callable[[Settings], list[str]] | None = None
    #: Its groups are another row's: it needs an input of its own, published again.
    own_input: bool = False

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9-]", "-", self.name)

    def processes(self, settings: Settings, log_dir: Path) -> list[Process]:
        if self.start is not None:
            return self.start(settings, log_dir)
        return [Process(group, settings, log_dir) for group in self.groups]

    def topics(self, settings: Settings) -> list[str]:
        if self.outputs is not None:
            return self.outputs(settings)
        return [topic for group in self.groups for topic in outputs(group, settings)]


def _cpu_seconds(proc: psutil.Process) -> float:
    """CPU seconds of ``proc``'s live threads, to the nanosecond from Linux's schedstat
    where it has one: psutil's user + system time moves in 10 ms clock ticks, and a smoke
    run's whole window can fall between two."""
    tasks, total_ns = Path(f"/proc/{proc.pid}/task"), 0
    if tasks.is_dir():
        for task in tasks.iterdir():
            with contextlib.suppress(OSError):  # a thread that just ended
                total_ns += int((task / "schedstat").read_text().split()[0])
    if total_ns:
        return total_ns / 1e9
    times = proc.cpu_times()
    return float(times.user + times.system)


class Process:
    """One process of a row: ``run <name>`` unless ``command`` says otherwise; ``name`` is
    its group's suffix and its log's name."""

    def __init__(self, name: str, settings: Settings, log_dir: Path,
                 command: list[str] | None = None) -> None:
        self.name = name
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
        self.env.update(
            SYMFONIC_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
            SYMFONIC_SECURITY_PROTOCOL=settings.security_protocol,
            SYMFONIC_TOPIC_PREFIX=settings.topic_prefix,
            SYMFONIC_PARTITIONS=str(settings.partitions),
            SYMFONIC_METRICS_PORT=str(self.port),
            SYMFONIC_LOG_LEVEL="WARNING")
        # Security and engine settings the benchmark was started with carry over unchanged.
        for setting in ("SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD", "SSL_CAFILE",
                        "SSL_CERTFILE", "SSL_KEYFILE", "BATCH_MAX_RECORDS",
                        "BATCH_MAX_LATENCY_MS", "GROUP_OFFSET_INTERVAL_MS", "EVENT_LOOP",
                        "COMPRESSION"):
            if f"SYMFONIC_{setting}" in os.environ:
                self.env[f"SYMFONIC_{setting}"] = os.environ[f"SYMFONIC_{setting}"]
        self.log_path = log_dir / f"{settings.topic_prefix}-{name}.log"
        self.command = command or [sys.executable, "-m", "symfonic_stream", "run", name]
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss = 0

    def start(self) -> Self:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=log)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except (urllib.error.URLError, OSError):
            return 0, b""

    def ready(self) -> bool:
        return self._get("/readyz")[0] == 200

    async def wait_ready(self, within: float = 120.0) -> float:
        """Until it says it is ready; the monotonic time it did."""
        async def ready() -> bool:
            self.check_alive()
            return await asyncio.to_thread(self.ready)

        if not await until(ready, within):
            raise RuntimeError(f"{self.name} not ready after {within}s:\n{self.log_tail()}")
        return time.monotonic()

    def samples(self) -> Iterator[Sample]:
        """Every sample of its ``/metrics`` now (none when it does not answer)."""
        status, body = self._get("/metrics")
        if status == 200:
            for family in text_string_to_metric_families(body.decode()):
                yield from family.samples

    def metric(self, name: str, **labels: str) -> float:
        """The sum of its samples called ``name`` with exactly ``labels`` (any, if none)."""
        return sum(s.value for s in self.samples()
                   if s.name == name and (not labels or s.labels == labels))

    def histograms(self) -> dict[str, dict[str, float]]:
        """Its latency histograms: per family, count, sum and cumulative buckets (``le``)."""
        wanted = {"symfonic_stream_end_to_end_latency_seconds": "end_to_end",
                  "symfonic_stream_transaction_duration_seconds": "transaction"}
        found: dict[str, dict[str, float]] = {}
        for sample in self.samples():
            family, _, part = sample.name.rpartition("_")
            if family in wanted and part in ("bucket", "count", "sum"):
                entry = found.setdefault(wanted[family], {})
                key = sample.labels["le"] if part == "bucket" else part
                entry[key] = entry.get(key, 0.0) + sample.value
        return found

    def engine_time(self) -> dict[str, float]:
        """Seconds per commit step and per consume-loop activity, and transactions by
        outcome (``commit.<step>``, ``loop.<activity>``, ``transactions.<outcome>``)."""
        wanted = {"symfonic_stream_commit_step_seconds_total": ("commit", "step"),
                  "symfonic_stream_loop_seconds_total": ("loop", "activity"),
                  "symfonic_stream_transactions_total": ("transactions", "outcome")}
        found: dict[str, float] = {}
        for sample in self.samples():
            if sample.name in wanted:
                head, label = wanted[sample.name]
                name = f"{head}.{sample.labels[label]}"
                found[name] = found.get(name, 0.0) + sample.value
        return found

    def cpu_seconds(self) -> float:
        """CPU seconds of the process and of its live children (``run --workers N``)."""
        main = psutil.Process(self.pid)
        total = 0.0
        for proc in (main, *main.children(recursive=True)):
            with contextlib.suppress(psutil.Error, OSError):  # a child that just exited
                total += _cpu_seconds(proc)
        return total

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    def sample_rss(self) -> int:
        """Peak RSS so far: ``VmHWM`` on Linux, else the highest sample seen."""
        peak = 0
        with contextlib.suppress(OSError), open(f"/proc/{self.pid}/status") as status:
            peak = next((int(line.split()[1]) * 1024 for line in status
                         if line.startswith("VmHWM:")), 0)
        self.peak_rss = max(self.peak_rss, peak or self.rss())
        return self.peak_rss

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, within: float = 30.0) -> None:
        """SIGTERM (graceful: leaves the group, closes the producers), SIGKILL if stuck."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(within)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)


#: The Quix Streams version the comparison measures, in an environment of its own made on
#: first use (``build/bench-peers``, from the package index pip is configured with): Quix
#: Streams 3.28 requires ``pydantic<2.14`` and ``pydantic-settings<2.16``, older than this
#: project's. Not a dependency of the project.
QUIX_VERSION = "3.28.1"
PEER_ENV = ROOT / "build" / "bench-peers"


def quix_python() -> Path:
    """The peer environment's interpreter, with Quix Streams installed."""
    python = PEER_ENV / "bin" / "python"

    def has_quix() -> bool:
        probe = subprocess.run(
            [str(python), "-c", "import quixstreams; print(quixstreams.__version__)"],
            capture_output=True, text=True)
        return probe.returncode == 0 and probe.stdout.strip() == QUIX_VERSION

    if not (python.exists() and has_quix()):
        subprocess.run([sys.executable, "-m", "venv", str(PEER_ENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        f"quixstreams=={QUIX_VERSION}"], check=True)
        if not has_quix():
            raise RuntimeError(f"quixstreams {QUIX_VERSION} did not install into {PEER_ENV}")
    return python


class PeerProcess(Process):
    """A peer (``bench/peers/``) reading the prefix's raw topic into its stream-events
    topic. It has no health endpoint: it is ready when its group is ``Stable`` with a member
    (partitions assigned), which is what ``/readyz`` says of the project's consumers."""

    def __init__(self, name: str, settings: Settings, log_dir: Path, program: str,
                 extra: tuple[str, ...]) -> None:
        names = TopicNames(settings.topic_prefix)
        self.group = names.group(name)
        self._settings = settings
        args = ["--bootstrap", settings.bootstrap_servers, "--input", names.agent_events,
                "--output", names.stream_events, "--group", self.group, *extra]
        command = ([sys.executable, "-m", "bench.peers.naive", *args] if program == "naive"
                   # (the project is not installed in the peer environment: by path)
                   else [str(quix_python()), str(ROOT / "bench" / "peers" / "peer_env.py"),
                         program, *args])
        super().__init__(name, settings, log_dir, command)

    async def wait_ready(self, within: float = 120.0) -> float:
        admin = AIOKafkaAdminClient(**admin_kwargs(self._settings))
        await admin.start()

        async def stable() -> bool:
            self.check_alive()
            return any(error == 0 and state == "Stable" and members
                       for response in await admin.describe_consumer_groups([self.group])
                       for error, _, state, _, _, members, *_ in response.groups)

        try:
            if not await until(stable, within, every=0.1):
                raise RuntimeError(f"{self.name} not ready after {within}s:\n{self.log_tail()}")
        finally:
            await admin.close()
        return time.monotonic()


class GatewayProcess(Process):
    """``symfonic-stream gateway`` in its own process (metrics and probes on ``port``, SSE
    on ``http_port``)."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        super().__init__("gateway", settings, log_dir,
                         [sys.executable, "-m", "symfonic_stream", "gateway"])
        self.http_port = free_port()
        self.env.update(SYMFONIC_GATEWAY_PORT=str(self.http_port),
                        SYMFONIC_GATEWAY_HOST="127.0.0.1", SYMFONIC_GATEWAY_RUN_WAIT_S="120")


@contextlib.asynccontextmanager
async def serving_gateway(settings: Settings) -> AsyncIterator[Gateway]:
    """A gateway in this process, serving once both tails have read their window to the
    end (``/readyz`` says so within ``REFRESH_S`` of it); stopped and closed after."""
    from symfonic_stream.gateway.server import Gateway

    gateway = Gateway(settings)
    await gateway.start()
    task = asyncio.create_task(gateway.serve())
    try:
        async with asyncio.timeout(600):
            for tail in gateway.tails.values():
                await tail.caught_up.wait()
        yield gateway
    finally:
        gateway.stop()
        await task
        await gateway.close()
