"""``symfonic-stream replay``: re-project a time or offset range of the raw topic, once.

Exit status: 0 when the replay completed (or was already complete) and all it wrote is
readable (read_committed); 1 when it stopped part way (Kafka failed, the process was fenced
by another run of the same replay): rerunning the same command resumes it without
duplicating anything; 2 for bad usage or configuration, or a refused target; 130 on Ctrl-C
(also resumable).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import click
import orjson
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

from symfonic_stream.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    TIME,
    kafka_help,
    quiet_kafka_logs,
    settings_or_exit,
)
from symfonic_stream.engine.setup import EngineError
from symfonic_stream.kafka.admin import TopicError
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.projections.declared import PROJECTIONS
from symfonic_stream.tools.render import format_ts
from symfonic_stream.tools.replay.ranges import Offsets, RangeError, offsets_json, parse_offsets
from symfonic_stream.tools.replay.replay import ReplayError, ReplaySummary, replay

EXIT_INCOMPLETE = 1


class OffsetsType(click.ParamType):  # type: ignore[type-arg]
    """OFFSETS: ``N`` (every partition) or ``P:N[,P:N...]`` (only those partitions)."""

    name = "OFFSETS"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Offsets:
        if isinstance(value, int | dict):
            return value
        option = param.opts[0] if param is not None else "OFFSETS"
        try:
            return parse_offsets(str(value), option)
        except RangeError as exc:
            self.fail(str(exc), param, ctx)


OFFSETS = OffsetsType()


@click.command("replay", epilog=kafka_help())
@click.option(
    "--projection", type=click.Choice(tuple(PROJECTIONS)), required=True,
    help="Which vocabulary to write.",
)
@click.option("--from", "from_ts", type=TIME, default=None, help="Start of the range (TIME).")
@click.option(
    "--from-offset", "from_offsets", type=OFFSETS, default=None,
    help="Start of the range as raw offsets (OFFSETS), instead of --from.",
)
@click.option("--to", "to_ts", type=TIME, default=None, help="End of the range, exclusive.")
@click.option(
    "--to-offset", "to_offsets", type=OFFSETS, default=None,
    help="End of the range as raw offsets (OFFSETS), exclusive, instead of --to.",
)
@click.option("--to-topic", required=True, help="Where the output goes (created if missing).")
@click.option("--force", is_flag=True, help="Allow writing into a live output topic.")
@click.option(
    "--dead-letter-topic", default=None,
    help="Write records that cannot be projected here (default: count and report them).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON line.")
def command(
    projection: str,
    from_ts: float | None,
    from_offsets: Offsets | None,
    to_ts: float | None,
    to_offsets: Offsets | None,
    to_topic: str,
    force: bool,
    dead_letter_topic: str | None,
    as_json: bool,
) -> None:
    """Re-project raw records from --from up to --to into --to-topic, exactly once.

    The output equals `symfonic-stream project` run on the same records. The guard starts
    empty, so a run already under way at the start opens with a gap record. Without an end,
    the range ends at the raw topic's end when the replay is first started. TIME is ISO-8601
    (UTC unless a zone is given) or Unix seconds, compared with the raw records' Kafka
    timestamps. OFFSETS is N (the same offset in every partition) or P:N[,P:N...] (only
    the partitions named); either bound may be a time or offsets. Rerunning the same
    command after a crash resumes; after completion it writes nothing. Live output topics
    are refused unless --force.
    """
    settings = settings_or_exit()
    quiet_kafka_logs()
    progress, show = _progress_bar(disable=as_json)
    try:
        with progress:
            summary = asyncio.run(replay(
                settings, projection=projection,
                from_ts=from_ts, to_ts=to_ts, from_offsets=from_offsets, to_offsets=to_offsets,
                to_topic=to_topic, force=force, dead_letter_topic=dead_letter_topic,
                on_progress=show,
            ))
    except (ReplayError, TopicError) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo("symfonic-stream: interrupted; rerun the same command to resume", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except (KafkaError, KafkaUnavailable, EngineError, OSError) as exc:
        click.echo(f"symfonic-stream: replay stopped: {exc}; rerun the same command to resume",
                   err=True)
        sys.exit(EXIT_INCOMPLETE)
    bounds = _Bounds(from_ts, from_offsets, to_ts, to_offsets)
    if as_json:
        sys.stdout.write(orjson.dumps(_as_json(summary, bounds)).decode() + "\n")
    else:
        _print_summary(Console(highlight=False), summary, bounds)


def _progress_bar(*, disable: bool) -> tuple[Progress, Callable[[ReplaySummary], None]]:
    """A progress bar on a terminal's stderr, and the callback that moves it."""
    console = Console(stderr=True, highlight=False)
    progress = Progress(
        TextColumn("replaying"), BarColumn(), TaskProgressColumn(),
        TextColumn("{task.fields[records]} records out"),
        console=console, disable=disable or not console.is_terminal,
    )
    task: TaskID | None = None

    def show(summary: ReplaySummary) -> None:
        nonlocal task
        if task is None:
            task = progress.add_task("replay", total=max(summary.offsets_total, 1), records=0)
        progress.update(task, completed=summary.offsets_done,
                        records=summary.total("records_out"))

    return progress, show


