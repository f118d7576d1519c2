"""A process of several engines (the resumes process: intake and validator): one health,
ready only when every engine is, and no engine left running alone."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from symfonic_stream.engine.engine import Engine, EngineError
from symfonic_stream.observability.health import HealthOfMany, HealthState
from symfonic_stream.runtime.service import EXIT_FAILURE, _run


def test_a_process_of_two_engines_is_ready_only_when_both_are() -> None:
    intake, validator = HealthState(60.0), HealthState(60.0)
    health = HealthOfMany([("resume-intake", intake), ("resumes", validator)])
    assert not health.ready and health.reason == "resume-intake: starting"
    intake.set_ready(True)
    assert not health.ready and health.reason == "resumes: starting"
    validator.set_ready(True)
    assert health.ready and health.reason == "" and health.alive
    validator.set_ready(False, "rebalancing")
    assert health.reason == "resumes: rebalancing"


class FakeEngine:
    """Stands in for an Engine's run/stop (no Kafka: this is the service's own logic)."""

    def __init__(self, outcome: Any = None) -> None:
        self.stopped = asyncio.Event()
        self.outcome = outcome
        self.topology = type("T", (), {"consumer": "fake"})()

    async def run(self) -> int:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        if self.outcome is not None:
            return int(self.outcome)
        await self.stopped.wait()
        return 0

    def stop(self) -> None:
        self.stopped.set()


async def test_when_one_engine_fails_the_others_are_stopped_and_the_worst_status_wins() -> None:
    failing, healthy = FakeEngine(EngineError("topic missing")), FakeEngine()
    engines = cast(list[Engine], [failing, healthy])
    statuses = await asyncio.wait_for(
        asyncio.gather(*(_run(engine, engines) for engine in engines)), 5
    )
    assert statuses == [EXIT_FAILURE, 0]
    assert healthy.stopped.is_set()


async def test_a_crash_in_one_engine_stops_the_other_too() -> None:
    crashing, healthy = FakeEngine(RuntimeError("boom")), FakeEngine()
    engines = cast(list[Engine], [healthy, crashing])
    statuses = await asyncio.wait_for(
        asyncio.gather(*(_run(engine, engines) for engine in engines)), 5
    )
    assert max(statuses) == EXIT_FAILURE and healthy.stopped.is_set()
