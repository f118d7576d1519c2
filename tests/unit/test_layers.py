"""The package's layers import downwards only, and no module imports itself round a circle.

models/config/faults → kafka, observability, projections → state → engine → processors →
consumers (the declarations) → app → sdk, tools, gateway → cli → testing (the test kit).
Every import counts, also one inside a function or under ``TYPE_CHECKING``: a circle that
only type checkers see is still a circle to a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.helpers import package_sources

PACKAGE = Path(__file__).resolve().parents[2] / "symfonic_stream"

#: Each top-level part of the package and its layer (an import may go to its own layer or
#: a lower one, never a higher one).
LAYERS = {
    "config": 0,
    "faults": 0,
    "native": 0,
    "models": 0,
    "kafka": 1,
    "observability": 1,
    "projections": 1,
    "state": 2,
    "engine": 3,
    "processors": 4,
    "runtime": 4,
    "consumers": 5,
    "app": 6,
    "sdk": 7,
    "tools": 7,
    "gateway": 7,
    "cli": 8,
    "__main__": 9,
    # The test kit: on top of everything; nothing in the product imports it.
    "testing": 10,
}
#: The Kafka layer is generic: it knows the settings, nothing of the project's domain (the
#: fault points are the tests' freeze points, two of them inside a Kafka transaction).
KAFKA_MAY_IMPORT = {"config", "faults", "kafka", "native"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("symfonic_stream")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in package_sources(PACKAGE)}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imports(path, module):
            # ``from pkg import name`` names a module or an attribute: keep what is a module.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and name != "symfonic_stream":
                targets.add(name)
        graph[module] = targets
    return graph


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {_part(module) for module in _graph()} - {"__init__"}
    assert parts <= set(LAYERS), f"give these a layer: {sorted(parts - set(LAYERS))}"


def test_imports_go_down_the_layers_only() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if _part(module) in LAYERS and _part(target) in LAYERS
        and LAYERS[_part(target)] > LAYERS[_part(module)]
    ]
    assert upward == []


def test_the_kafka_layer_knows_nothing_of_the_domain() -> None:
    leaks = [
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if _part(module) == "kafka"
        for target in targets
        if _part(target) not in KAFKA_MAY_IMPORT
    ]
    assert leaks == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_cycle_finder_finds_cycles(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert _cycles(graph) == expected
