"""The test kit's pytest plugin: registered as the ``pytest11`` entry point
``symfonic_stream.testing.plugin`` (``pip install symfonic-stream`` loads it; or
``pytest -p symfonic_stream.testing.plugin``). Its fixtures, each made for one test:

- ``symfonic_settings``: the settings a driver runs under (the ``SYMFONIC_*``
  environment); override the fixture to change them;
- ``symfonic_driver``: a :class:`~symfonic_stream.testing.TopologyTestDriver` of every
  deployed consumer (``typed``, ``chunks``, ``pauses``, ``resumes``) under them, its clock
  at 0, closed after the test; a test that needs others makes its own driver;
- ``symfonic_reviewer``: a :class:`~symfonic_stream.testing.FakeReviewer` on that driver,
  ready to use;
- ``symfonic_run_reader``: makes :class:`~symfonic_stream.testing.FakeRunReader` s on
  that driver: ``symfonic_run_reader("run-1", projection="chunks")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from symfonic_stream.config import Settings
from symfonic_stream.sdk.reader import RunReader
from symfonic_stream.testing.driver import TopologyTestDriver
from symfonic_stream.testing.fakes import FakeReviewer

__all__ = ["symfonic_driver", "symfonic_reviewer", "symfonic_run_reader", "symfonic_settings"]


@pytest.fixture
def symfonic_settings() -> Settings:
    """The settings of ``symfonic_driver``: the ``SYMFONIC_*`` environment's."""
    return Settings()


@pytest.fixture
def symfonic_driver(symfonic_settings: Settings) -> Iterator[TopologyTestDriver]:
    """Every deployed consumer on a broker in memory, the clock at 0."""
    with TopologyTestDriver(settings=symfonic_settings) as driver:
        yield driver


@pytest.fixture
def symfonic_reviewer(symfonic_driver: TopologyTestDriver) -> FakeReviewer:
    """A reviewer (the SDK's) on ``symfonic_driver``'s queues and verdicts, ready (no
    ``async with`` needed)."""
    return FakeReviewer(symfonic_driver)


@pytest.fixture
def symfonic_run_reader(symfonic_driver: TopologyTestDriver) -> Callable[..., RunReader]:
    """Makes run readers (the SDK's) on ``symfonic_driver``'s projections."""

    def make(run_id: str, **options: Any) -> RunReader:
        return symfonic_driver.run_reader(run_id, **options)

    return make
