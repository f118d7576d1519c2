"""Shell completion as docs/install.md tells a user to enable it: the lines there make
click's scripts, and the scripts' requests complete commands and choices."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

INSTALL = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
VARIABLE = "_SYMFONIC_STREAM_COMPLETE"


def _cli(env: dict[str, str]) -> str:
    # The installed command: click names the variable after the program it was started as.
    done = subprocess.run([str(Path(sys.executable).parent / "symfonic-stream")],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("shell", "opening"), [("bash", "_symfonic_stream_completion() {"),
                                                ("zsh", "#compdef symfonic-stream"),
                                                ("fish", "function _symfonic_stream_completion")])
def test_the_install_page_lines_make_each_shells_script(shell: str, opening: str) -> None:
    assert re.search(rf"{VARIABLE}={shell}_source symfonic-stream", INSTALL)
    assert _cli({VARIABLE: f"{shell}_source"}).lstrip().startswith(opening)


@pytest.mark.parametrize(("words", "expected"), [("symfonic-stream ru", ["run"]),
                                                 ("symfonic-stream run t", ["typed"]),
                                                 ("symfonic-stream topics ", ["ensure"])])
def test_bash_completes_commands_and_choices(words: str, expected: list[str]) -> None:
    out = _cli({VARIABLE: "bash_complete", "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split(" ")) - 1)})
    assert [line.partition(",")[2] for line in out.splitlines()] == expected
