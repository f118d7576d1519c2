"""The ``symfonic-stream`` command line: one click group, one module per command family.

A command's module is imported only when that command runs (or ``--help`` lists it), so a
consumer's install does not need what only the interactive tools or the gateway use: those
come with the extras ``[tools]`` and ``[gateway]`` (pyproject.toml), and a command whose
extra is missing says which one to install, before anything is imported.
"""

from __future__ import annotations

import importlib
from importlib.util import find_spec

import click

from symfonic_stream import __version__

#: Each command: its module in symfonic_stream/cli/ (exposing ``command``) and the extra
#: whose packages it imports (None: the base install has them). In ``--help``'s order.
COMMANDS: dict[str, tuple[str, str | None]] = {
    "project": ("project", None),
    "schemas": ("schemas", None),
    "run": ("run", None),
    "topics": ("topics", None),
    "publish": ("publish", "tools"),
    "tail": ("tail", "tools"),
    "replay": ("replay", "tools"),
    "demo": ("demo", "tools"),
    "acls": ("acls", None),
    "gateway": ("gateway", "gateway"),
}

#: The modules each extra brings (pyproject.toml's [project.optional-dependencies], by their
#: import names; tests/unit/test_extras.py holds the two together).
EXTRAS: dict[str, tuple[str, ...]] = {
    "tools": ("rich",),
    "gateway": ("starlette", "uvicorn", "sse_starlette", "jwt", "ag_ui"),
    # `schemas register` and SYMFONIC_SCHEMA_ID_FRAMING=header (the registry's HTTP API).
    "registry": ("httpx",),
}


class MissingExtra(click.ClickException):
    """A command whose extra is not installed (exit status 2, as a bad setting)."""

    exit_code = 2


def needs_extra(name: str, extra: str, missing: str) -> str:
    """The words a user reads when ``name`` runs without its ``extra``."""
    return (f"`symfonic-stream {name}` needs the [{extra}] extra ({missing} is not "
            f"installed): pip install 'symfonic-stream[{extra}]'")


class _Commands(click.Group):
    """Imports a command's module when the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, extra = COMMANDS[cmd_name]
        # Checked before the import: a command may import its extra's packages late.
        absent = [name for name in EXTRAS.get(extra or "", ()) if find_spec(name) is None]
        if extra is not None and absent:
            return _stand_in(cmd_name, extra, absent[0])
        command: click.Command = importlib.import_module(f"symfonic_stream.cli.{module}").command
        return command


def _stand_in(name: str, extra: str, missing: str) -> click.Command:
    """A command that only says which extra to install (``--help`` lists it so too)."""
    message = needs_extra(name, extra, missing)

    def fail() -> None:
        raise MissingExtra(message)

    return click.Command(
        name, callback=fail, help=message, short_help=f"(needs the [{extra}] extra)",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


def _print_version(context: click.Context, _: click.Parameter, value: bool) -> None:
    if not value or context.resilient_parsing:
        return
    from symfonic_stream import native

    click.echo(native.version_report(__version__))
    context.exit()


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="The version, which native paths are active, the Kafka client's version.")
def main() -> None:
    """Carry LLM-agent runs over Kafka: projectors, pause router, resume validator, tools."""
