"""The documentation's worked examples are run, not just read.

docs/records.md's offline example (``symfonic-stream project``) is executed: its input files
are written from the ``cat`` blocks, the command is run, and what it prints and the
dead-letter file it writes must be exactly what the page shows.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
RECORDS = DOCS / "records.md"


def console_blocks(page: Path) -> list[str]:
    return re.findall(r"```console\n(.*?)```", page.read_text(), flags=re.S)


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
    [block] = [b for b in console_blocks(RECORDS) if "symfonic-stream project" in b]
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


def test_configuration_page_lists_every_setting_once() -> None:
    """docs/configuration.md's table names every ``Settings`` field, each once, and no other
    page keeps a second table of them."""
    from symfonic_stream.config import ENV_PREFIX, Settings

    root = DOCS.parent
    row = re.compile(r"^\| (`SYMFONIC_[A-Z0-9_]+`(?:, `SYMFONIC_[A-Z0-9_]+`)*) \|", re.M)
    listed = [
        name.strip("` ")
        for cells in row.findall((DOCS / "configuration.md").read_text())
        for name in cells.split(",")
    ]
    expected = sorted(ENV_PREFIX + field.upper() for field in Settings.model_fields)
    assert sorted(listed) == expected
    pages = [root / "README.md", root / "helm/symfonic-stream/README.md", *DOCS.glob("*.md")]
    elsewhere = [
        str(page.relative_to(root))
        for page in pages
        if page.name != "configuration.md" and row.search(page.read_text())
    ]
    assert elsewhere == []
