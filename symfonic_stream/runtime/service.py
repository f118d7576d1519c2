"""Running a consumer as a process: metrics and health server, signals, its engines.

``symfonic-stream run <name>`` builds the consumer's
:class:`~symfonic_stream.engine.topology.Topology` s (``symfonic_stream.app.topologies``;
the resume validator has two, its intake and itself) and calls :func:`serve`: one engine
per topology on one event loop, one metrics registry (series told apart by their
``consumer`` label), ready only when every engine is. Logging is configured by the
command before this runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence

from symfonic_stream import native
from symfonic_stream.config import Settings, binding
from symfonic_stream.engine.engine import Engine, EngineError
from symfonic_stream.engine.topology import Topology
from symfonic_stream.models.decoding import JSON_SCANNER
from symfonic_stream.observability import tracing
from symfonic_stream.observability.health import (
    DEFAULT_STALE_AFTER_S,
    HealthOfMany,
    HealthState,
    start_configured_health_server,
)
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

#: Exit status when the consumer cannot start or crashed (configuration errors exit 2
#: before anything runs; see ``symfonic_stream.cli.run``).
EXIT_FAILURE = 1


async def serve(
    topologies: Sequence[Topology], settings: Settings, *, host: str = "0.0.0.0"
) -> int:
    """Run ``topologies`` (one engine each, in this process) until SIGTERM/SIGINT, or until
    one of them stops (then the others are stopped too); returns the exit status. The
    metrics and health server binds ``host`` (a worker of ``run --workers N``: 127.0.0.1,
    its supervisor asks it there), before anything connects to Kafka: a port in use raises
    :class:`~symfonic_stream.config.PortInUse` with nothing left open."""
    # A commit may legitimately wait up to the transaction timeout: liveness must not
    # restart a pod that is slow but still making progress.
    stale_after = max(DEFAULT_STALE_AFTER_S, 2 * settings.transaction_timeout_ms / 1000)
    engines, parts = [], []
    for topology in topologies:
        metrics = ConsumerMetrics(topology.consumer)
        health = HealthState(stale_after, metrics=metrics)
        engines.append(Engine(topology, settings, metrics, health))
        parts.append((topology.consumer, health))
    health_view = parts[0][1] if len(parts) == 1 else HealthOfMany(parts)
    port = settings.metrics_port_or_default
    with binding("METRICS_PORT", port, off="serves no metrics"):
        server = await start_configured_health_server(
            port, engines[0].metrics.registry, health_view, host)
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, _Stop(engines, sig))
    native.warn_if_missing(log)
    log.info("serving", extra={"consumers": [t.consumer for t in topologies],
                               "event_loop": type(loop).__module__.partition(".")[0],
                               "json_scanner": JSON_SCANNER})
    try:
        runs = [asyncio.create_task(_run(engine, engines)) for engine in engines]
        return max(await asyncio.gather(*runs))
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        tracing.shutdown()  # (when on: every span ended so far exported)
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()


async def _run(engine: Engine, engines: Sequence[Engine]) -> int:
    """One engine's exit status; when it ends, for whatever reason, the others stop: a
    process half-running is worse than one restarted."""
    try:
        return await engine.run()
    except EngineError as exc:
        log.error("consumer cannot start", extra={"consumer": engine.topology.consumer,
                                                  "error": str(exc)})
        return EXIT_FAILURE
    except Exception:
        log.exception("consumer crashed", extra={"consumer": engine.topology.consumer})
        return EXIT_FAILURE
    finally:
        for other in engines:
            other.stop()


class _Stop:
    """The signal handler: the first signal stops gracefully (a callable, not a lambda,
    so the log says which signal it was)."""

    def __init__(self, engines: Sequence[Engine], sig: signal.Signals) -> None:
        self._engines = engines
        self._sig = sig

    def __call__(self) -> None:
        log.info("shutting down", extra={"signal": self._sig.name})
        for engine in self._engines:
            engine.stop()
