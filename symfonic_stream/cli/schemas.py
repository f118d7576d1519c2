"""``symfonic-stream schemas generate|check|register``: write schemas/ from the models, check
it, or register every topic's value schema in a schema registry."""

from __future__ import annotations

import asyncio
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

import click

from symfonic_stream.cli import EXTRAS, MissingExtra, needs_extra
from symfonic_stream.cli.common import EXIT_USAGE, settings_or_exit
from symfonic_stream.config import ENV_PREFIX
from symfonic_stream.tools.schemas import REGENERATE_HINT, generate

DEFAULT_DIR = "schemas"
#: Files in schemas/ with these suffixes are generated; any other such file is stale.
_GENERATED_SUFFIXES = (".json", ".yaml")


def drift(directory: Path, expected: dict[str, str] | None = None) -> list[str]:
    """``name: why`` for each file of ``directory`` that differs from the generator's."""
    expected = generate() if expected is None else expected
    problems = []
    for name, text in expected.items():
        path = directory / name
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            problems.append(f"{name}: missing")
            continue
        if current != text:
            problems.append(f"{name}: differs from the models")
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if path.suffix in _GENERATED_SUFFIXES and path.name not in expected:
                problems.append(f"{path.name}: not generated any more (stale)")
    return problems


@click.group("schemas")
def command() -> None:
    """JSON Schemas of every record type and the AsyncAPI document (schemas/)."""


@command.command("generate")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIR,
    show_default=True,
    help="Directory to write the files into (created if missing).",
)
def generate_command(out_dir: Path) -> None:
    """Write every schema file, generated from the models."""
    files = generate()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = out_dir / name
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                click.echo(f"wrote {path}")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out_dir}: {exc.strerror}") from None
    for problem in drift(out_dir, files):
        # Only stale files can remain: never delete in a directory the user named.
        click.echo(f"warning: {out_dir}/{problem}; remove it by hand", err=True)
    click.echo(f"{len(files)} files up to date in {out_dir}")


@command.command("check")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIR,
    show_default=True,
    help="Directory holding the committed files.",
)
def check_command(directory: Path) -> None:
    """Exit 1, listing the drifted files, when DIR differs from what the models generate."""
    problems = drift(directory)
    if problems:
        for problem in problems:
            click.echo(f"drifted: {directory}/{problem}", err=True)
        click.echo(f"{directory} is out of date: {REGENERATE_HINT}", err=True)
        raise SystemExit(1)
    click.echo(f"{directory} matches the models ({len(generate())} files)")


@command.command("register")
def register_command() -> None:
    """Register every topic's value schema under <topic>-value in the schema registry at
    SYMFONIC_SCHEMA_REGISTRY_URL (Confluent's API), with the compatibility level
    SYMFONIC_SCHEMA_REGISTRY_COMPATIBILITY; exit 1 naming each incompatible change."""
    absent = [name for name in EXTRAS["registry"] if find_spec(name) is None]
    if absent:
        raise MissingExtra(needs_extra("schemas register", "registry", absent[0]))
    from symfonic_stream.kafka.schema_registry import RegistryError
    from symfonic_stream.tools.schemas.register import register
    from symfonic_stream.tools.schemas.subjects import value_schemas

    settings = settings_or_exit()
    if settings.schema_registry_url is None:
        click.echo(f"error: {ENV_PREFIX}SCHEMA_REGISTRY_URL is not set: the registry's base "
                   "URL, e.g. http://127.0.0.1:8081", err=True)
        raise SystemExit(EXIT_USAGE)
    try:
        reports = asyncio.run(register(settings, value_schemas(settings)))
    except RegistryError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    for report in reports:
        click.echo(report.line(), err=report.outcome == "incompatible")
    counts = Counter(report.outcome for report in reports)
    click.echo(f"{len(reports)} subjects at {settings.schema_registry_url} "
               f"({settings.schema_registry_compatibility}): {counts['registered']} registered, "
               f"{counts['unchanged']} unchanged, {counts['incompatible']} incompatible")
    if counts["incompatible"]:
        raise SystemExit(1)
