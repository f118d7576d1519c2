"""``symfonic-stream gateway``: serve runs as server-sent events until SIGTERM/SIGINT.

Exit status: 0 after a graceful shutdown, 2 when the configuration is invalid (the message
names the variable), 1 when it cannot start (Kafka unreachable, topics missing).
"""

from __future__ import annotations

import asyncio
import sys

import click

from symfonic_stream.cli.common import kafka_help
from symfonic_stream.config import ConfigError, PortInUse, Settings, load_settings
from symfonic_stream.consumers import metrics_port
from symfonic_stream.observability import tracing

EXIT_USAGE = 2


def _epilog() -> str:
    http = Settings.model_fields["gateway_port"].default
    return (f"HTTP: SYMFONIC_GATEWAY_PORT (default {http}); metrics and health: "
            f"SYMFONIC_METRICS_PORT (default {metrics_port('gateway')}; 0: none).\n\n"
            + kafka_help(command=False))


@click.command("gateway", epilog=_epilog())
def command() -> None:
    """Serve each run's typed and chunk streams over HTTP as server-sent events.

    GET /v1/runs/RUN_ID/events and /v1/runs/RUN_ID/chunks (resume with Last-Event-ID or
    ?after_seq=N), the page / (/?run=RUN_ID) and the review console /review. See
    docs/gateway.md.
    """
    from symfonic_stream.gateway.auth import TokenCheck

    try:
        settings = load_settings().for_process(metrics_port=metrics_port("gateway"))
        TokenCheck.from_settings(settings)  # the JWKS file is read and checked here
        tracing.configure("symfonic-stream-gateway")  # (the OTEL_* variables checked)
    except (ConfigError, ValueError) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    from symfonic_stream.gateway.server import serve
    from symfonic_stream.observability.logs import configure_logging

    configure_logging("gateway", settings.log_level, secrets=settings.secrets())
    try:
        sys.exit(asyncio.run(serve(settings)))
    except PortInUse as exc:  # bound before anything else starts: nothing is left open
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
