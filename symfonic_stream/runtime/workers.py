"""``run <consumer> --workers N``: a supervisor of N worker processes of one consumer.

One consumer process is one event loop, so at most one core. With ``SYMFONIC_WORKERS`` N
above 1, ``run`` becomes this supervisor: it starts N copies of itself as
``python -m symfonic_stream run <consumer>`` with the same environment plus

* ``SYMFONIC_WORKERS=1`` (a worker is the ordinary one-process consumer),
* ``SYMFONIC_WORKER_INDEX=<i>`` (its lines in the log say ``"worker": i``; its server
  binds 127.0.0.1 only),
* ``SYMFONIC_METRICS_PORT``: a free port of 127.0.0.1 of its own (``0``, no server, when
  the supervisor's is off).

They join the consumer's group like any other instances, so the group splits the
partitions between them; each has its own transactional producers (one per input
partition it owns), so nothing changes about exactly-once. The supervisor serves one
``/metrics`` (its workers', merged, each sample labelled ``worker``), ``/healthz`` and
``/readyz`` on ``SYMFONIC_METRICS_PORT`` (``symfonic_stream.observability.aggregate``).

SIGTERM or SIGINT is passed on to every worker, each shuts down gracefully (commits, leaves
the group); after ``SYMFONIC_SHUTDOWN_TIMEOUT_S`` plus :data:`SHUTDOWN_MARGIN_S` the ones
left are killed. The exit status is 0 when every worker exited 0. A worker that exits on
its own (a crash, or it could not start) stops the others and the supervisor exits 1: a
half-running pod is worse than a restarted one. On Linux a worker also gets SIGTERM
when the supervisor dies (``PR_SET_PDEATHSIG``), so a killed supervisor leaves no orphans.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from symfonic_stream.config import ENV_PREFIX, ConfigError, Settings, binding
from symfonic_stream.observability.aggregate import (
    WorkerAnswer,
    combine,
    http_get,
    merge_expositions,
    parse_expositions,
)
from symfonic_stream.observability.health import server_port, start_probe_server
from symfonic_stream.observability.metrics import SupervisorMetrics

log = logging.getLogger(__name__)

WORKER_INDEX_ENV: Final = ENV_PREFIX + "WORKER_INDEX"
MAX_WORKERS: Final = 64
#: The supervisor waits this much longer than a worker's own shutdown bound before SIGKILL.
SHUTDOWN_MARGIN_S: Final = 10.0
#: How long a worker may take to answer one probe or scrape of the supervisor's.
PROBE_TIMEOUT_S: Final = 3.0
EXIT_FAILURE: Final = 1
_PR_SET_PDEATHSIG: Final = 1

#: argv of worker ``index``'s process (tests start something else).
Command = Callable[[int], Sequence[str]]


def worker_index(environ: Mapping[str, str] = os.environ) -> int | None:
    """This process's index as a worker of a supervisor (``SYMFONIC_WORKER_INDEX``), or
    None when it is no worker; a malformed value is a :class:`ConfigError`."""
    raw = environ.get(WORKER_INDEX_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) >= MAX_WORKERS:
        raise ConfigError(f"invalid configuration: {WORKER_INDEX_ENV}={raw!r}: "
                          f"expected a worker index, 0 to {MAX_WORKERS - 1}")
    return int(raw)


def worker_env(base: Mapping[str, str], index: int, port: int) -> dict[str, str]:
    """Worker ``index``'s environment: ``base`` plus what makes it that worker."""
    return {
        **base,
        ENV_PREFIX + "WORKERS": "1",
        WORKER_INDEX_ENV: str(index),
        ENV_PREFIX + "METRICS_PORT": str(port),
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A port of ``host`` nobody listens on now (the worker binds it a moment later; one
    taken meanwhile makes that worker fail to start, and the supervisor exit 1)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def consumer_command(consumer: str) -> Command:
    """Run ``consumer`` with this interpreter, as ``symfonic-stream run`` does."""
    return lambda index: (sys.executable, "-m", "symfonic_stream", "run", consumer)


def _die_with_parent() -> None:
    """In the worker, before exec: SIGTERM when the supervisor dies (Linux only)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


# Loaded here, not in the forked child: the child only calls it.
_LIBC = ctypes.CDLL(None) if sys.platform == "linux" else None


@dataclass(slots=True)
class Worker:
    """One worker process and the private port of its server (0: none)."""

    index: int
    port: int
    process: asyncio.subprocess.Process

    @property
    def exit_status(self) -> int | None:
        return self.process.returncode

    def signal(self, sig: signal.Signals) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    async def answer(self, path: str) -> WorkerAnswer:
        """Its answer to a probe of ``path`` (an exited worker is not asked)."""
        if self.exit_status is not None:
            return WorkerAnswer(self.index, self.exit_status, 0, "")
        status, body = await http_get(self.port, path, timeout_s=PROBE_TIMEOUT_S)
        return WorkerAnswer(self.index, self.exit_status, status,
                            body.decode("utf-8", "replace"))


class Supervisor:
    """Starts the workers, serves their combined endpoints, passes signals on, and stops
    them all when one ends."""

    def __init__(
        self, consumer: str, settings: Settings, command: Command | None = None
    ) -> None:
        self.consumer = consumer
        self.settings = settings
        self.count = settings.workers
        self._command = command or consumer_command(consumer)
        self._metrics = SupervisorMetrics(consumer, self.count)
        self._stopping = asyncio.Event()
        self._signalled = False
        self.workers: list[Worker] = []
        self.port: int | None = None  # the supervisor's server's, once it listens

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """The signal handler: shut every worker down gracefully with ``sig`` (again on
        every signal)."""
        log.info("shutting down the workers", extra={"signal": sig.name})
        self._signalled = True
        self._stop_all(sig)

    def _stop_all(self, sig: signal.Signals) -> None:
        self._stopping.set()
        for worker in self.workers:
            worker.signal(sig)

    async def run(self) -> int:
        """Until every worker exited; the exit status."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        for sig in signals:
            loop.add_signal_handler(sig, self.stop, sig)
        server = None
        try:
            port = self.settings.metrics_port_or_default
            if port:
                with binding("METRICS_PORT", port, off="serves no metrics"):
                    server = await start_probe_server(port, self)
                self.port = server_port(server)
            try:
                await self._spawn_all()
            except OSError as exc:
                log.error("cannot start a worker", extra={"error": str(exc)})
                self._stop_all(signal.SIGTERM)
                await self._reap(self._shutdown_bound_s)
                return EXIT_FAILURE
            return await self._watch()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await self._reap(timeout_s=0)  # only when cut short: nothing outlives us
            if server is not None:
                server.close()
                with contextlib.suppress(Exception):
                    await server.wait_closed()

    @property
    def _shutdown_bound_s(self) -> float:
        return self.settings.shutdown_timeout_s + SHUTDOWN_MARGIN_S

    async def _spawn_all(self) -> None:
        with_server = bool(self.settings.metrics_port_or_default)
        for index in range(self.count):
            if self._stopping.is_set():
                return
            port = free_port() if with_server else 0
            process = await asyncio.create_subprocess_exec(
                *self._command(index),
                env=worker_env(os.environ, index, port),
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if _LIBC is not None else None,
            )
            worker = Worker(index, port, process)
            self.workers.append(worker)
            log.info("worker started", extra={"worker": index, "pid": process.pid,
                                               "port": port})
            if self._stopping.is_set():  # a signal came while it was being started
                worker.signal(signal.SIGTERM)

    async def _watch(self) -> int:
        """Until a signal or a worker exiting on its own; then until all exited."""
        exits = {asyncio.create_task(w.process.wait()): w for w in self.workers}
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            done, _ = await asyncio.wait({*exits, stopping},
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        crashed = not self._signalled
        if crashed:
            for worker in (exits[task] for task in done if task in exits):
                log.error("worker exited on its own; stopping the others", extra={
                    "worker": worker.index, "status": worker.exit_status})
            self._stop_all(signal.SIGTERM)
        try:
            statuses = await self._reap(self._shutdown_bound_s)
        finally:
            for task in exits:
                task.cancel()
        return EXIT_FAILURE if crashed or any(statuses) else 0

    async def _reap(self, timeout_s: float) -> list[int]:
        """Every worker's exit status, killing those still running after ``timeout_s``."""
        running = [w for w in self.workers if w.exit_status is None]
        if running and timeout_s > 0:
            waits = [asyncio.create_task(w.process.wait()) for w in running]
            _, pending = await asyncio.wait(waits, timeout=timeout_s)
            for task in pending:
                task.cancel()
        for worker in self.workers:
            if worker.exit_status is None:
                log.error("worker did not stop in time; killed", extra={
                    "worker": worker.index, "pid": worker.process.pid})
                worker.signal(signal.SIGKILL)
                await worker.process.wait()
        return [EXIT_FAILURE if w.exit_status is None else w.exit_status
                for w in self.workers]

    # -- the endpoints (symfonic_stream.observability.health.Probes) -----------------------

    async def metrics(self) -> bytes:
        answers = await asyncio.gather(*(w.answer("/metrics") for w in self.workers))
        parsed = parse_expositions(
            {str(a.worker): a.body for a in answers if a.status == 200})
        self._metrics.set_up(len(parsed))
        return merge_expositions(parsed, own=self._metrics.registry.collect())

    async def liveness(self) -> tuple[bool, str]:
        return await self._combined("/healthz")

    async def readiness(self) -> tuple[bool, str]:
        if self._stopping.is_set():
            return False, "shutting down"
        return await self._combined("/readyz")

    async def _combined(self, path: str) -> tuple[bool, str]:
        """Every worker's answer to ``path``, combined; not yet while some are starting."""
        answers = await asyncio.gather(*(w.answer(path) for w in self.workers))
        if len(answers) < self.count:
            return False, f"starting workers ({len(answers)} of {self.count})"
        return combine(answers)


async def supervise(consumer: str, settings: Settings) -> int:
    """Run ``consumer`` as ``settings.workers`` worker processes; the exit status."""
    return await Supervisor(consumer, settings).run()