class _Bounds(NamedTuple):
    from_ts: float | None
    from_offsets: Offsets | None
    to_ts: float | None
    to_offsets: Offsets | None

    def describe(self) -> str:
        start = (
            format_ts(self.from_ts) if self.from_ts is not None
            else f"offset {_offsets_text(self.from_offsets)}"
        )
        if self.to_ts is not None:
            end = format_ts(self.to_ts)
        elif self.to_offsets is not None:
            end = f"offset {_offsets_text(self.to_offsets)}"
        else:
            end = "the raw topic's end at the first start"
        return f"[{start} .. {end})"


def _offsets_text(offsets: Offsets | None) -> str:
    if isinstance(offsets, dict):
        return ",".join(f"{p}:{n}" for p, n in sorted(offsets.items()))
    return str(offsets)


def _as_json(summary: ReplaySummary, bounds: _Bounds) -> dict[str, Any]:
    return {
        "type": "replay_summary",
        "replay_id": summary.replay_id,
        "source": summary.source_topic,
        "to_topic": summary.to_topic,
        "from": bounds.from_ts,
        "to": bounds.to_ts,
        "from_offset": offsets_json(bounds.from_offsets),
        "to_offset": offsets_json(bounds.to_offsets),
        "resumed": summary.resumed,
        "already_complete": summary.already_complete,
        "records_in": summary.total("records_in"),
        "records_out": summary.total("records_out"),
        "dead_letters": summary.total("dead_letters"),
        "by_type": summary.by_type(),
        "counts": summary.counts(),
        "ranges": {
            str(p): [progress.start, progress.end]
            for p, progress in sorted(summary.partitions.items())
        },
    }


def _print_summary(console: Console, summary: ReplaySummary, bounds: _Bounds) -> None:
    state = (
        "was already complete: nothing written"
        if summary.already_complete
        else "resumed and completed" if summary.resumed else "completed"
    )
    console.print(
        f"replay {summary.replay_id} {summary.source_topic} → {summary.to_topic} "
        f"{bounds.describe()} {state}",
        style="bold green", soft_wrap=True, markup=False,
    )
    console.print(
        f"  records in {summary.total('records_in')}, out {summary.total('records_out')}, "
        f"dead letters {summary.total('dead_letters')}",
        soft_wrap=True, markup=False,
    )
    for name, n in summary.by_type().items():
        console.print(f"    {name:<18} {n}", markup=False)
    counts = summary.counts()
    if counts:
        console.print(
            "  " + ", ".join(f"{name} {n}" for name, n in counts.items()), markup=False
        )
