"""Running one topology as a process: metrics and health server, signals, the engine.

``symfonic-stream run <name>`` builds the consumer's
:class:`~symfonic_stream.engine.topology.Topology` (``symfonic_stream.app.topologies``) and
calls :func:`serve`. Logging is configured by the command before this runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from symfonic_stream.config import Settings
from symfonic_stream.engine.engine import Engine, EngineError
from symfonic_stream.engine.topology import Topology
from symfonic_stream.observability.health import (
    DEFAULT_STALE_AFTER_S,
    HealthState,
    start_configured_health_server,
)
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

#: Exit status when the consumer cannot start or crashed (configuration errors exit 2
#: before anything runs; see ``symfonic_stream.cli.run``).
EXIT_FAILURE = 1


async def serve(topology: Topology, settings: Settings) -> int:
    """Run ``topology`` until SIGTERM/SIGINT; returns the process exit status."""
    metrics = ConsumerMetrics(topology.consumer)
    # A commit may legitimately wait up to the transaction timeout: liveness must not
    # restart a pod that is slow but still making progress.
    stale_after = max(DEFAULT_STALE_AFTER_S, 2 * settings.transaction_timeout_ms / 1000)
    health = HealthState(stale_after, metrics=metrics)
    server = await start_configured_health_server(settings.metrics_port, metrics.registry, health)
    engine = Engine(topology, settings, metrics, health)
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, _Stop(engine, sig))
    try:
        return await engine.run()
    except EngineError as exc:
        log.error("consumer cannot start", extra={"error": str(exc)})
        return EXIT_FAILURE
    except Exception:
        log.exception("consumer crashed")
        return EXIT_FAILURE
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()


class _Stop:
    """The signal handler: the first signal stops gracefully (a callable, not a lambda,
    so the log says which signal it was)."""

    def __init__(self, engine: Engine, sig: signal.Signals) -> None:
        self._engine = engine
        self._sig = sig

    def __call__(self) -> None:
        log.info("shutting down", extra={"signal": self._sig.name})
        self._engine.stop()
