"""``symfonic-stream demo``: synthetic kernel runs through the whole pipeline.

Exit status: 0 when every run reached its end record on every output topic; 1 when the
demo timed out or a consumer failed (the summary says what was seen); 2 for bad usage or
configuration; 130 on Ctrl-C. The consumers it started are stopped in every case.
"""

from __future__ import annotations

import asyncio
import sys

import click
from rich.console import Console

from symfonic_stream.cli.common import (
    EXIT_INTERRUPTED,
    kafka_help,
    quiet_kafka_logs,
    settings_or_exit,
)
from symfonic_stream.tools.demo.run import DemoOptions, run_demo

EXIT_FAILED = 1
EXIT_TERMINATED = 143  # (128 + SIGTERM, as a shell reports it)


@click.command("demo", epilog=kafka_help())
@click.option("--runs", type=click.IntRange(min=1), default=300, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True, help="Synthetic data seed.")
@click.option("--prefix", default=None, help="Topic prefix (default symfonic-demo-<time>).")
@click.option("--max-events", type=click.IntRange(min=8), default=120, show_default=True,
              help="Longest synthetic run, in events.")
@click.option("--gap-timeout", type=click.FloatRange(min=0.1), default=3.0, show_default=True,
              help="The projectors' gap timeout (s), short so lost events show as gaps.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Give up when the runs have not all ended after this many seconds.")
@click.option("--rate", type=click.FloatRange(min=1), default=1000.0, show_default=True,
              help="Events published per second (the steady-state latency is at this rate).")
@click.option("--keep-running", is_flag=True,
              help="After the summary, leave the consumers and the gateway running until "
                   "Ctrl-C, to look around (the closing lines say what runs where and what to "
                   "type next).")
@click.option("--keep-topics", is_flag=True,
              help="Leave the demo's topics behind (deleted at the end otherwise).")
def command(
    runs: int,
    seed: int,
    prefix: str | None,
    max_events: int,
    gap_timeout: float,
    timeout: float,
    rate: float,
    keep_running: bool,
    keep_topics: bool,
) -> None:
    """Create topics, start all four consumers (typed, chunks, pauses, resumes) and the
    gateway, publish synthetic runs, answer two pauses, then print a summary and one run
    rendered as text; then stop everything and delete the topics (unless --keep-running,
    --keep-topics).

    The runs have text, thinking, tool calls and results, usage, errors, cancellations,
    pauses, re-sent duplicates, reordering and a few lost events; three bad records show
    the dead-letter path. SYMFONIC_PARTITIONS sets the partitions of the demo's topics,
    SYMFONIC_GATEWAY_PORT the gateway's port (default 8400; 0: a free one).
    """
    settings = settings_or_exit()
    quiet_kafka_logs()
    options = DemoOptions(
        runs=runs, seed=seed, prefix=prefix, max_events=max_events,
        gap_timeout_s=gap_timeout, timeout_s=timeout, rate=rate, keep_topics=keep_topics,
        keep_running=keep_running,
    )
    console = Console(highlight=False)
    try:
        ctx = asyncio.run(run_demo(options, settings, console))
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except asyncio.CancelledError:  # SIGTERM: the consumers are stopped, the topics gone
        sys.exit(EXIT_TERMINATED)
    except Exception as exc:  # a message, not a traceback: the consumers are stopped
        console.print(f"[bold red]demo failed:[/] {exc!r}")
        sys.exit(EXIT_FAILED)
    if not ctx.complete:
        sys.exit(EXIT_FAILED)
