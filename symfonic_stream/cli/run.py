"""``symfonic-stream run <consumer>``: run one consumer until SIGTERM/SIGINT.

Exit status: 0 after a graceful shutdown; 2 when the configuration is invalid (the message
names the variable, or the consumer's own configuration, such as the routing rules file);
1 when the consumer cannot start (Kafka unreachable, topics missing) or crashed.
"""

from __future__ import annotations

import asyncio
import sys

import click

from symfonic_stream.app.topologies import TOPOLOGIES
from symfonic_stream.config import ConfigError, load_settings

EXIT_USAGE = 2


@click.command("run")
@click.argument("consumer", type=click.Choice(list(TOPOLOGIES)))
def command(consumer: str) -> None:
    """Run CONSUMER (typed, chunks, pauses, resumes, or copier, the benchmark baseline).

    Configuration comes from SYMFONIC_* environment variables; metrics and health are
    served on SYMFONIC_METRICS_PORT (0 turns the server off).
    """
    try:
        settings = load_settings()
    except ConfigError as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)

    from symfonic_stream.observability.logs import configure_logging

    try:
        from symfonic_stream.engine.service import serve
    except ValueError as exc:  # SYMFONIC_FAULT_FREEZE (tests only), checked at import
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)

    configure_logging(consumer, settings.log_level, secrets=settings.secrets())
    try:
        # What the topology reads besides the settings (the pause router's rules file) is
        # validated here, so such errors are usage errors with a message, not a crash.
        topologies = TOPOLOGIES[consumer](settings)
    except Exception as exc:
        click.echo(f"symfonic-stream: cannot set up the {consumer} consumer: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(asyncio.run(serve(topologies, settings)))
