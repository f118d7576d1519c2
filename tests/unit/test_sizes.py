"""A tripwire, not a target: a module holds one subject and may be as long as that subject
needs, a function one idea (cohesive code is never cut apart to meet a size: issue 45).
What this catches is a module that has grown two subjects or a function that does several
things: no module of the package over 650 lines, no function over 100, except builders of
data literals (the AsyncAPI document's channels, messages and operations)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.helpers import package_sources

PACKAGE = Path(__file__).resolve().parents[2] / "symfonic_stream"
MAX_MODULE_LINES = 650
MAX_FUNCTION_LINES = 100
#: Modules longer than the tripwire on purpose, each one subject, with why.
ONE_LONG_SUBJECT = {
    # The ordering guard, its state records and its clock, with the processor around them:
    # one subject, and the hot path a record follows through one module (docs/engine.md,
    # "Following one record"); the clock cannot live apart without an import circle.
    "processors/projector.py": 900,
}
#: Functions that are one data literal (a document built as a dict), by module and name.
DATA_LITERALS = {
    ("tools/schemas/asyncapi/operations.py", "build_operations"),
    ("tools/schemas/asyncapi/channels.py", "build_channels"),
}


def _modules() -> list[Path]:
    return package_sources(PACKAGE)


def test_no_module_is_over_650_lines() -> None:
    long = {where: n for p in _modules()
            if (n := len(p.read_text().splitlines()))
            > ONE_LONG_SUBJECT.get(where := str(p.relative_to(PACKAGE)), MAX_MODULE_LINES)}
    assert long == {}


def test_no_function_is_over_100_lines() -> None:
    long = {}
    for path in _modules():
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and (where, node.name) not in DATA_LITERALS:
                    long[f"{where}:{node.name}"] = lines
    assert long == {}


def test_the_data_literal_exemptions_are_still_data_literals() -> None:
    # An exemption must not outlive its reason: each is a function returning one literal.
    for where, name in DATA_LITERALS:
        tree = ast.parse((PACKAGE / where).read_text())
        [function] = [n for n in ast.walk(tree)
                      if isinstance(n, ast.FunctionDef) and n.name == name]
        returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
        assert returns and all(isinstance(r.value, ast.Dict | ast.Name) for r in returns), name
