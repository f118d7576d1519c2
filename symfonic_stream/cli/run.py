"""``symfonic-stream run <consumer> [--workers N]``: run one consumer until SIGTERM/SIGINT.

Exit status: 0 after a graceful shutdown; 2 when the configuration is invalid (the message
names the variable, or the consumer's own configuration, such as the routing rules file);
1 when the consumer cannot start (Kafka unreachable, topics missing) or crashed. With N
workers (``--workers`` or ``SYMFONIC_WORKERS``) above 1 this process supervises N worker
processes of the consumer (``symfonic_stream.runtime.workers``): 0 when all of them stopped
gracefully, 1 when one exited on its own.
"""

from __future__ import annotations

import os
import sys

import click

from symfonic_stream.app.topologies import topologies as topologies_of
from symfonic_stream.cli.common import kafka_help
from symfonic_stream.config import ConfigError, PortInUse, load_settings
from symfonic_stream.consumers import metrics_port, registered
from symfonic_stream.observability import tracing

EXIT_USAGE = 2
#: Where a worker's metrics server listens: only its supervisor asks it.
WORKER_HOST = "127.0.0.1"


def _epilog() -> str:
    ports = ", ".join(f"{c.name} {metrics_port(c.name)}" for c in registered())
    return (f"Metrics and health: SYMFONIC_METRICS_PORT (default: {ports}; 0: none).\n\n"
            + kafka_help(command=False))


@click.command("run", epilog=_epilog())
@click.argument("consumer", type=click.Choice([c.name for c in registered()]))
@click.option(
    "--workers",
    # Validated as SYMFONIC_WORKERS is (by the settings), so the message names the setting.
    type=str,
    default=None,
    metavar="N",
    help="Worker processes (1 to 64; default SYMFONIC_WORKERS, else 1). Above 1, this "
    "process supervises N processes of CONSUMER and serves their merged metrics.",
)
def command(consumer: str, workers: str | None) -> None:
    """Run CONSUMER (typed, chunks, pauses, resumes, or copier, the benchmark baseline).

    Configuration comes from SYMFONIC_* environment variables (docs/configuration.md).
    Each consumer has a metrics port of its own by default, so several run side by side.
    """
    from symfonic_stream.runtime import loop as event_loop
    from symfonic_stream.runtime.workers import supervise, worker_index

    try:
        settings = load_settings(**({} if workers is None else {"workers": workers}))
        settings = settings.for_process(metrics_port=metrics_port(consumer))
        index = worker_index()
        if index is not None and settings.group_instance_id is not None:  # one per worker
            settings = settings.model_copy(
                update={"group_instance_id": f"{settings.group_instance_id}-{index}"})
    except ConfigError as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)

    from symfonic_stream.observability.logs import configure_logging

    try:
        from symfonic_stream.runtime.service import serve
    except ValueError as exc:  # SYMFONIC_FAULT_FREEZE (tests only), checked at import
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)

    configure_logging(consumer, settings.log_level, secrets=settings.secrets(), worker=index)
    try:
        # What the topology reads besides the settings (the pause router's rules file) is
        # validated here, so such errors are usage errors with a message, not a crash
        # (by the supervisor too, before it starts any worker).
        topologies = topologies_of(consumer, settings)
    except Exception as exc:
        click.echo(f"symfonic-stream: cannot set up the {consumer} consumer: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    try:  # the OTEL_* variables: checked here; the supervisor's workers make the spans
        if settings.workers > 1:
            tracing.wanted(os.environ)
        else:
            tracing.configure(f"symfonic-stream-{consumer}")
    except ConfigError as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    host = "0.0.0.0" if index is None else WORKER_HOST
    main = (supervise(consumer, settings) if settings.workers > 1
            else serve(topologies, settings, host=host))
    try:
        sys.exit(event_loop.run(main, settings.event_loop))
    except PortInUse as exc:  # bound before anything else starts: nothing is left open
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
