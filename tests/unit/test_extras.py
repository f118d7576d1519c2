"""Extras by role: a consumer's install carries what the consumers need; the interactive tools
(``[tools]``) and the gateway's web stack (``[gateway]``) are extras, and a command whose
extra is missing says which one to install.

"Missing" is made in a subprocess by marking the extra's modules absent in ``sys.modules``
(so an import of them fails as if they were not installed).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from symfonic_stream.cli import COMMANDS, EXTRAS

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
GOLDEN_RUN = ROOT / "tests" / "golden" / "golden_run.jsonl"


def _requirements(extra: str | None) -> list[Requirement]:
    lines = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _import_names(distribution: str) -> set[str]:
    """The top-level modules an installed distribution provides (its metadata's word)."""
    return {name for name, dists in metadata.packages_distributions().items()
            if distribution.lower() in {d.lower() for d in dists}}


def _cli(*args: str, absent: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    script = ("import sys; sys.modules.update(dict.fromkeys(sys.argv[1].split(',')));"
              " from symfonic_stream.cli import main; main(sys.argv[2:])")
    return subprocess.run([sys.executable, "-c", script, ",".join(absent), *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_consumers_install_leaves_out_the_tools_and_the_web_stack() -> None:
    base = {r.name for r in _requirements(None)}
    for heavy in ("rich", "pygments", "markdown-it-py", "starlette", "uvicorn",
                  "sse-starlette", "pyjwt"):
        assert heavy not in base
    assert {r.name for r in _requirements("tools")} == {"rich"}
    [uvicorn] = [r for r in _requirements("gateway") if r.name == "uvicorn"]
    assert "standard" in uvicorn.extras  # httptools, uvicorn's C HTTP parser
    assert {r.name for r in _requirements("all")} == {"symfonic-stream"}
    # [rocksdb] belongs to a setting (SYMFONIC_STATE_DIR, checked at start), not a command;
    # [tracing] to the SDKs, [otel] to the OTEL_* variables, checked at start
    # (docs/metrics.md, "Tracing").
    assert set(_requirements("all")[0].extras) == {*EXTRAS, "rocksdb", "tracing", "otel"}
    assert {r.name for r in _requirements("tracing")} == {"opentelemetry-api"}
    assert {r.name for r in _requirements("otel")} == {
        "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}
    assert "rocksdict" in _import_names(_requirements("rocksdb")[0].name)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_the_cli_knows_each_extra_by_the_modules_it_installs(extra: str) -> None:
    provided = set().union(*(_import_names(r.name) for r in _requirements(extra)))
    assert set(EXTRAS[extra]) <= provided
    for name in EXTRAS[extra]:  # and each of them is installed by this extra alone
        assert not any(name in _import_names(r.name) for r in _requirements(None))


@pytest.mark.parametrize(("command", "extra"),
                         [(name, extra) for name, (_, extra) in COMMANDS.items() if extra])
def test_a_command_without_its_extra_names_the_extra(command: str, extra: str) -> None:
    done = _cli(command, "x", "--follow", absent=EXTRAS[extra])
    assert done.returncode == 2
    assert f"needs the [{extra}] extra" in done.stderr
    assert f"pip install 'symfonic-stream[{extra}]'" in done.stderr
    listing = _cli("--help", absent=EXTRAS[extra])
    assert listing.returncode == 0, listing.stderr
    assert f"(needs the [{extra}] extra)" in listing.stdout


def test_the_consumers_commands_work_without_any_extra() -> None:
    absent = tuple(name for names in EXTRAS.values() for name in names)
    for command in [name for name, (_, extra) in COMMANDS.items() if extra is None]:
        done = _cli(command, "--help", absent=absent)
        assert done.returncode == 0, done.stderr
    done = _cli("project", "--projection", "typed", str(GOLDEN_RUN), absent=absent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") > 10
    script = ("import sys; sys.modules.update(dict.fromkeys(sys.argv[1].split(',')));"
              " import symfonic_stream.app.topologies, symfonic_stream.runtime.service,"
              " symfonic_stream.sdk.publisher, symfonic_stream.sdk.reader,"
              " symfonic_stream.sdk.reviewer")
    imported = subprocess.run([sys.executable, "-c", script, ",".join(absent)],
                              capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
