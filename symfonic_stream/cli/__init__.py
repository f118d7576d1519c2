"""The ``symfonic-stream`` command line: one click group, one module per command family."""

from __future__ import annotations

import click

from symfonic_stream import __version__


def _print_version(context: click.Context, _: click.Parameter, value: bool) -> None:
    if not value or context.resilient_parsing:
        return
    from symfonic_stream import native

    click.echo(native.version_report(__version__))
    context.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="The version, which native paths are active, the Kafka client's version.")
def main() -> None:
    """Carry LLM-agent runs over Kafka: projectors, pause router, resume validator, tools."""


def _register() -> None:
    # Each command family lives in symfonic_stream/cli/<name>.py and exposes `command`
    # (a click command or group). Registration is explicit so `--help` lists what exists.
    from symfonic_stream.cli import project

    main.add_command(project.command)
    from symfonic_stream.cli import schemas
    main.add_command(schemas.command)
    from symfonic_stream.cli import run, topics
    main.add_command(run.command)
    main.add_command(topics.command)
    from symfonic_stream.cli import publish, tail
    main.add_command(publish.command)
    main.add_command(tail.command)
    from symfonic_stream.cli import replay
    main.add_command(replay.command)
    from symfonic_stream.cli import demo
    main.add_command(demo.command)
    from symfonic_stream.cli import acls
    main.add_command(acls.command)
    from symfonic_stream.cli import gateway
    main.add_command(gateway.command)


_register()
