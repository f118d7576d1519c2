"""``symfonic-stream publish FILE.jsonl``: validate raw AgentEvents and publish them.

Each non-blank line is one AgentEvent value. A line the projectors would dead-letter is
reported with its line number and not sent; every other line is sent, keyed by its run id,
with the idempotent publisher (:mod:`symfonic_stream.sdk.publisher`).

Exit status: 0 when every line was published; 1 when some lines were invalid (the valid
ones were published); 2 for bad usage or configuration, or a file that cannot be read;
3 when Kafka did not acknowledge every event (some may have been written: re-publishing
the file is safe, the projectors drop the duplicates).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import click
import orjson
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from symfonic_stream.cli.common import (
    EXIT_KAFKA,
    EXIT_USAGE,
    kafka_help,
    quiet_kafka_logs,
    settings_or_exit,
)
from symfonic_stream.config import Settings
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.publisher import (
    EventPublisher,
    InvalidEventError,
    PublishError,
    encode_event,
)

EXIT_BAD_LINES = 1
#: Files at least this big get a progress bar (on a terminal, without --json).
PROGRESS_MIN_BYTES = 1_000_000
#: Bad lines printed in full; the rest are only counted (all of them go out with --json).
MAX_REPORTED = 50


@dataclass(slots=True)
class PublishSummary:
    topic: str
    lines: int = 0
    published: int = 0
    bad: int = 0
    runs: set[str] = field(default_factory=set)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "type": "summary",
            "topic": self.topic,
            "lines": self.lines,
            "published": self.published,
            "bad_lines": self.bad,
            "runs": len(self.runs),
            "seconds": round(self.seconds, 3),
        }


@click.command("publish", epilog=kafka_help())
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Machine output: JSONL on stdout.")
@click.option("--dry-run", is_flag=True, help="Validate only; send nothing.")
@click.option("--topic", default=None, help="Publish here instead of <prefix>.agent-events.")
def command(path: str, as_json: bool, dry_run: bool, topic: str | None) -> None:
    """Validate and publish FILE (JSONL of AgentEvents, '-' for stdin) to the raw topic.

    Bad lines are reported with their line numbers and not sent; the valid lines are.
    With --json, stdout gets one {"type": "bad_line", ...} object per bad line and a final
    {"type": "summary", ...}.
    """
    settings = settings_or_exit()
    quiet_kafka_logs()
    try:
        source: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        click.echo(f"symfonic-stream: cannot read {path}: {exc.strerror}", err=True)
        sys.exit(EXIT_USAGE)
    err = Console(stderr=True, highlight=False)
    size = os.fstat(source.fileno()).st_size if path != "-" else 0
    show_progress = not as_json and err.is_terminal and size >= PROGRESS_MIN_BYTES
    try:
        summary = asyncio.run(
            _publish(settings, source, topic, dry_run, as_json, err, size if show_progress else 0)
        )
    except (PublishError, KafkaError, KafkaUnavailable, OSError) as exc:
        click.echo(f"symfonic-stream: publishing failed: {exc}", err=True)
        sys.exit(EXIT_KAFKA)
    finally:
        if path != "-":
            source.close()
    if as_json:
        sys.stdout.write(orjson.dumps(summary.as_json()).decode() + "\n")
    else:
        verb = "validated" if dry_run else "published"
        Console(highlight=False).print(
            f"{verb} {summary.published} event(s) of {len(summary.runs)} run(s)"
            + ("" if dry_run else f" to {summary.topic}")
            + f" in {summary.seconds:.1f} s; {summary.bad} bad line(s) not sent",
            style="bold red" if summary.bad else "bold green",
            soft_wrap=True,
        )
    if summary.bad:
        sys.exit(EXIT_BAD_LINES)


def _lines(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(source, start=1):
        stripped = line.strip()
        if stripped:
            yield number, stripped


async def _publish(
    settings: Settings,
    source: IO[bytes],
    topic: str | None,
    dry_run: bool,
    as_json: bool,
    err: Console,
    progress_bytes: int,
) -> PublishSummary:
    publisher = None if dry_run else EventPublisher(settings, topic=topic, client_name="publish")
    summary = PublishSummary(
        publisher.topic if publisher else topic or TopicNames(settings.topic_prefix).agent_events
    )
    started = time.monotonic()
    progress = Progress(
        TextColumn("publishing"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[events]} events"),
        TimeElapsedColumn(),
        console=err,
        disable=progress_bytes == 0,
    )
    task = progress.add_task("publish", total=progress_bytes, events=0)
    try:
        if publisher is not None:
            await publisher.start()  # an unreachable broker fails here, before any line
        with progress:
            for number, line in _lines(source):
                summary.lines += 1
                try:
                    event, value = encode_event(line, max_bytes=settings.max_record_bytes)
                except InvalidEventError as exc:
                    summary.bad += 1
                    _report(number, exc, as_json, err, summary.bad)
                    continue
                if publisher is not None:
                    await publisher.send_encoded(event, value)
                summary.published += 1
                summary.runs.add(event.run_id)
                progress.update(task, advance=len(line) + 1, events=summary.published)
        if publisher is not None:
            await publisher.flush()
    finally:
        if publisher is not None:
            await publisher.close()
    summary.seconds = time.monotonic() - started
    return summary


def _report(number: int, exc: InvalidEventError, as_json: bool, err: Console, nth: int) -> None:
    if as_json:
        record = {"type": "bad_line", "line": number, "reason": exc.reason.value,
                  "detail": exc.detail}
        sys.stdout.write(orjson.dumps(record).decode() + "\n")
    elif nth <= MAX_REPORTED:
        err.print(
            f"line {number}: {exc.reason.value}: {exc.detail}",
            style="red",
            markup=False,
            soft_wrap=True,
        )
    elif nth == MAX_REPORTED + 1:
        err.print(f"… more bad lines; only the first {MAX_REPORTED} are shown", style="red")
