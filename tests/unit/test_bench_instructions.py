"""``python -m bench instructions --what task``'s loop (either way of building batches),
without valgrind: it must read every record it fetches and write what the projector makes
of them, else its count is of less."""

from __future__ import annotations

from bench.hot_path import TASK_BATCH, engine_records, make_lines, task_loop
from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.state.store import write_changes


async def test_the_task_loop_writes_what_the_projector_makes_of_every_record() -> None:
    records = engine_records(make_lines(1200))
    processor = projector_topology("typed", Settings(partitions=4)).processor_factory(0)
    expected = 0
    for first in range(0, len(records), TASK_BATCH):
        out = Collector()
        for n, (key, value) in enumerate(records[first : first + TASK_BATCH]):
            processor.process(InputRecord("in", 0, n, key, value), 1.0, out)
        write_changes(processor.stores, out.changelog)
        expected += len(out.outputs) + len(out.dead_letters) + len(out.changelog)

    assert expected > len(records)
    for native in (True, False):  # ``task`` and ``task-aiokafka``
        assert await task_loop(records, 1, native) == expected
        assert await task_loop(records, 2, native) == 2 * expected
