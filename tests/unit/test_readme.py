"""The README's worked examples are run, not just read."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def console_blocks() -> list[str]:
    return re.findall(r"```console\n(.*?)```", README.read_text(), flags=re.S)


def split_session(block: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines with the output lines that follow each."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def test_offline_example_output_is_what_the_command_prints(tmp_path: Path) -> None:
    [block] = [b for b in console_blocks() if "symfonic-stream project" in b]
    steps = split_session(block)
    produced: set[str] = set()
    checked = 0
    for command, output in steps:
        argv = shlex.split(command)
        if argv[0] == "cat" and argv[1] not in produced:
            (tmp_path / argv[1]).write_text("\n".join(output) + "\n")  # an input file
        elif argv[0] == "cat":
            assert (tmp_path / argv[1]).read_text().splitlines() == output
            checked += 1
        else:
            assert argv[0] == "symfonic-stream"
            done = subprocess.run(
                [sys.executable, "-m", "symfonic_stream", *argv[1:]],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == output
            if "--dead-letters" in argv:
                produced.add(argv[argv.index("--dead-letters") + 1])
            checked += 1
    assert checked == 2
