"""The distribution a user installs: one wheel with the native extension and the review
console's script inside the package, a sdist that builds it wherever cargo is, and a loud
pure-Python install where it is not.

Each build runs on a fresh clone's files (so no ``build/``, extension or ignored bundle left
by an earlier build can leak into the wheel), with cargo's target directory shared with the
checkout's, so an unchanged crate is linked, not compiled again. No broker.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.packaging.sources import (
    ROOT,
    build_env,
    fresh_clone,
    pip_install,
    venv_with_dependencies,
)

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
#: The extension inside the package, as the stable ABI names it.
EXTENSION = "symfonic_stream/_native.abi3.so"
#: The review console's script: committed, so every build carries it without npm.
CONSOLE = "symfonic_stream/gateway/static/console.js"


def _sources(into: Path) -> Path:
    return fresh_clone(into)


def _env(*, cargo: bool) -> dict[str, str]:
    return build_env(cargo=cargo)


def _pip_wheel(source: str | Path, out: Path, *, cargo: bool = True) -> Path:
    """``pip wheel SOURCE`` (no dependencies, the venv's setuptools-rust); the wheel."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--wheel-dir", str(out), str(source)],
        env=_env(cargo=cargo), capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = out.glob("symfonic_stream-*.whl")
    return wheel


def _version_output(wheel: Path, into: Path) -> str:
    """``symfonic-stream --version`` after ``pip install --no-deps WHEEL`` into a fresh venv
    with the test venv's dependencies."""
    python = venv_with_dependencies(into)
    pip_install(python, wheel, build_env(), into)
    [site] = (into / "lib").glob("python3.*/site-packages")
    where = subprocess.run(
        [python, "-c", "import symfonic_stream; print(symfonic_stream.__file__)"],
        capture_output=True, text=True, check=True, cwd=into,
    )
    assert Path(where.stdout.strip()).is_relative_to(site)  # the wheel's, not the checkout's
    done = subprocess.run([into / "bin" / "symfonic-stream", "--version"], cwd=into,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _sources(tmp_path_factory.mktemp("src"))
    return _pip_wheel(source, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_carries_the_extension_inside_the_package(wheel: Path) -> None:
    name, version, python, abi, _platform = wheel.stem.split("-")
    assert (name, version, python, abi) == ("symfonic_stream", VERSION, "cp311", "abi3")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"symfonic_stream-{VERSION}.dist-info/METADATA").decode()
    assert EXTENSION in names
    for data in ("symfonic_stream/py.typed", "symfonic_stream/_native.pyi",
                 "symfonic_stream/gateway/static/index.html", CONSOLE,
                 f"symfonic_stream-{VERSION}.dist-info/licenses/LICENSE"):
        assert data in names
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"symfonic_stream", f"symfonic_stream-{VERSION}.dist-info"}  # one package
    assert "Requires-Dist: symfonic-scan" not in metadata


def test_the_installed_wheel_says_its_native_paths_are_active(
    wheel: Path, tmp_path: Path
) -> None:
    out = _version_output(wheel, tmp_path)
    assert out.splitlines()[0] == f"symfonic-stream {VERSION}"
    assert "json scan: native" in out and "record batches: native" in out
    assert "aiokafka " in out and "missing" not in out


def test_without_cargo_the_build_goes_on_and_says_so(tmp_path: Path) -> None:
    source = _sources(tmp_path / "src")
    assert _env(cargo=False)["PATH"] != _env(cargo=True)["PATH"]  # cargo was found, and hidden
    bare = _pip_wheel(source, tmp_path / "wheel", cargo=False)
    with zipfile.ZipFile(bare) as archive:
        assert EXTENSION not in archive.namelist()
    out = _version_output(bare, tmp_path / "installed")
    assert "json scan: off (pure Python)" in out
    assert "native extension missing" in out


def test_the_sdist_carries_the_crate_and_builds_the_extension(tmp_path: Path) -> None:
    source = _sources(tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         "print(b.build_sdist(sys.argv[1]))", str(tmp_path / "sdist")],
        cwd=source, env=_env(cargo=True), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    sdist = tmp_path / "sdist" / done.stdout.split()[-1]
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for needed in ("native/Cargo.toml", "native/Cargo.lock", "native/src/lib.rs",
                   "native/src/batch.rs", "symfonic_stream/_native.pyi", "pyproject.toml",
                   "LICENSE", "CHANGELOG.md", CONSOLE, "web/package-lock.json"):
        assert needed in names
    assert not any(n.startswith("native/target") or n.endswith(".so") for n in names)
    with zipfile.ZipFile(_pip_wheel(sdist, tmp_path / "wheel")) as archive:
        assert EXTENSION in archive.namelist() and CONSOLE in archive.namelist()
