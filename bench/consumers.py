"""Consumer subprocesses (``python -m symfonic_stream run <name>``) and what they cost.

Each consumer runs exactly as deployed: its own process, configured only by ``SYMFONIC_*``
variables, its metrics and health server on a free port. CPU time and peak RSS are read
with psutil (and ``/proc/<pid>/status``'s ``VmHWM`` where Linux has it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from symfonic_stream.config import Settings
from symfonic_stream.runtime.workers import free_port

#: The benchmark's consumers: ``symfonic-stream run`` name → its consumer group suffix.
GROUP_SUFFIX = {"copier": "copier", "typed": "typed", "chunks": "chunks", "pauses": "pauses"}


def consumer_env(settings: Settings, port: int) -> dict[str, str]:
    """The parent's environment without its ``SYMFONIC_*``, plus the benchmark's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env.update(
        SYMFONIC_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
        SYMFONIC_SECURITY_PROTOCOL=settings.security_protocol,
        SYMFONIC_TOPIC_PREFIX=settings.topic_prefix,
        SYMFONIC_PARTITIONS=str(settings.partitions),
        SYMFONIC_METRICS_PORT=str(port),
        SYMFONIC_LOG_LEVEL="WARNING",
    )
    # Security and engine settings the benchmark was started with carry over unchanged.
    for name in ("SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD", "SSL_CAFILE",
                 "SSL_CERTFILE", "SSL_KEYFILE", "BATCH_MAX_RECORDS", "BATCH_MAX_LATENCY_MS",
                 "GROUP_OFFSET_INTERVAL_MS", "EVENT_LOOP",
                 "COMPRESSION"):
        value = os.environ.get(f"SYMFONIC_{name}")
        if value is not None:
            env[f"SYMFONIC_{name}"] = value
    return env


def _cpu_seconds(proc: psutil.Process) -> float:
    """CPU seconds of ``proc``'s live threads, to the nanosecond from Linux's schedstat
    where it has one: psutil's user + system time moves in 10 ms clock ticks, and a smoke
    run's whole window can fall between two."""
    tasks = Path(f"/proc/{proc.pid}/task")
    if tasks.is_dir():
        total_ns = 0
        for task in tasks.iterdir():
            with contextlib.suppress(OSError):  # a thread that just ended
                total_ns += int((task / "schedstat").read_text().split()[0])
        if total_ns:
            return total_ns / 1e9
    times = proc.cpu_times()
    return float(times.user + times.system)


class Consumer:
    """One consumer process."""

    def __init__(self, name: str, settings: Settings, log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.env = consumer_env(settings, self.port)
        self.log_path = log_dir / f"{settings.topic_prefix}-{name}.log"
        self.command = [sys.executable, "-m", "symfonic_stream", "run", name]
        self.proc: subprocess.Popen[bytes] | None = None
        self._ps: psutil.Process | None = None
        self.peak_rss = 0

    def start(self) -> Consumer:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=log,
            )
        self._ps = psutil.Process(self.proc.pid)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

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
        """Wait for ``/readyz``; returns the monotonic time it answered 200."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            if await asyncio.to_thread(self.ready):
                return time.monotonic()
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready after {within}s:\n{self.log_tail()}")

    def histograms(self) -> dict[str, dict[str, float]]:
        """The process's latency histograms from ``/metrics``: per family, its count, sum
        and cumulative bucket counts (``le`` → count)."""
        status, body = self._get("/metrics")
        if status != 200:
            return {}
        wanted = {
            "symfonic_stream_end_to_end_latency_seconds": "end_to_end",
            "symfonic_stream_transaction_duration_seconds": "transaction",
        }
        found: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(body.decode()):
            short = wanted.get(family.name)
            if short is None:
                continue
            entry = found.setdefault(short, {})
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    entry[sample.labels["le"]] = entry.get(sample.labels["le"], 0.0) + sample.value
                elif sample.name.endswith("_count"):
                    entry["count"] = entry.get("count", 0.0) + sample.value
                elif sample.name.endswith("_sum"):
                    entry["sum"] = entry.get("sum", 0.0) + sample.value
        return found

    def engine_time(self) -> dict[str, float]:
        """Seconds per commit step and per consume-loop activity, from ``/metrics``
        (``commit.<step>``, ``loop.<activity>``); empty for a process without them."""
        status, body = self._get("/metrics")
        if status != 200:
            return {}
        wanted = {"symfonic_stream_commit_step_seconds": ("commit", "step"),
                  "symfonic_stream_loop_seconds": ("loop", "activity"),
                  "symfonic_stream_transactions": ("transactions", "outcome")}
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            if family.name not in wanted:
                continue
            head, label = wanted[family.name]
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    name = f"{head}.{sample.labels[label]}"
                    found[name] = found.get(name, 0.0) + sample.value
        return found

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the process and of its live children (the
        workers of ``run --workers N``) so far."""
        assert self._ps is not None
        total = 0.0
        for proc in (self._ps, *self._ps.children(recursive=True)):
            try:
                total += _cpu_seconds(proc)
            except (psutil.Error, OSError):  # a child that just exited
                continue
        return total

    def sample_rss(self) -> int:
        """Peak RSS so far: ``VmHWM`` on Linux, else the highest sample seen."""
        assert self._ps is not None
        peak = 0
        try:
            with open(f"/proc/{self.pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
        if not peak:
            peak = int(self._ps.memory_info().rss)
        self.peak_rss = max(self.peak_rss, peak)
        return self.peak_rss

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, within: float = 30.0) -> int | None:
        """SIGTERM (graceful: leaves the group, closes the producers), SIGKILL if stuck."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(within)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode
