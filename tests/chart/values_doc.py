"""The chart's values table, generated from the ``# --`` comments of values.yaml.

    python tests/chart/values_doc.py            print the table
    python tests/chart/values_doc.py --write    rewrite it in the chart README
    python tests/chart/values_doc.py --check    exit 1 on an undocumented key or a stale table

A ``# -- text`` comment (continued by following ``#`` lines) documents the key right below
it. A documented key whose children carry no comments of their own is one row (its default
shown as JSON). The table lives in helm/symfonic-stream/README.md only, between
``<!-- values-table:start -->`` and ``<!-- values-table:end -->`` markers; the project's
docs (docs/deploy.md) link to it instead of repeating it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "symfonic-stream"
VALUES = CHART / "values.yaml"
TARGETS = (CHART / "README.md",)
#: Pages that must link to the table rather than hold a copy of it.
ELSEWHERE = (ROOT / "README.md", ROOT / "docs")
START, END = "<!-- values-table:start -->", "<!-- values-table:end -->"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(\s|$)")
_DOC = re.compile(r"^ *# -- ?(?P<text>.*)$")
_MORE = re.compile(r"^ *# ?(?P<text>.*)$")


def _lookup(data: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def documented_keys(text: str | None = None) -> dict[tuple[str, ...], str]:
    """Every documented key path of values.yaml, in file order, with its description."""
    text = VALUES.read_text() if text is None else text
    data = yaml.safe_load(text)
    docs: dict[tuple[str, ...], str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        if (m := _DOC.match(line)) is not None:
            pending = [m["text"].strip()]
            continue
        if pending is not None and line.lstrip().startswith("#"):
            more = _MORE.match(line)
            pending.append(more["text"].strip() if more else "")
            continue
        m = _KEY.match(line)
        if m is None:
            if line.strip() and not line.lstrip().startswith(("#", "-")):
                pending = None
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(key for _, key in stack), m["key"])
        found, _ = _lookup(data, path)
        if not found:  # a key inside a list item: part of a value, not a values key
            pending = None
            continue
        stack.append((indent, m["key"]))
        if pending is not None:
            docs[path] = " ".join(part for part in pending if part)
            pending = None
    return docs


def undocumented(docs: dict[tuple[str, ...], str], data: Any) -> list[str]:
    """Leaf keys (scalars, lists, empty maps) with no description on them or an ancestor."""
    missing: list[str] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if any(path[:n] in docs for n in range(1, len(path) + 1)):
            return
        if isinstance(node, dict) and node:
            for key, child in node.items():
                walk(child, (*path, str(key)))
        else:
            missing.append(".".join(path))

    for key, child in data.items():
        walk(child, (str(key),))
    return missing


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def table() -> str:
    data = yaml.safe_load(VALUES.read_text())
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for path, text in documented_keys().items():
        _, value = _lookup(data, path)
        default = json.dumps(value, separators=(",", ":")).replace("|", "\\|")
        description = text.replace("|", "\\|")
        rows.append(f"| `{'.'.join(path)}` | {_type(value)} | `{default}` | {description} |")
    return "\n".join(rows) + "\n"


def _splice(text: str, new_table: str) -> str:
    before, _, rest = text.partition(START)
    _, _, after = rest.partition(END)
    return f"{before}{START}\n{new_table}{END}{after}"


def _other_pages() -> list[Path]:
    pages: list[Path] = []
    for place in ELSEWHERE:
        pages.extend(sorted(place.glob("*.md")) if place.is_dir() else [place])
    return [page for page in pages if page.is_file() and page not in TARGETS]


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else ""
    current = table()
    if mode == "":
        sys.stdout.write(current)
        return 0
    problems = [
        f"values.yaml: undocumented key {key} (add a '# --' comment)"
        for key in undocumented(documented_keys(), yaml.safe_load(VALUES.read_text()))
    ]
    for target in TARGETS:
        if not target.exists():
            problems.append(f"{target.relative_to(ROOT)}: missing")
            continue
        text = target.read_text()
        if START not in text or END not in text:
            problems.append(f"{target.relative_to(ROOT)}: no {START} ... {END} markers")
            continue
        updated = _splice(text, current)
        if updated != text:
            if mode == "--write":
                target.write_text(updated)
                print(f"updated {target.relative_to(ROOT)}")
            else:
                problems.append(
                    f"{target.relative_to(ROOT)}: values table is stale (run `make chart-docs`)"
                )
    for page in _other_pages():
        if START in page.read_text():
            problems.append(
                f"{page.relative_to(ROOT)}: holds a copy of the values table; it lives in "
                f"{TARGETS[0].relative_to(ROOT)} only (link to it)"
            )
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
