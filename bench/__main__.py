"""``python -m bench [COMMAND] [options]``: every benchmark, by name (docs/benchmarks.md,
"Commands"); with none, the project's consumers against the copier (:mod:`bench.projectors`).
A command's module is imported only when it runs: a benchmark of its own process's memory
(``soak``, ``answers``) stays as light as the harness it needs."""

import importlib
import sys

#: Command -> (module, function); the function takes the command's own arguments.
COMMANDS = {
    "compare": ("bench.projectors", "compare"),
    "rebalance": ("bench.rebalance", "main"),
    "gateway": ("bench.gateway", "main"),
    "answers": ("bench.answers", "main"),
    "soak": ("bench.soak", "soak"),
    "disk_values": ("bench.state", "disk_values"),
    "offline": ("bench.hot_path", "offline"),
    "instructions": ("bench.hot_path", "instructions"),
    "trace": ("bench.hot_path", "trace"),
    "profile": ("bench.engine_cost", "profile"),
    "relative_load": ("bench.projectors", "relative_load"),
}


def main(argv: list[str]) -> int:
    name = argv[0] if argv and argv[0] in COMMANDS else None
    module, function = COMMANDS[name] if name else ("bench.projectors", "main")
    return int(getattr(importlib.import_module(module), function)(argv[1:] if name else argv))


raise SystemExit(main(sys.argv[1:]))
