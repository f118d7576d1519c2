"""The schema registry's tests run against the registry ``scripts/registry.sh`` started:
``make test-registry`` starts it and names it in ``SYMFONIC_TEST_REGISTRY_URL`` (its
Confluent-compatible base URL); elsewhere these tests are deselected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SYMFONIC_TEST_REGISTRY_URL"):
        return
    dropped = [item for item in items if _HERE in item.path.parents]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _HERE not in item.path.parents]


@pytest.fixture
def registry_url() -> str:
    return os.environ["SYMFONIC_TEST_REGISTRY_URL"]
