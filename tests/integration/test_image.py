"""The container image, run: what it says it is, and a consumer from it against the broker.

``make image`` builds the image (scripts/image.sh) and runs this file with
``SYMFONIC_TEST_IMAGE`` naming it; elsewhere these tests are deselected. Every container runs
as the image's own user with a read-only root file system (``--read-only``) on the host's
network, so it reaches the test broker as the other tests do. The golden run goes through
``run typed`` in the image and must come out as the reference oracle projects it, and render
as tests/golden/render_typed.txt.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.models.names import TopicNames
from symfonic_stream.runtime.workers import free_port
from tests.reference import oracle
from tests.unit.helpers import package_sources

from .harness import BOOTSTRAP, PARTITIONS, TopicReader, produce, unique_prefix

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("SYMFONIC_TEST_IMAGE", "")
RUN = [str(ROOT / "scripts" / "image.sh"), "run"]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
GOLDEN = ROOT / "tests" / "golden"


def container(*args: str, env: dict[str, str] | None = None,
              flags: tuple[str, ...] = ()) -> list[str]:
    """The command running ``symfonic-stream ARGS`` in the image, as the deployment does."""
    settings = [f"--env={name}={value}" for name, value in (env or {}).items()]
    return [*RUN, "--rm", "--read-only", "--network=host", *settings, *flags, IMAGE, *args]


def run(*args: str, env: dict[str, str] | None = None, flags: tuple[str, ...] = (),
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(container(*args, env=env, flags=flags), capture_output=True,
                          text=True, timeout=timeout, check=False)


def _inspect(field: str) -> Any:
    done = subprocess.run(["podman", "image", "inspect", "--format", f"{{{{json {field}}}}}",
                           IMAGE], capture_output=True, text=True, check=True)
    return orjson.loads(done.stdout)


def test_the_image_is_the_version_with_the_native_paths_as_a_non_root_user() -> None:
    assert _inspect(".Config.Labels")["org.opencontainers.image.version"] == VERSION
    assert _inspect(".Config.User") == "10001:10001"
    done = run("--version")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"symfonic-stream {VERSION}"
    assert "json scan: native" in lines and any(x.startswith("aiokafka ") for x in lines)
    who = run("-c", "import os; print(os.getuid(), os.getgid()); open('/written', 'w')",
              flags=("--entrypoint=python",))
    assert who.stdout.split() == ["10001", "10001"]
    assert "Read-only file system" in who.stderr  # nothing to write but the tmpfs podman mounts


def test_the_image_has_its_roles_commands_only() -> None:
    done = run("tail", "golden-run")
    assert done.returncode == 2  # the interactive tools are not the image's role
    assert "needs the [tools] extra" in done.stderr
    for command in ("run", "topics", "gateway"):
        assert run(command, "--help").returncode == 0
    # Every module imports (shared libraries the wheels link included), but the tools'.
    script = ("import importlib, pkgutil, symfonic_stream as p\n"
              "for m in pkgutil.walk_packages(p.__path__, 'symfonic_stream.'):\n"
              "    if m.name.endswith('__main__'): continue  # it runs the command\n"
              "    try: importlib.import_module(m.name)\n"
              "    except ModuleNotFoundError as e: print(m.name, e.name)\n")
    done = run("-c", script, flags=("--entrypoint=python",))
    assert done.returncode == 0, done.stderr
    missing = [line.split() for line in done.stdout.splitlines()]
    # (the [tools] extra's and the test kit's: neither is a deployed role's)
    assert missing and {name for _, name in missing} == {"rich", "pytest"}


def test_the_image_holds_this_checkouts_package() -> None:
    """The package in the image is the checkout's, file for file (a stale cached layer would
    hold an earlier build's), the review console's bundle included."""
    script = ("import hashlib, json, pathlib, symfonic_stream as p\n"
              "root = pathlib.Path(p.__file__).parent\n"
              "print(json.dumps({str(f.relative_to(root)): hashlib.sha256(f.read_bytes())"
              ".hexdigest() for f in root.rglob('*') if f.suffix in ('.py', '.js', '.html')}))\n")
    done = run("-c", script, flags=("--entrypoint=python",))
    assert done.returncode == 0, done.stderr
    in_image = orjson.loads(done.stdout)
    package = ROOT / "symfonic_stream"
    here = {str(f.relative_to(package)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in package_sources(package, (".py", ".js", ".html"))}
    assert "gateway/static/console.js" in in_image
    assert in_image == here


async def test_run_typed_from_the_image_writes_the_golden_run(tmp_path: Path) -> None:
    prefix = unique_prefix()
    names = TopicNames(prefix)
    env = {"SYMFONIC_BOOTSTRAP_SERVERS": BOOTSTRAP, "SYMFONIC_TOPIC_PREFIX": prefix,
           "SYMFONIC_PARTITIONS": str(PARTITIONS), "SYMFONIC_GAP_TIMEOUT_S": "2"}
    ensured = await asyncio.to_thread(run, "topics", "ensure", env=env)
    assert ensured.returncode == 0, ensured.stdout + ensured.stderr

    name = f"symfonic-test-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "typed.log"
    with log_path.open("wb") as log:
        consumer = await asyncio.create_subprocess_exec(
            *container("run", "typed", env={**env, "SYMFONIC_METRICS_PORT": str(free_port())},
                       flags=(f"--name={name}",)), stdout=log, stderr=log)
    try:
        lines = (GOLDEN / "golden_run.jsonl").read_bytes().splitlines()
        await produce(names.agent_events,
                      [(orjson.loads(line)["run_id"].encode(), line, []) for line in lines])
        with (GOLDEN / "golden_run.jsonl").open("rb") as source:
            expected, dead_letters = oracle.project(source, "typed")
        assert dead_letters == []
        async with TopicReader(names.stream_events) as reader:
            records = await reader.until(len(expected), within=120)
        logs = log_path.read_text(errors="replace")
        assert [r.value for r in records] == [oracle.encode(e) for e in expected], logs
        assert all(r.key == b"golden-run" for r in records)
        rendered = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "symfonic_stream", "tail", "golden-run", "--topic",
             names.stream_events, "--follow", "--timeout", "20"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "SYMFONIC_BOOTSTRAP_SERVERS": BOOTSTRAP, "NO_COLOR": "1"},
        )
        assert rendered.returncode == 0, rendered.stderr
        assert rendered.stdout == (GOLDEN / "render_typed.txt").read_text()
        consumer.terminate()  # podman passes SIGTERM on to the consumer: a graceful stop
        assert await asyncio.wait_for(consumer.wait(), 30) == 0, log_path.read_text()
        assert b"pure Python" not in log_path.read_bytes()  # native: no fallback warning
    finally:
        if consumer.returncode is None:
            remove = await asyncio.create_subprocess_exec("podman", "rm", "--force", name)
            await remove.wait()
            await asyncio.wait_for(consumer.wait(), 30)
