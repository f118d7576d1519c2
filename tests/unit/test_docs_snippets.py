"""The documentation's worked examples are run, not just read.

Every fenced block names its language, and every command block (``bash``, ``sh``,
``console``) is run by a test, here or against the broker
(tests/integration/test_docs_snippets_live.py, test_fresh_clone.py), or is one of the few
in :data:`NOT_RUN`, each with the reason it cannot run here: :func:`test_every_command_block_
is_run_or_listed` keeps both lists whole. A console block's shown output is held to what its
commands print (tests/docs_blocks.py says how). Every ``python`` block is run too: here the
publisher's without a broker (it must end in the message it promises, with nothing left
open), and every one against the broker; :func:`test_every_python_block_is_run` keeps that
list whole. docs/records.md's offline example (``symfonic-stream project``) is run with its
input files written from the ``cat`` blocks, and what it prints and the dead-letter file it
writes must be exactly what the page shows.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.docs_blocks import (
    DOCS,
    PAGES,
    ROOT,
    Session,
    blocks,
    command_block,
    command_blocks,
    tool_env,
)

RECORDS = DOCS / "records.md"
#: The python blocks the tests run, by (page, a line that names the block).
RUN_BLOCKS = {
    ("tools.md", "async with EventPublisher() as publisher:"),
    ("tools.md", 'async with RunReader("run-1", follow=False, idle_timeout_s=60) as reader:'),
    ("pauses.md", 'async with Reviewer("symfonic-review.acme.ui") as reviewer:'),
    ("tools.md", 'async with ResumeReader("kernel-1", owner) as resumes:'),
    # Run by tests/unit/test_consumers.py and, on the broker, test_consumer_declared.py.
    ("engine.md", "from symfonic_stream.consumers import Consumer, Engine, Resources"),
    # Run, each as a pytest module, by tests/unit/test_testing_kit.py.
    ("testing-your-code.md", "def test_a_lost_event_becomes_a_gap_once_its_timeout_passes"),
    ("testing-your-code.md", "async def transcript(reader: RunReader) -> str:"),
    ("testing-your-code.md", "def test_the_count_survives_a_crash() -> None:"),
    ("testing-your-code.md", "async def approve_everything(reviewer: Reviewer)"),
}
_HERE = "tests/unit/test_docs_snippets.py"
_LIVE = "tests/integration/test_docs_snippets_live.py"
#: The command blocks the tests run: (page, a text naming the block) -> the test file that
#: runs it (it names the block by the same text).
RUN_COMMANDS = {
    ("README.md", "make demo"): _LIVE,
    ("README.md", ".venv/bin/symfonic-stream topics ensure"): _LIVE,
    ("README.md", "pip install ."): "tests/integration/test_fresh_clone.py",
    ("install.md", "pip install ."): "tests/integration/test_fresh_clone.py",
    ("install.md", "_SYMFONIC_STREAM_COMPLETE=bash_source"): _HERE,
    ("configuration.md", "symfonic-stream topics ensure"): _HERE,
    ("security.md", "symfonic-stream acls --consumer pauses"): _HERE,
    ("schemas.md", "symfonic-stream schemas check"): _HERE,
    ("records.md", "symfonic-stream project"): _HERE,
    ("engine.md", "symfonic-stream run typed &"): _LIVE,
    ("schema-registry.md", "symfonic-stream schemas register"):
        "tests/registry/test_schema_registry.py",
    ("gateway.md", "symfonic-stream gateway &"): _LIVE,
    ("tools.md", "symfonic-stream publish runs.jsonl"): _LIVE,
    ("tools.md", "symfonic-stream publish --json --dry-run"): _LIVE,
    ("tools.md", "symfonic-stream tail golden-run --follow"): _LIVE,
    ("tools.md", "symfonic-stream tail golden-run --json"): _LIVE,
    ("tools.md", "symfonic-stream replay"): _LIVE,
}
_CLUSTER = ("needs a Kubernetes cluster (and the image in a registry); make chart-check "
            "renders, lints and unit-tests the chart with these values' kind")
#: The command blocks no test runs, and why: (page, a text naming the block, or None for
#: every command block of the page) -> the reason.
NOT_RUN = {
    ("README.md", "make test"): "it is the test suite, this test included",
    ("deploy.md", "docker build"): "needs Docker and a registry; make image builds this "
                                   "Dockerfile (buildah) and runs the image (test_image.py)",
    ("deploy.md", "helm install symfonic"): _CLUSTER,
    ("deploy.md", "create secret generic"): _CLUSTER,
    ("deploy.md", "gateway.enabled=true"): _CLUSTER,
    ("deploy.md", "-f my-values.yaml"): _CLUSTER,
    ("deploy.md", "helm uninstall"): _CLUSTER,
    ("helm/symfonic-stream/README.md", "helm install symfonic"): _CLUSTER,
    ("security.md", "auth-start"): "starts the authorizer broker; make test-acls runs the "
                                   "same (tests/integration/test_acls_live.py)",
    ("schemas.md", "make schemas-check"): "make test runs make schemas-check; make schemas "
                                          "rewrites the checkout's files it checks",
    ("dev-broker.md", None): "start and stop brokers of their own (ports, storage, the "
                             "3-node cluster); make test runs scripts/kafka.sh so itself",
    ("benchmarks.md", None): "minutes of load that prove nothing as a test (performance "
                             "lives in bench/); make test-bench runs each one's quick form",
}


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def python_block(page: str, naming: str) -> str:
    """The one python block of docs/``page`` holding the line ``naming``."""
    [block] = [b for b in python_blocks(DOCS / page) if naming in b]
    return block


def console_blocks(page: Path) -> list[str]:
    return [b.text for b in blocks(page) if b.language == "console"]


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


def _page(path: str) -> str:
    return path.removeprefix("docs/")


def test_every_block_names_its_language() -> None:
    """A fence says what it holds: a reader (and this test) knows a command from output."""
    bare = [str(b) for page in PAGES for b in blocks(page) if not b.language]
    assert bare == []


def test_every_command_block_is_run_or_listed() -> None:
    """Each command block is run by the test RUN_COMMANDS names (which names it by the same
    text) or is in NOT_RUN with its reason; and each entry names a block that exists."""
    found = command_blocks()
    run = {command_block(page, naming): test for (page, naming), test in RUN_COMMANDS.items()}
    unrun = {b for b in found for (page, naming) in NOT_RUN
             if _page(b.page) == page and (naming is None or naming in b.text)}
    for (page, naming) in NOT_RUN:
        assert any(_page(b.page) == page and (naming is None or naming in b.text)
                   for b in found), f"NOT_RUN names no block: {page} {naming}"
    assert [str(b) for b in found if b not in run and b not in unrun] == []
    assert [str(b) for b in run if b in unrun] == []
    for (page, naming), test in RUN_COMMANDS.items():
        assert naming in (ROOT / test).read_text(), f"{test} does not run {page}: {naming}"


async def test_the_misspelt_setting_example(tmp_path: Path) -> None:
    session = Session([command_block("configuration.md", "symfonic-stream topics ensure")],
                      tmp_path, tool_env())
    async with session:
        session.check()


async def test_the_acls_examples_print_kafka_acls_lines(tmp_path: Path) -> None:
    session = Session([command_block("security.md", "symfonic-stream acls --consumer pauses")],
                      tmp_path, tool_env())
    async with session as ran:
        session.check()
    for step in ran:
        assert step.output and all(line.startswith("kafka-acls.sh ") for line in step.output)
    assert "User:reviewer-globex" in "\n".join(ran[1].output)
    assert all("--command-config admin.properties" in line for line in ran[2].output)


async def test_the_schemas_check_example_finds_schemas_current() -> None:
    session = Session([command_block("schemas.md", "symfonic-stream schemas check")],
                      ROOT, tool_env())  # (it reads schemas/, it writes nothing)
    async with session:
        session.check()


def test_the_shell_completion_example(tmp_path: Path) -> None:
    """The bash line is evaluated in bash, after which bash completes the command; the zsh
    and fish lines (no such shell here) must produce their shells' scripts."""
    block = command_block("install.md", "_SYMFONIC_STREAM_COMPLETE=bash_source")
    bash, zsh, fish = block.text.splitlines()
    env = {**tool_env(), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", f"{bash}\ncomplete -p symfonic-stream"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "symfonic-stream" in done.stdout.splitlines()[-1]
    script = re.search(r'"\$\((.*)\)"', zsh)
    assert script is not None
    made = subprocess.run(["bash", "-c", script.group(1)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0 and "compdef" in made.stdout, made.stderr
    (tmp_path / ".config/fish/completions").mkdir(parents=True)
    made = subprocess.run(["bash", "-c", fish], env=env, capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0, made.stderr
    written = tmp_path / ".config/fish/completions/symfonic-stream.fish"
    assert "complete " in written.read_text()
