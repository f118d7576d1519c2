"""What a benchmark says: progress lines on stderr, tables on stdout, its result as JSON.

stdout carries only the report, so a run's output can be kept as it is printed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table(lines: list[list[str]]) -> str:
    """A header and rows, aligned: the first column to the left, the others to the right,
    a rule under the header (a reader splits each row on white space)."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]

    def row(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

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
