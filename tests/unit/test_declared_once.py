"""Each consumer and projection is listed once, in its declaration (issue 45).

What lists consumers or projections (the CLI's choices, the chart, the demo, the bench, the
scripts) derives the list from ``symfonic_stream/consumers/`` and
``symfonic_stream/projections/declared.py``; a second hand-written list drifts the day a
consumer is added. This reads every source file outside the declarations as text and fails
on a group (brackets, a Helm ``(list ...)``) or a line naming two or more declared names as
strings: ``("typed", "chunks")``, ``(list "pauses" "resumes")``,
``"typed" if … else "chunks"``. The tests are exempt (they state expectations), and so is
tests/reference, the oracle, which keeps its own list on purpose: it must not derive from
the code it judges.
"""

from __future__ import annotations

import re
from pathlib import Path

from symfonic_stream.consumers import READERS, registered
from symfonic_stream.projections.declared import PROJECTIONS

ROOT = Path(__file__).resolve().parents[2]
#: Where a list could hide: the product, its scripts, the chart's templates, the bench, the
#: build.
SEARCHED = ("symfonic_stream", "scripts", "helm/symfonic-stream/templates", "bench",
            "Makefile", "mk", ".ci", "Dockerfile")
SUFFIXES = {".py", ".tpl", ".yaml", ".sh", ".mk", ""}
#: The declarations themselves.
EXEMPT = ("symfonic_stream/consumers/", "symfonic_stream/projections/declared.py",
          "bench/results/")

_QUOTED = re.compile(r"""["']([a-z][a-z_-]*)["']""")
_INNERMOST = re.compile(r"[(\[{][^()\[\]{}]*[)\]}]")


def declared_names() -> set[str]:
    return ({c.name for c in registered()} | {r.name for r in READERS} | set(PROJECTIONS))


def _files() -> list[Path]:
    found: list[Path] = []
    for place in SEARCHED:
        path = ROOT / place
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for file in candidates:
            relative = file.relative_to(ROOT).as_posix()
            if (file.is_file() and file.suffix in SUFFIXES and "__pycache__" not in relative
                    and not relative.startswith(EXEMPT)):
                found.append(file)
    return found


def lists_in(text: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, the text) of each group or line that names two or more of ``names``."""
    found: dict[int, str] = {}
    pieces = [(m.start(), m.group(0)) for m in _INNERMOST.finditer(text)]
    offset = 0
    for line in text.splitlines(keepends=True):
        pieces.append((offset, line))
        offset += len(line)
    for start, piece in pieces:
        if len({n for n in _QUOTED.findall(piece) if n in names}) >= 2:
            found.setdefault(text.count("\n", 0, start) + 1, piece.strip()[:120])
    return sorted(found.items())


def test_the_check_finds_the_lists_it_is_for() -> None:
    """Each shape the issue found, and nothing in a declaration's one name or an unrelated
    pair."""
    names = {"typed", "chunks", "pauses", "resumes"}
    assert [n for n, _ in lists_in('click.Choice(["typed", "chunks"])\n', names)] == [1]
    assert lists_in('x = 1\n{{- if has $n (list "pauses"\n  "resumes") }}\n', names) != []
    assert lists_in('p = PROJECTIONS["typed" if a else "chunks"]\n', names) != []
    assert lists_in('Row("typed", ("typed",))\nChoice(["json", "text"])\n', names) == []


def test_no_consumer_or_projection_list_outside_the_declarations() -> None:
    names = declared_names()
    assert {"typed", "chunks", "pauses", "resumes", "gateway"} <= names  # (the check's reach)
    found = [f"{file.relative_to(ROOT)}:{line}: {text}" for file in _files()
             for line, text in lists_in(file.read_text(errors="replace"), names)]
    assert found == [], ("a list of consumers or projections outside the declarations; "
                         "derive it from them:\n" + "\n".join(found))
