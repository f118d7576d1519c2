"""``symfonic-stream tail RUN_ID``: follow one run's typed (or chunk) stream live.

Exit status: 0 at the run's end record; 1 when the stream is broken (a seq hole or repeat,
a record that is not an envelope) or ``--timeout`` passed without a record; 2 for bad usage
or configuration; 3 when Kafka cannot be reached or the output topic does not exist;
130 on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import sys

import click
import orjson
from aiokafka.errors import KafkaError
from rich.console import Console

from symfonic_stream.cli.common import (
    EXIT_BROKEN,
    EXIT_INTERRUPTED,
    EXIT_KAFKA,
    TIME,
    kafka_help,
    quiet_kafka_logs,
    settings_or_exit,
)
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.projections.declared import PROJECTIONS
from symfonic_stream.sdk.reader import (
    ReaderTimeout,
    RunReader,
    RunReadError,
    RunRecord,
    SequenceError,
    TopicMissingError,
)
from symfonic_stream.tools.render import RunRenderer


@click.command("tail", epilog=kafka_help())
@click.argument("run_id")
@click.option("--projection", type=click.Choice(tuple(PROJECTIONS)), default="typed",
              show_default=True, help="Which projection's stream to read.")
@click.option("--chunks", is_flag=True, help="Short for --projection chunks.")
@click.option(
    "--from-seq", type=click.IntRange(min=0), default=0, help="Show records from this seq."
)
@click.option("--since", type=TIME, default=None, help="Start at records written at/after TIME.")
@click.option("--follow", is_flag=True, help="Keep following a paused run into its next segment.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSONL.")
@click.option(
    "--topic",
    default=None,
    help="Read this topic (e.g. a replay's target) instead of the projection's.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Give up (exit 1) when no record of the run arrives for this many seconds.",
)
def command(
    run_id: str,
    projection: str,
    chunks: bool,
    from_seq: int,
    since: float | None,
    follow: bool,
    as_json: bool,
    topic: str | None,
    timeout: float | None,
) -> None:
    """Follow RUN_ID live and render it; exit at the run's end record.

    Text deltas print inline, thinking dimmed, tool calls with their arguments and results,
    pauses with their questions, gaps and the end status. A paused run ends the tail
    unless --follow is given. TIME is ISO-8601 (UTC unless a zone is given) or Unix
    seconds, and refers to when the projector wrote the records.
    """
    settings = settings_or_exit()
    quiet_kafka_logs()
    reader = RunReader(
        run_id,
        settings,
        projection="chunks" if chunks else projection,
        topic=topic,
        from_seq=from_seq,
        since=since,
        follow=follow,
        idle_timeout_s=timeout,
    )
    console = Console(highlight=False)
    try:
        asyncio.run(_tail(reader, console, as_json))
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except (SequenceError, ReaderTimeout) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_BROKEN)
    except TopicMissingError as exc:  # a deployment problem, not a broken stream
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_KAFKA)
    except RunReadError as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_BROKEN)
    except (KafkaError, KafkaUnavailable, OSError) as exc:
        click.echo(f"symfonic-stream: cannot read the run: {exc}", err=True)
        sys.exit(EXIT_KAFKA)


_ENVELOPE_ORDER = ("run_id", "seq", "source_index", "ts")


def envelope_json(record: RunRecord) -> str:
    """The record as compact JSON with contract §5's field order (as the projectors write it)."""
    body = record.model_dump(mode="json")
    ordered = {key: body.pop(key) for key in _ENVELOPE_ORDER}
    ordered.update(body)
    return orjson.dumps(ordered).decode()


async def _tail(reader: RunReader, console: Console, as_json: bool) -> None:
    renderer = None if as_json else RunRenderer(console)
    async with reader:
        async for record in reader:
            if renderer is None:
                sys.stdout.write(envelope_json(record) + "\n")
                sys.stdout.flush()
            else:
                renderer.render(record)
    if renderer is not None:
        renderer.finish()
