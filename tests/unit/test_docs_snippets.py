"""The documentation's worked examples are run, not just read.

docs/records.md's offline example (``symfonic-stream project``) is executed: its input files
are written from the ``cat`` blocks, the command is run, and what it prints and the
dead-letter file it writes must be exactly what the page shows. Every ``python`` block of
the documentation is run too: here the publisher's without a broker (it must end in the
message it promises, with nothing left open), and every one against the broker in
tests/integration/test_docs_snippets_live.py; :func:`test_every_python_block_is_run` keeps
that list whole.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
RECORDS = DOCS / "records.md"
ROOT = DOCS.parent
#: Every page whose code a user may copy.
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md"), ROOT / "helm/symfonic-stream/README.md"])
#: The python blocks the tests run, by (page, a line that names the block).
RUN_BLOCKS = {
    ("tools.md", "async with EventPublisher() as publisher:"),
    ("tools.md", 'async with RunReader("run-1", follow=False, idle_timeout_s=60) as reader:'),
    ("pauses.md", 'async with Reviewer("symfonic-review.acme.ui") as reviewer:'),
    ("tools.md", 'async with ResumeReader("kernel-1", owner) as resumes:'),
    # Run by tests/unit/test_consumers.py and, on the broker, test_consumer_declared.py.
    ("engine.md", "from symfonic_stream.consumers import Consumer, Engine, Resources"),
}


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def python_block(page: str, naming: str) -> str:
    """The one python block of docs/``page`` holding the line ``naming``."""
    [block] = [b for b in python_blocks(DOCS / page) if naming in b]
    return block


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


def test_every_python_block_is_run() -> None:
    """Each python block of the documentation is one the tests run (a new one must be
    added to RUN_BLOCKS, and run)."""
    found = {(page.name, block) for page in PAGES for block in python_blocks(page)}
    named = {(page, python_block(page, naming)) for page, naming in RUN_BLOCKS}
    assert found == named


def test_the_publisher_example_without_kafka_ends_in_its_message(tmp_path: Path) -> None:
    """No broker at the address: the example's own message, no traceback, and no client
    left unclosed (aiokafka warns "Unclosed AIOKafkaProducer" when one is collected)."""
    script = tmp_path / "publisher.py"
    script.write_text(python_block("tools.md", "async with EventPublisher() as publisher:"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env.update(SYMFONIC_BOOTSTRAP_SERVERS="127.0.0.1:9", SYMFONIC_STARTUP_TIMEOUT_S="1",
               PYTHONWARNINGS="always", PYTHONDEVMODE="1")
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("Kafka did not answer: connecting to Kafka")
    assert "Traceback" not in done.stderr
    assert "Unclosed" not in done.stderr and "ResourceWarning" not in done.stderr
