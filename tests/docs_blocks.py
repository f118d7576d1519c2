"""The documentation's fenced blocks, and running a command block as a reader would.

Every page a user may copy from (README.md, docs/, the chart's README) is read here. A
fenced block always names its language: ``bash``/``sh`` (commands), ``console`` (a session:
``$ command`` lines, each followed by what it prints), ``python``, ``json``/``yaml`` (data),
``text`` (anything else: output shown on its own, diagrams). tests/unit/test_docs_snippets.py
holds every command block to a test that runs it, or to the short list of those that cannot
run here, with the reason.

:class:`Session` runs a command block in ``bash``, one command after another, as typed at a
terminal: each command's output (stdout and stderr, as a terminal shows them) and exit
status are kept, ``$?`` carries from one command to the next (``echo $?`` shows it), and a
command that ends with ``&`` runs in the background (its output to a file) until the session
ends, when every process it started is stopped. The documentation is written for the default
topic prefix, ``symfonic``: a session under another prefix (each test's own) rewrites
``symfonic.<topic>`` in the commands to its prefix and its prefix back in what they print.
In a shown output, ``…`` stands for any text and a line ``...`` for any further lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Every page whose code a user may copy.
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md"), ROOT / "helm/symfonic-stream/README.md"])
#: How long what a session left running may take to stop (then it is killed).
STOP_S = 60.0
#: The languages of command blocks.
COMMANDS = frozenset({"bash", "sh", "shell", "console"})
_FENCE = re.compile(r"^( *)```(\S*)[^\n]*\n(.*?)^ *```", re.S | re.M)


@dataclass(frozen=True, slots=True)
class Block:
    page: str  # its path from the repository's root
    line: int
    language: str
    text: str  # without the block's own indentation

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language or 'no language'})"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        indent = len(match.group(1))
        body = "".join(line[indent:] if line[:indent].isspace() else line
                       for line in match.group(3).splitlines(keepends=True))
        found.append(Block(str(page.relative_to(ROOT)), text[:match.start()].count("\n") + 1,
                           match.group(2), body))
    return found


def command_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language in COMMANDS]


def command_block(page: str, naming: str) -> Block:
    """The one command block of ``page`` (a path from the root, or a docs/ page's name)
    holding the text ``naming``."""
    path = ROOT / page if (ROOT / page).is_file() else DOCS / page
    [block] = [b for b in blocks(path) if b.language in COMMANDS and naming in b.text]
    return block


@dataclass(frozen=True, slots=True)
class Command:
    text: str
    expected: tuple[str, ...]  # what a console block shows it prints ((): not shown)
    background: bool


def commands(block: Block) -> list[Command]:
    """The block's commands: ``$`` lines of a console block (with the lines they print),
    every line of a bash block; a line ending in ``\\`` goes on on the next."""
    found: list[Command] = []
    pending = ""
    for line in block.text.splitlines():
        if block.language == "console" and not line.startswith("$ ") and not pending:
            if found:
                last = found[-1]
                found[-1] = Command(last.text, (*last.expected, line), last.background)
            continue
        if block.language == "console" and not pending:
            line = line[2:]
        if not line.strip() and not pending:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = pending + line
        pending = ""
        background = re.search(r"(?<!&)&\s*(#.*)?$", text) is not None
        found.append(Command(text, (), background))
    return found


def _matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    for number, pattern in enumerate(expected):
        if pattern.strip() == "...":
            return True
        if number >= len(actual):
            return False
        regex = ".*".join(re.escape(part) for part in pattern.rstrip().split("…"))
        if not re.fullmatch(regex, actual[number].rstrip()):
            return False
    return len(actual) == len(expected)


@dataclass
class Ran:
    command: Command
    status: int
    output: list[str] = field(default_factory=list)


class Session:
    """``async with Session(blocks, cwd, env, prefix) as ran:`` runs every command of
    ``blocks`` in one bash, then :meth:`check` holds each to what the page shows; leaving
    the block stops whatever the commands left running."""

    def __init__(self, blocks: list[Block], cwd: Path, env: Mapping[str, str],
                 prefix: str = "symfonic", timeout_s: float = 240) -> None:
        self.blocks, self.cwd, self.env, self.prefix = blocks, cwd, dict(env), prefix
        self.timeout_s = timeout_s
        self.ran: list[Ran] = []
        self._process: asyncio.subprocess.Process | None = None
        #: The script and the background commands' output: beside, not in, ``cwd``.
        self.scratch = Path(tempfile.mkdtemp(prefix="docs-session-"))

    def _script(self, steps: list[Command], mark: str) -> str:
        lines = []
        for number, step in enumerate(steps):
            text = step.text
            if self.prefix != "symfonic":
                text = re.sub(r"\bsymfonic\.(?=[a-z])", f"{self.prefix}.", text)
            if step.background:  # its output to a file: it must not hold the pipe open
                log = self.scratch / f"background-{number}.log"
                text = re.sub(r"(?<!&)&\s*(#.*)?$", f"> {log} 2>&1 &", text)
            # (a newline before the end mark: an output may not end with one; a blank line
            # last in an output is dropped for it)
            # ($? carried past the marks: `echo $?` shows the command before it)
            lines += [f"echo '{mark} begin {number}'; (exit $__s)", text,
                      f"__s=$?; printf '\\n{mark} end {number} %d\\n' $__s"]
        return "__s=0\n" + "\n".join(lines) + "\n"

    async def __aenter__(self) -> list[Ran]:
        steps = [c for block in self.blocks for c in commands(block)]
        mark = f"@@{uuid.uuid4().hex}"
        script = self.scratch / "session.sh"
        script.write_text(self._script(steps, mark))
        self._process = await asyncio.create_subprocess_exec(
            "bash", str(script), cwd=self.cwd, env=self.env, start_new_session=True,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(self._process.communicate(), self.timeout_s)
        current: list[str] | None = None
        for line in out.decode().replace(f"{self.prefix}.", "symfonic.").replace(
                f"{self.prefix}-", "symfonic-").splitlines():
            if line.startswith(f"{mark} begin "):
                current = []
            elif line.startswith(f"{mark} end "):
                number, status = map(int, line.split()[2:4])
                output = current or []
                if output and not output[-1]:
                    output.pop()
                self.ran.append(Ran(steps[number], status, output))
                current = None
            elif current is not None:
                current.append(line)
        assert len(self.ran) == len(steps), out.decode()
        return self.ran

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._process is None:
            return
        group = self._process.pid  # (the session's leader: every command is in its group)
        with contextlib.suppress(ProcessLookupError):  # what the commands left running
            os.killpg(group, signal.SIGTERM)
            deadline = time.monotonic() + STOP_S
            while time.monotonic() < deadline:  # until they are gone: their ports free
                os.killpg(group, 0)
                await asyncio.sleep(0.1)
            os.killpg(group, signal.SIGKILL)

    def check(self) -> None:
        """Each command printed what the page shows (when it shows something) and a command
        shown with no output exited 0 (a background one: started)."""
        for ran in self.ran:
            shown = ran.command.expected
            where = f"`{ran.command.text}` printed:\n" + "\n".join(ran.output)
            if shown:
                assert _matches(shown, ran.output), where + "\n\nthe page shows:\n" + "\n".join(
                    shown)
            else:
                assert ran.status == 0, f"exit status {ran.status}; {where}"


def tool_env(**settings: str) -> dict[str, str]:
    """The environment of a session: this interpreter's venv first on PATH (so
    ``symfonic-stream`` is the checkout's), no colours, and ``settings`` as SYMFONIC_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update({"NO_COLOR": "1", "COLUMNS": "200"},
               **{f"SYMFONIC_{k.upper()}": v for k, v in settings.items()})
    return env


def checkout_view(into: Path) -> Path:
    """A working directory whose ``.venv`` (this interpreter's) and ``tests`` are the
    checkout's (links), so a block's relative paths resolve and what it writes stays out of
    the checkout."""
    into.mkdir(parents=True, exist_ok=True)
    for name, target in ((".venv", Path(sys.prefix)), ("tests", ROOT / "tests")):
        if not (into / name).exists():
            (into / name).symlink_to(target)
    return into
