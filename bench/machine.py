"""Where a run ran: the machine and the broker, recorded with every result."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil


def broker_version(bootstrap: str | None = None) -> str:
    """From ``scripts/kafka.sh status`` when the project's broker runs, else unknown;
    ``bootstrap`` (``host:port``) names the port it is asked about (default: its own)."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "kafka.sh"
    if not script.exists():
        return "unknown"
    env = dict(os.environ)
    port = (bootstrap or "").split(",")[0].rpartition(":")[2]
    if port.isdigit() and "SYMFONIC_KAFKA_PORT" not in env:
        env["SYMFONIC_KAFKA_PORT"] = port
    try:
        done = subprocess.run(
            [str(script), "status"], capture_output=True, text=True, timeout=30, check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for word in (done.stdout + done.stderr).replace(",", " ").split():
        if word[:1].isdigit() and word.count(".") == 2 and "Kafka" in done.stdout + done.stderr:
            return word
    return "unknown"


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process) since boot."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


class BrokerCpu:
    """CPU seconds of the broker process serving ``bootstrap``, when it runs on this machine
    (the broker shares the cores with the consumers: its share is part of every result)."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self._process: psutil.Process | None = None
        if host not in ("127.0.0.1", "localhost", "::1", "") or not port.isdigit():
            return
        try:
            for conn in psutil.net_connections(kind="tcp"):
                if (conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port
                        == int(port) and conn.pid is not None):
                    self._process = psutil.Process(conn.pid)
                    return
        except (psutil.Error, OSError):  # not allowed to see other processes' sockets
            self._process = None

    def seconds(self) -> float | None:
        """The broker's user + system CPU seconds so far; None when it is not found here."""
        if self._process is None:
            return None
        try:
            times = self._process.cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

