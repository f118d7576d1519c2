"""What a benchmark says: its command line, progress on stderr, tables on stdout, its
result as JSON (stdout carries only the report, so it can be kept as printed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson


def options(prog: str, argv: list[str] | None, about: str | None = None,
            **defaults: Any) -> argparse.Namespace:
    """``python -m <prog>``'s options, one per keyword (``--the-name``): its default, whose
    type it takes (a type: none), ``False`` for a flag, or a tuple of that and its help."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=about,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in defaults.items():
        default, about_it = default if isinstance(default, tuple) else (default, None)
        flag = "--" + name.replace("_", "-")
        if default is False:
            parser.add_argument(flag, action="store_true", help=about_it)
        elif isinstance(default, type):
            parser.add_argument(flag, type=default, help=about_it)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=about_it)
    return parser.parse_args(argv)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table(lines: list[list[str]]) -> str:
    """A header and rows, aligned: figures to the right, words (the first column's, a
    verdict's) to the left; a rule under the header (a reader splits rows on white space)."""
    columns = list(zip(*lines, strict=True))
    widths = [max(map(len, column)) for column in columns]
    right = [i > 0 and all(c[:1] in "0123456789-.(" for c in column[1:])
             for i, column in enumerate(columns)]

    def row(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    return "\n".join([row(lines[0]), "  ".join("-" * w for w in widths),
                      *(row(line) for line in lines[1:])])


def markdown(lines: list[list[str]]) -> str:
    """The same header and rows as a Markdown table (as docs/benchmarks.md shows them)."""
    return "\n".join(["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0]),
                      *("| " + " | ".join(line) + " |" for line in lines[1:])])


def write_json(path: Path, result: Any) -> None:
    """``result`` to ``path`` whole or not at all (a run cut short leaves the last file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
                                 | orjson.OPT_NON_STR_KEYS))
    tmp.replace(path)
    say(f"wrote {path}")
