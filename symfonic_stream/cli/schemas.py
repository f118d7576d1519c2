"""``symfonic-stream schemas generate|check``: write schemas/ from the models, or check it."""

from __future__ import annotations

from pathlib import Path

import click

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
