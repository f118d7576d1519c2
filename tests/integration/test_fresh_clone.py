"""`pip install .` in a fresh clone, on a machine without npm, serves the review console.

The README's install, as a new user runs it: the clone's files only (nothing an earlier build
or `make web` left), Node.js's commands off PATH, then `symfonic-stream gateway` from that
install against the broker, and `/review` and its script fetched over HTTP. The console's
script is committed package data (tests/packaging/test_console_bundle.py holds it to
web/package-lock.json); before it was, the install had none and the console answered
`not_built`. Dependencies come from the test venv (no index needed: tests/packaging/sources.py).
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from urllib.parse import urljoin

import httpx

from symfonic_stream.runtime.workers import free_port
from tests.docs_blocks import command_block, commands
from tests.packaging.sources import (
    NODE_TOOLS,
    ROOT,
    build_env,
    fresh_clone,
    path_without,
    pip_install,
    venv_with_dependencies,
)

from .harness import consumer_env, create_topics, unique_prefix

BUNDLE = ROOT / "symfonic_stream" / "gateway" / "static" / "console.js"


def test_the_install_blocks_are_what_this_test_runs() -> None:
    """README.md's and install.md's install blocks: `pip install .`, then `--version` (run
    below, the dependencies from the test venv instead of the index)."""
    for page in ("README.md", "install.md"):
        typed = [c.text.split("#")[0].split() for c in commands(command_block(page,
                                                                           "pip install ."))]
        assert typed == [["pip", "install", "."], ["symfonic-stream", "--version"]], page


async def test_pip_install_from_a_fresh_clone_without_npm_serves_the_console(
    tmp_path: Path,
) -> None:
    clone = fresh_clone(tmp_path / "clone")
    env = build_env()
    env["PATH"] = path_without(NODE_TOOLS, env["PATH"], tmp_path / "shadows")
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in NODE_TOOLS)
    python = venv_with_dependencies(tmp_path / "venv")
    pip_install(python, ".", env, cwd=clone)  # the README's `pip install .`, offline
    version = await asyncio.create_subprocess_exec(
        str(tmp_path / "venv" / "bin" / "symfonic-stream"), "--version", cwd=tmp_path,
        env=env, stdout=asyncio.subprocess.PIPE)
    said, _ = await version.communicate()
    assert said.decode().startswith("symfonic-stream ") and "json scan: native" in said.decode()

    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    http = free_port()
    gateway = await asyncio.create_subprocess_exec(
        str(tmp_path / "venv" / "bin" / "symfonic-stream"), "gateway", cwd=tmp_path,
        env={**consumer_env(prefix, gateway_port=http, metrics_port=free_port()),
             "PATH": env["PATH"]},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        # The port is bound at start; a request waits until the gateway serves.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http}", timeout=60,
                                     transport=httpx.AsyncHTTPTransport(retries=5)) as client:
            page = await client.get("/review")
            [src] = re.findall(r'<script src="([^"]+)"', page.text)
            script = await client.get(urljoin("/review", src))
    finally:
        gateway.terminate()
        _, err = await asyncio.wait_for(gateway.communicate(), 60)
    assert page.status_code == 200, err.decode()
    assert script.status_code == 200, script.text[:200]
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.content == BUNDLE.read_bytes()
