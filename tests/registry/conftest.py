"""The schema registry's tests run against the registry ``scripts/registry.sh`` started:
``make test-registry`` runs them under ``scripts/registry.sh run``, which names it in
``SYMFONIC_REGISTRY_URL`` (its Confluent-compatible base URL); elsewhere these tests are
deselected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SYMFONIC_REGISTRY_URL"):
        return
    dropped = [item for item in items if _HERE in item.path.parents]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _HERE not in item.path.parents]


@pytest.fixture
def registry_url() -> str:
    return os.environ["SYMFONIC_REGISTRY_URL"]


@pytest.fixture(scope="session")
def bootstrap_servers() -> str:
    """The Kafka make test-registry runs with (tests/integration/harness.py reads the same)."""
    return os.environ.get("SYMFONIC_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
