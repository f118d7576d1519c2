"""Shared pytest configuration for unit and integration tests (kept light on purpose).

The broker fixtures live in tests/integration/conftest.py.
"""

from __future__ import annotations

import os

# Imported here, at start-up, on purpose. Hypothesis's pytest plugin otherwise imports the
# package late (in its terminal-summary hook, when only integration tests ran), pytest's
# assertion rewriter then parses hypothesis's sources from a deep stack, and CPython 3.11.7
# intermittently fails that parse with "SystemError: AST constructor recursion depth
# mismatch" (a CPython bug fixed in 3.11.8), failing an otherwise green run.
import hypothesis  # noqa: F401
import pytest


def pytest_report_header(config: pytest.Config) -> str:
    bootstrap = os.environ.get("SYMFONIC_BOOTSTRAP_SERVERS") or "127.0.0.1:9092 (default)"
    return f"symfonic-stream: kafka bootstrap servers {bootstrap}"


_GROUP_LOST = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker with ``--dist loadgroup``: every test of an ``xdist_group`` must
    carry its group in its node id (xdist's way of telling the scheduler), or the group's
    tests run side by side. pytest 9.2 dropped it silently (pytest-xdist#1386), and the
    tests sharing the documented ports raced for them: such a test fails, saying why."""
    if not getattr(config.option, "loadgroup", False):  # (set by xdist on its workers only)
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            item.stash[_GROUP_LOST] = (
                "--dist loadgroup lost this test's xdist_group: pytest-xdist cannot mark "
                "groups with this pytest (pytest-xdist#1386), so its group would run side by "
                "side; install a pytest the project's pyproject.toml allows")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _GROUP_LOST in item.stash:
        pytest.fail(item.stash[_GROUP_LOST], pytrace=False)
