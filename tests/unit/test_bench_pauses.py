"""bench/measure.py's CollectorPauses: the benchmark process's own collector pauses,
recorded and kept small."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from bench.measure import CollectorPauses
from symfonic_stream.engine.garbage import settle


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list[Any] = []
        a.append(a)  # only the cyclic collector frees it


@pytest.fixture(autouse=True)
def _restore_collector() -> Any:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_records_each_generations_pauses_until_closed() -> None:
    pauses = CollectorPauses()
    try:
        _cycles(1000)
        gc.collect(0)
        young = pauses.longest_ms
        assert pauses.total_s > 0 and young > 0
        assert pauses.longest_full_ms == 0.0  # a young collection is not a full one
        gc.collect(2)
        assert pauses.longest_full_ms > 0
        assert pauses.longest_ms >= max(young, pauses.longest_full_ms)
    finally:
        pauses.close()
    assert pauses._observe not in gc.callbacks
    total = pauses.total_s
    gc.collect()
    assert pauses.total_s == total  # closed: no longer recording
    pauses.close()  # twice is harmless


def test_settle_before_a_load_freezes_the_whole_workload() -> None:
    held = [{"event": n} for n in range(20_000)]  # a workload, as the comparison holds one
    gc.unfreeze()
    settle()  # as bench.measure's measurements call it before a load
    assert gc.get_freeze_count() >= len(held)
    assert gc.get_threshold()[0] >= 50_000  # young collections only past a loop's garbage
