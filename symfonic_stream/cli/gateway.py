"""``symfonic-stream gateway``: serve runs as server-sent events until SIGTERM/SIGINT.

Exit status: 0 after a graceful shutdown, 2 when the configuration is invalid (the message
names the variable), 1 when it cannot start (Kafka unreachable, topics missing).
"""

from __future__ import annotations

import asyncio
import sys

import click

from symfonic_stream.config import ConfigError, load_settings

EXIT_USAGE = 2


@click.command("gateway")
def command() -> None:
    """Serve each run's typed and chunk streams over HTTP as server-sent events.

    GET /v1/runs/RUN_ID/events and /v1/runs/RUN_ID/chunks on SYMFONIC_GATEWAY_PORT
    (default 8400); resume with Last-Event-ID or ?after_seq=N. Metrics and health on
    SYMFONIC_METRICS_PORT. See docs/gateway.md.
    """
    from symfonic_stream.gateway.auth import TokenCheck

    try:
        settings = load_settings()
        TokenCheck.from_settings(settings)  # the JWKS file is read and checked here
    except (ConfigError, ValueError) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    from symfonic_stream.gateway.server import serve
    from symfonic_stream.observability.logs import configure_logging

    configure_logging("gateway", settings.log_level, secrets=settings.secrets())
    sys.exit(asyncio.run(serve(settings)))
