"""``symfonic-stream run <consumer>``: run one consumer until SIGTERM/SIGINT.

Exit status: 0 after a graceful shutdown; 2 when the configuration is invalid (the message
names the variable) or the consumer does not exist in this build; 1 when the consumer
cannot start (e.g. its topics are missing) or crashed.
"""

from __future__ import annotations

import asyncio
import importlib
import sys

import click

from symfonic_stream.config import ConfigError, load_settings

#: Consumer name → module exposing ``async main(settings) -> int``.
CONSUMER_MODULES = {
    "typed": "consumers.typed",
    "chunks": "consumers.chunks",
    "pauses": "consumers.pauses",
    "resumes": "consumers.resumes",
    "copier": "consumers.copier",
}
EXIT_USAGE = 2


@click.command("run")
@click.argument("consumer", type=click.Choice(list(CONSUMER_MODULES)))
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

    configure_logging(consumer, settings.log_level, secrets=settings.secrets())
    module_name = CONSUMER_MODULES[consumer]
    try:
        module = importlib.import_module(module_name)
        # Build the topology once up front: its processor module is imported lazily, and
        # what it reads besides the settings (the pause router's rules file) is validated
        # here, so such errors are usage errors with a message, not a crash.
        topology = getattr(module, "topology", None)
        if topology is not None:
            topology(settings)
    except ModuleNotFoundError as exc:
        # The consumer's module, or a module it needs from this project, is not built yet.
        if exc.name != module_name and not (exc.name or "").startswith("symfonic_stream."):
            raise
        click.echo(f"symfonic-stream: consumer {consumer!r} is not implemented yet", err=True)
        sys.exit(EXIT_USAGE)
    except Exception as exc:
        click.echo(f"symfonic-stream: cannot set up the {consumer} consumer: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(asyncio.run(module.main(settings)))
