"""``symfonic-stream topics ensure``: create every topic the deployment needs (idempotent)."""

from __future__ import annotations

import asyncio
import sys

import click

from symfonic_stream.app.topics import required_topics
from symfonic_stream.cli.common import kafka_help, settings_or_exit
from symfonic_stream.kafka.admin import TopicError, ensure_topics
from symfonic_stream.kafka.retry import Attempt, KafkaUnavailable

#: After the first failed attempt to reach Kafka, one line every this many attempts (with
#: the back-off's 5 s ceiling, about one a minute while a Helm hook's Job waits minutes).
SAY_EVERY = 10


@click.group("topics")
def command() -> None:
    """Manage the project's Kafka topics."""


@command.command("ensure", epilog=kafka_help())
@click.option(
    "--with-copier",
    is_flag=True,
    help="Also create the copier's output topic (benchmarks, engine tests).",
)
def ensure(with_copier: bool) -> None:
    """Create the raw, output, dead-letter, resume, human-queue and changelog topics.

    Partitions, replication factor and min.insync.replicas come from SYMFONIC_PARTITIONS,
    SYMFONIC_REPLICATION_FACTOR and SYMFONIC_MIN_INSYNC_REPLICAS. Existing topics are
    checked, not changed: one whose partition count or cleanup policy differs is reported
    and the exit status is 1.
    """
    settings = settings_or_exit()
    from symfonic_stream.processors.pauses.rules import RulesError

    try:
        specs = required_topics(settings, include_copier=with_copier)
    except RulesError as exc:  # the queue topics come from the routing rules file
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(2)
    def waiting(attempt: Attempt) -> None:
        if attempt.number % SAY_EVERY == 1:
            click.echo(f"symfonic-stream: waiting for Kafka, up to "
                       f"{settings.startup_wait_words()}: {attempt.describe()}", err=True)

    # Waits for Kafka as long as SYMFONIC_STARTUP_TIMEOUT_S says: seconds at a terminal by
    # default; the chart's Job (a Helm hook that may run before Kafka answers) sets minutes.
    ensure = ensure_topics(settings, specs, on_wait=waiting)
    try:
        report = asyncio.run(ensure)
    except (TopicError, KafkaUnavailable, OSError) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # a refusal we did not foresee: a message, not a traceback
        click.echo(f"symfonic-stream: topics ensure failed against Kafka at "
                   f"{settings.bootstrap_servers}: {exc!r}", err=True)
        sys.exit(1)
    purposes = {spec.name: spec.purpose for spec in specs}
    for name in report.created:
        click.echo(f"created  {name}  ({purposes[name]})")
    for name in report.existing:
        click.echo(f"exists   {name}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    for mismatch in report.mismatches:
        click.echo(f"mismatch: {mismatch}", err=True)
    if not report.ok:
        sys.exit(1)
