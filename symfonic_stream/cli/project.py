"""``symfonic-stream project``: the live projection and guard, offline, on JSONL."""

from __future__ import annotations

import sys
from typing import IO

import click

from symfonic_stream.cli.common import settings_or_exit
from symfonic_stream.consumers.projectors import guard_limits
from symfonic_stream.projections.declared import PROJECTIONS
from symfonic_stream.tools.offline import run_offline


@click.command("project")
@click.option(
    "--projection",
    type=click.Choice(tuple(PROJECTIONS)),
    required=True,
    help="Which vocabulary to write.",
)
@click.option(
    "--dead-letters",
    "dead_letters_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help='Write bad lines here as JSONL {"reason", "detail", "line"}.',
)
@click.argument("input_path", required=False, type=click.Path(dir_okay=False))
def command(projection: str, dead_letters_path: str | None, input_path: str | None) -> None:
    """Project AgentEvent JSONL (INPUT or stdin) to output envelopes on stdout.

    Bad lines never stop the run; the exit status is 0 unless the input or output
    cannot be opened. The guard's run buffer bound is SYMFONIC_RUN_BUFFER_MAX, as live;
    the end of the input stands in for the gap timeout.
    """
    settings = settings_or_exit()
    limits = guard_limits(settings)
    if sys.stdout is None:
        raise click.ClickException("cannot write the output: standard output is closed")
    try:
        source: IO[bytes] = open(input_path, "rb") if input_path else sys.stdin.buffer  # noqa: SIM115
    except OSError as exc:
        raise click.ClickException(f"cannot open input {input_path}: {exc.strerror}") from None
    try:
        letters: IO[bytes] | None = (
            open(dead_letters_path, "wb") if dead_letters_path else None  # noqa: SIM115
        )
    except OSError as exc:
        raise click.ClickException(
            f"cannot open dead-letter file {dead_letters_path}: {exc.strerror}"
        ) from None
    try:
        run_offline(source, sys.stdout.buffer, projection, letters, limits,
                    settings.decode_limits(), ticket_tokens=settings.stream_ticket_tokens)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, not with a traceback.
        sys.stderr.close()
        sys.exit(1)
    finally:
        if letters is not None:
            letters.close()
        if input_path:
            source.close()
