"""What the packaging tests build from and with: a fresh clone's files, a PATH without a
tool, a venv that has the test venv's dependencies but not the checkout's package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CARGO_HOME_BIN = Path.home() / ".cargo" / "bin"
#: Node.js's commands: a machine "without npm" has none of them.
NODE_TOOLS = ("node", "npm", "npx", "corepack")


def fresh_clone(into: Path) -> Path:
    """The files a clone of the working tree's next commit holds (what git tracks, and new
    files it does not ignore, as they are now), copied to ``into``: nothing a build or an
    earlier ``make`` left beside them (``build/``, ``*.so``, ``node_modules``, an ignored
    bundle) comes along."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True).stdout.decode()
    into.mkdir(exist_ok=True)
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, into / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return into


def path_without(tools: Iterable[str], path: str, shadows: Path) -> str:
    """``path`` with none of ``tools``: each directory holding one is replaced by a
    directory (under ``shadows``) of links to everything else it holds."""
    unwanted = set(tools)
    kept = []
    for number, entry in enumerate(path.split(os.pathsep)):
        directory = Path(entry)
        if not any((directory / tool).exists() for tool in unwanted):
            kept.append(entry)
            continue
        shadow = shadows / f"bin-{number}"
        shadow.mkdir(parents=True, exist_ok=True)
        for item in directory.iterdir():
            if item.name not in unwanted:
                (shadow / item.name).symlink_to(item)
        kept.append(str(shadow))
    return os.pathsep.join(kept)


def build_env(*, cargo: bool = True) -> dict[str, str]:
    """The environment of a build: cargo's target directory shared with the checkout's (an
    unchanged crate is linked, not compiled again), and cargo on PATH or not at all."""
    env = {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "native" / "target")}
    paths = [*env["PATH"].split(os.pathsep), str(CARGO_HOME_BIN)]
    if not cargo:
        paths = [p for p in paths if not (Path(p) / "cargo").exists()]
    env["PATH"] = os.pathsep.join(paths)
    return env


def venv_with_dependencies(into: Path) -> Path:
    """A fresh venv at ``into`` whose dependencies are the test venv's (a ``.pth`` naming
    its site-packages: that directory's own ``.pth`` files, the checkout's editable install
    among them, stay unread); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(into)], check=True)
    [site] = (into / "lib").glob("python3.*/site-packages")
    [deps] = [p for p in map(Path, sys.path) if p.name == "site-packages"]
    (site / "dependencies.pth").write_text(f"{deps}\n")
    return into / "bin" / "python"


def pip_install(python: Path, what: str | Path, env: dict[str, str], cwd: Path) -> None:
    """``pip install --no-deps WHAT`` into ``python``'s venv (built, when ``what`` is a source
    tree, by the test venv's setuptools-rust, without build isolation: no index needed)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-build-isolation", "--disable-pip-version-check", str(what)],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
