"""Test your code against symfonic-stream without Kafka (docs/testing-your-code.md).

- :class:`TopologyTestDriver`: declared consumers (``typed``, ``chunks``, ``pauses``,
  ``resumes``, ``copier``, or one of yours) run by the engine's own code on a broker in
  memory and a clock the test moves: pipe raw events or records, advance the clock, read
  each topic's records with their keys and headers, answer tickets, crash and restore;
- :class:`FakeRunReader`, :class:`FakeReviewer`, :class:`FakeResumeReader`: the SDK's run
  reader, reviewer and resume reader on a driver's topics;
- a pytest plugin (:mod:`symfonic_stream.testing.plugin`, the ``pytest11`` entry point)
  with these as fixtures: ``symfonic_driver``, ``symfonic_settings``,
  ``symfonic_reviewer``, ``symfonic_run_reader``.

Nothing in the product imports this package.
"""

from symfonic_stream.testing.broker import MemoryBroker, Record
from symfonic_stream.testing.driver import TopologyTestDriver
from symfonic_stream.testing.fakes import FakeResumeReader, FakeReviewer, FakeRunReader

__all__ = [
    "FakeResumeReader",
    "FakeReviewer",
    "FakeRunReader",
    "MemoryBroker",
    "Record",
    "TopologyTestDriver",
]
