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
