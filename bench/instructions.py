"""Instructions per event of the pure hot path, counted by valgrind (deterministic).

    python -m bench.instructions [--events 10000] [--what typed,chunks,decode,baseline]

Wall-clock and even CPU-time figures move by ±20 % on a shared 2-core machine; an
instruction count does not. Each figure runs the same loop under ``valgrind --tool=
cachegrind`` twice, once over the input and once not at all, so start-up and input
generation cancel out: (instructions with the loop - without) / events.

* ``baseline``: ``orjson.dumps(orjson.loads(value))`` per record (bench/offline.py's baseline);
* ``decode``: ``decode_agent_event`` with the key check, as the projectors call it;
* ``typed`` / ``chunks``: ``ProjectorProcessor.process`` per record and the stores' changes per
  250-record batch (a partition task's share of a 1,000-record fetch over 4 partitions);
* ``task``: ``typed`` with the client's share of a stream task around it, all but the
  network and the event loop: aiokafka reading each 250-record batch as fetched (a
  transactional record batch, CRC checked, read_committed), ``to_input``, step 4's
  ``append_all`` into the transaction's record batches (native, as the engine builds them
  when the native extension is installed), each batch built, and step 9's report;
* ``task-aiokafka``: ``task`` with the batches built by aiokafka's record builder.

valgrind is a system tool (``apt-get install valgrind``), not a Python dependency.
"""

from __future__ import annotations

import argparse
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BATCH = 250
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _loop(what: str, records_file: str, passes: int) -> None:
    """The measured loop (runs in the child process under valgrind)."""
    if what in ("task", "task-aiokafka"):
        import asyncio

        with open(records_file, "rb") as handle:
            asyncio.run(_task_loop(pickle.load(handle), passes, native=what == "task"))
        return
    import orjson

    from symfonic_stream.engine.records import Collector, InputRecord
    from symfonic_stream.models.decoding import DecodeLimits, decode_agent_event
    from symfonic_stream.processors.ordering.guard import GuardLimits
    from symfonic_stream.processors.projector import PROJECTIONS, ProjectorProcessor
    from symfonic_stream.state.store import write_changes

    with open(records_file, "rb") as handle:
        pairs: list[tuple[bytes, bytes]] = pickle.load(handle)
    inputs = [InputRecord("in", 0, n, k, v, (), 0) for n, (k, v) in enumerate(pairs)]
    for _ in range(passes):
        if what == "baseline":
            for record in inputs:
                orjson.dumps(orjson.loads(record.value or b""))
        elif what == "decode":
            for record in inputs:
                decode_agent_event(record.value, key=record.key, check_key=True,
                                   limits=DecodeLimits(1_048_576))
        else:
            processor = ProjectorProcessor(
                PROJECTIONS["typed" if what == "typed" else "chunks"], "out", GuardLimits(),
                decode=DecodeLimits(1_048_576),
            )
            for first in range(0, len(inputs), BATCH):
                out = Collector()
                for record in inputs[first : first + BATCH]:
                    processor.process(record, 1.0, out)
                write_changes(processor.stores, out.state)


def _fetched(pairs: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The records as the broker returns them: one transactional batch per BATCH."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    fetched = []
    for first in range(0, len(pairs), BATCH):
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=1, producer_id=7,
            producer_epoch=0, base_sequence=first, batch_size=1 << 30)
        for n, (key, value) in enumerate(pairs[first : first + BATCH]):
            builder.append(n, timestamp=1_700_000_000_000, key=key, value=value, headers=[])
        fetched.append(bytes(builder.build()))
    return fetched


async def _task_loop(pairs: list[tuple[bytes, bytes]], passes: int, native: bool) -> int:
    """``task``: fetch, process, produce, report, as a stream task does per batch. Returns
    how many records the built batches hold (for the test that it read every record)."""
    from aiokafka import TopicPartition
    from aiokafka.consumer.fetcher import READ_COMMITTED, PartitionRecords
    from aiokafka.record.memory_records import MemoryRecords
    from prometheus_client import CollectorRegistry

    from symfonic_stream.app.topologies import projector_topology
    from symfonic_stream.config import Settings
    from symfonic_stream.engine.commit import append_all
    from symfonic_stream.engine.commit_metrics import report_commit
    from symfonic_stream.engine.records import Collector, to_input
    from symfonic_stream.kafka.producer import ProcessProducer
    from symfonic_stream.kafka.record_batches import TransactionBatches
    from symfonic_stream.observability.metrics import ConsumerMetrics
    from symfonic_stream.state.store import write_changes

    fetched = _fetched(pairs)
    settings = Settings(partitions=4)
    topology = projector_topology("typed", settings)
    producer = ProcessProducer(settings, "bench-instructions")  # never started: no network
    for topic in topology.output_topics:
        producer._partition_counts[topic] = settings.partitions  # what learn_partitions asks
    metrics = ConsumerMetrics("typed", CollectorRegistry())
    tp = TopicPartition(topology.source_topic, 0)
    written = 0
    for _ in range(passes):
        processor = topology.processor_factory(0)
        for buffer in fetched:  # (each batch's offsets start at 0, as the builder wrote them)
            records = list(PartitionRecords(tp, MemoryRecords(buffer), [], 0, None, None,
                                            True, READ_COMMITTED))
            out = Collector()
            for record in records:
                processor.process(to_input(record), 1.0, out)
            write_changes(processor.stores, out.state)
            batches = TransactionBatches(producer._producer,
                                         native=native and producer.native_batches)
            append_all(topology, producer, batches, 0, out)
            for _, batch in batches.in_send_order():
                batch._build()
                written += batch.record_count()
            report_commit(metrics, tp.topic, out, len(records))
    await producer.close()
    return written


def _count(valgrind: str, what: str, records_file: str, passes: int) -> int:
    done = subprocess.run(
        [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-m", "bench.instructions", "--child", what, records_file, str(passes)],
        capture_output=True, text=True, check=True,
    )
    found = _REFS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def measure(events: int, whats: list[str]) -> dict[str, float]:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed")
    from bench.offline import engine_records, make_lines

    records = engine_records(make_lines(events))
    with tempfile.TemporaryDirectory() as tmp:
        records_file = str(Path(tmp) / "records.pkl")
        with open(records_file, "wb") as handle:
            pickle.dump(records, handle)
        return {
            what: (_count(valgrind, what, records_file, 1)
                   - _count(valgrind, what, records_file, 0)) / len(records)
            for what in whats
        }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        _loop(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--what", default="baseline,decode,typed,chunks,task,task-aiokafka")
    args = parser.parse_args()
    figures = measure(args.events, args.what.split(","))
    base = figures.get("baseline")
    for what, count in figures.items():
        ratio = f"  {count / base:5.2f}x the baseline" if base else ""
        print(f"{what:<13} {count:10,.0f} instructions/event{ratio}")


if __name__ == "__main__":
    main()
