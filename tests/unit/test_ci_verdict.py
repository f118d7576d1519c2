""".ci/verdict.py: CI fails when make test's output shows a failure make's status does not
carry: no tests collected, or a broker part that said it was skipped (issue 45: with
SYMFONIC_BOOTSTRAP_SERVERS set in CI's environment the broker matrix printed "skipped" and CI
stayed green)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_verdict", ROOT / ".ci" / "verdict.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ci = _load()
PASSED = "make: test-main finished in 349 s\nmake: test-acls passed in 71 s\n"


def test_a_clean_run_keeps_makes_status() -> None:
    assert ci.verdict(PASSED, 0) == (0, [])
    assert ci.verdict(PASSED, 2)[0] == 2


def test_a_skipped_broker_part_fails_ci_and_is_named() -> None:
    output = PASSED + ("make: test-cluster needs the project's 3-node cluster; "
                       "SYMFONIC_BOOTSTRAP_SERVERS is set: skipped\n")
    status, said = ci.verdict(output, 0)
    assert status == ci.SKIPPED_STATUS
    assert "test-cluster (it needs the project's 3-node cluster)" in said[0]
    assert ci.verdict(output, 2)[0] == 2  # make's own failure keeps its status


def test_no_tests_collected_fails_ci() -> None:
    assert ci.verdict("make: pytest exited with status 5\n", 0)[0] == ci.NO_TESTS_STATUS
    assert ci.verdict("============ no tests ran in 0.01s ============\n", 0)[0] == 5


def test_the_times_are_printed_and_the_status_returned(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "make.log"
    log.write_text(PASSED + "make: test-versions needs the project's brokers; "
                   "SYMFONIC_BOOTSTRAP_SERVERS is set: skipped\n")
    assert ci.main([str(log), "0"]) == ci.SKIPPED_STATUS
    out, err = capsys.readouterr()
    assert "   make: test-main finished in 349 s" in out
    assert "test-versions" in err and "SYMFONIC_BOOTSTRAP_SERVERS is set in CI's" in err


@pytest.mark.parametrize("part", ["test-cluster", "test-versions", "test-acls"])
def test_every_broker_part_skips_in_the_form_ci_recognises(part: str) -> None:
    """The parts' skip lines, as make expands them (``make -n``; ``-o venv``: not the venv's
    recipe), are what the verdict reads: a new wording must not slip past CI."""
    done = subprocess.run(["make", "-n", "-o", "venv", "--no-print-directory", part,
                           "SYMFONIC_BOOTSTRAP_SERVERS=127.0.0.1:1"],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    echoed = [m.group(1) for line in done.stdout.splitlines()
              if (m := re.match(r'^echo "(make: .*skipped)"$', line))]
    assert len(echoed) == 1, done.stdout
    assert ci.SKIPPED.match(echoed[0]).group(1) == part


def test_the_registry_and_tracing_parts_are_in_make_test_and_report_as_the_others() -> None:
    """test-registry (mk/registry.mk) runs in make test after test-main, and test-tracing
    (mk/otel.mk) after it; each says its time and pytest's status in the forms the verdict
    reads (with_kafka's), like test-main."""
    rule = re.search(r"^test: (.*(?:\\\n.*)*)", (ROOT / "Makefile").read_text(), re.M)
    assert rule is not None
    parts = rule.group(1).replace("\\\n", " ").split()
    assert parts.index("test-registry") == parts.index("test-main") + 1
    assert parts.index("test-tracing") == parts.index("test-registry") + 1
    for part in ("test-main", "test-registry", "test-tracing"):
        done = subprocess.run(["make", "-n", "-o", "venv", "-o", "web", "--no-print-directory",
                               part], cwd=ROOT, capture_output=True, text=True, check=True,
                              timeout=60)
        assert f'echo "make: {part} finished in $((SECONDS - t0)) s"' in done.stdout
        assert "exited with status $rc" in done.stdout
        assert ci.TIMES.match(f"make: {part} finished in 82 s")
