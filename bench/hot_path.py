"""The pure path's CPU, no broker: the offline hot path against plain orjson (``python -m
bench offline``, part of ``python -m bench``), instructions per event under valgrind
(``python -m bench instructions``), what carrying the trace context costs (``python -m
bench trace``). Times are CPU seconds of the process, best of ``--repeat`` (on a shared
machine the wall clock counts other processes' time too); each command's docstring says
what it compares.
"""

from __future__ import annotations

import gc
import pickle
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.harness import best_of, call_command, options, table
from symfonic_stream.engine.processor import Collector, InputRecord, feed
from symfonic_stream.models.decoding import DecodeLimits, decode_agent_event
from symfonic_stream.observability import tracing
from symfonic_stream.processors.projector import GuardLimits, ProjectorProcessor
from symfonic_stream.projections.declared import PROJECTIONS
from symfonic_stream.state.store import write_changes
from symfonic_stream.tools.offline import project_lines
from symfonic_stream.tools.synthetic import RunShape, synthetic_stream

#: Records per collector of the offline engine shape (a fetch), and of a task's share.
OFFLINE_BATCH = 1000
TASK_BATCH = 250
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def make_lines(events: int, seed: int = 1) -> list[bytes]:
    """About ``events`` raw lines from realistic runs (duplicates and reordering included)."""
    lines: list[bytes] = []
    batch = 0
    while len(lines) < events:
        stream = synthetic_stream(seed + batch, 500, shape=RunShape(), run_prefix=f"b{batch}")
        lines.extend(orjson.dumps(event) for event in stream)
        batch += 1
    return lines[:events]


def engine_records(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` per line, as the raw topic carries them."""
    return [(orjson.loads(line)["run_id"].encode(), line) for line in lines]


def _baseline(lines: list[bytes]) -> None:
    for line in lines:
        orjson.dumps(orjson.loads(line))


def _offline(lines: list[bytes], projection: str) -> int:
    return sum(len(released.outputs) for released in project_lines(lines, projection))


def inputs(records: list[tuple[bytes, bytes]]) -> list[InputRecord]:
    """An ``InputRecord`` per ``(key, value)``, at consecutive offsets of one partition."""
    return [InputRecord("bench.in", 0, offset, key, value, (), 0)
            for offset, (key, value) in enumerate(records)]


def task_shape(records: list[InputRecord], projection: str, fed: bool = False,
               batch: int = OFFLINE_BATCH) -> int:
    """The stream task's loop over ``records`` (one collector per ``batch``, the state
    written): each record handed over with ``feed``, or to ``process`` directly (as before
    the trace context was carried); when tracing is on, each collector's transaction span
    (as a commit makes it) and, at the end, every span exported (flushed). How many records
    it made."""
    processor = ProjectorProcessor(
        PROJECTIONS[projection].project, "bench.out", GuardLimits(), decode=DecodeLimits(1_048_576)
    )
    produced = 0
    now = time.time()
    process = processor.process
    for first in range(0, len(records), batch):
        out = Collector()
        for record in records[first : first + batch]:
            if fed and record.headers:  # (as the stream task hands a record over)
                feed(processor, record, now, out)
            else:
                process(record, now, out)
        write_changes(processor.stores, out.changelog)
        produced += len(out.outputs)
        if tracing.TRACER is not None:
            tracing.transaction_span("typed", "bench", ["bench.in"], 0, [out.links],
                                     batch, len(out.outputs), "committed", time.time_ns())
    if tracing._provider is not None:
        tracing._provider.force_flush()
    return produced


def offline_figures(events: int, projection: str = "typed",
                    repeat: int = 3) -> dict[str, Any]:
    """Best-of-``repeat`` CPU timings per event and the ratios to the baseline."""
    lines = make_lines(events)
    records = engine_records(lines)
    gc.collect()
    baseline, _ = best_of(repeat, lambda: _baseline(lines))
    full, produced = best_of(repeat, lambda: _offline(lines, projection))
    engine, _ = best_of(repeat, lambda: task_shape(inputs(records), projection))
    per_event = 1e6 / len(lines)
    return {
        "events": len(lines),
        "projection": projection,
        "mean_line_bytes": sum(map(len, lines)) / len(lines),
        "records_out": produced,
        "baseline_us_per_event": baseline * per_event,
        "offline_us_per_event": full * per_event,
        "engine_shape_us_per_event": engine * per_event,
        "ratio": full / baseline,
        "engine_shape_ratio": engine / baseline,
        "repeat": repeat,
        "python": platform.python_version(),
    }


def offline(argv: list[str] | None = None) -> int:
    """The full path against the baseline, the cheapest thing any JSON consumer does with
    the same lines (``orjson.loads`` then ``orjson.dumps``; goal: within 3x): ``offline``,
    the ``project`` command's loop (one collector per line, no state written), the figure
    the goal is set on; ``live``, a stream task's shape: an ``InputRecord`` per record (key
    checked against ``run_id``), one collector per 1,000 records, the stores' changes written."""
    args = options("bench offline", argv, offline.__doc__, events=1_000_000,
                   projection="typed", repeat=(3, "best of N"))
    name = args.projection
    if name not in PROJECTIONS:
        raise SystemExit(f"--projection: one of {', '.join(PROJECTIONS)}")
    r = offline_figures(args.events, name, args.repeat)
    print(f"machine      {platform.processor() or platform.machine()}, python {r['python']}")
    print(f"events       {r['events']:,} lines, {r['mean_line_bytes']:.0f} bytes average, "
          f"{r['records_out']:,} records out")
    print(f"baseline     {r['baseline_us_per_event']:6.2f} us/event  (orjson.loads + orjson.dumps)")
    print(f"{name:<12} {r['offline_us_per_event']:6.2f} us/event  "
          "(decode + guard + project + encode, the project command's loop)")
    print(f"{name + ' live':<12} {r['engine_shape_us_per_event']:6.2f} us/event  (the same per "
          f"{OFFLINE_BATCH}-record batch as a stream task: key check, state written)")
    print(f"ratio        {r['ratio']:6.2f}x the baseline (goal <= 3x); "
          f"live shape {r['engine_shape_ratio']:.2f}x")
    return 0


def counted_loop(what: str, records_file: str, passes: str) -> None:
    """The loop an instruction count measures (in a child process, under valgrind)."""
    with open(records_file, "rb") as handle:
        pairs: list[tuple[bytes, bytes]] = pickle.load(handle)
    if what in ("task", "task-aiokafka"):
        import asyncio

        asyncio.run(task_loop(pairs, int(passes), native=what == "task"))
        return
    records = inputs(pairs)
    for _ in range(int(passes)):
        if what == "baseline":
            for record in records:
                orjson.dumps(orjson.loads(record.value or b""))
        elif what == "decode":
            for record in records:
                decode_agent_event(record.value, key=record.key, check_key=True,
                                   limits=DecodeLimits(1_048_576))
        else:
            task_shape(records, what, batch=TASK_BATCH)


def _fetched(pairs: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The records as the broker returns them: one transactional batch per TASK_BATCH."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    fetched = []
    for first in range(0, len(pairs), TASK_BATCH):
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=1, producer_id=7,
            producer_epoch=0, base_sequence=first, batch_size=1 << 30)
        for n, (key, value) in enumerate(pairs[first : first + TASK_BATCH]):
            builder.append(n, timestamp=1_700_000_000_000, key=key, value=value, headers=[])
        fetched.append(bytes(builder.build()))
    return fetched


async def task_loop(pairs: list[tuple[bytes, bytes]], passes: int, native: bool) -> int:
    """``task``: fetch, process, produce, report, as a stream task does per batch. Returns
    how many records the built batches hold (for the test that it read every record)."""
    from aiokafka import TopicPartition
    from aiokafka.consumer.fetcher import READ_COMMITTED, PartitionRecords
    from aiokafka.record.memory_records import MemoryRecords
    from prometheus_client import CollectorRegistry

    from symfonic_stream.app.topologies import projector_topology
    from symfonic_stream.config import Settings
    from symfonic_stream.engine.task import to_input
    from symfonic_stream.engine.transaction import report_commit, writes_of
    from symfonic_stream.kafka.producer import ProcessProducer, TransactionBatches
    from symfonic_stream.observability.metrics import ConsumerMetrics

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
            write_changes(processor.stores, out.changelog)
            batches = TransactionBatches(producer._producer,
                                         native=native and producer.native_batches)
            batches.append_writes(writes_of(topology, 0, out), producer.partition_for,
                                  producer.partition_counts)
            for _, batch in batches.in_send_order():
                batch._build()
                written += batch.record_count()
            report_commit(metrics, tp.topic, out, len(records))
    await producer.close()
    return written


def instructions(argv: list[str] | None = None) -> int:
    """Instruction counts do not move with the machine's load. Each loop runs under ``valgrind
    --tool=cachegrind`` (a system tool) twice, over the input and not at all, so start-up and
    input cancel out: (with - without) / events. ``baseline``: ``orjson.dumps(orjson.loads())``;
    ``decode``: ``decode_agent_event`` with the key check; ``typed`` / ``chunks``: the
    processor per record, the stores' changes per 250 records (a task's share of a 1,000-record
    fetch over 4 partitions); ``task``: ``typed`` with a stream task around it but the network
    and the event loop (:func:`task_loop`); ``task-aiokafka``: its batches built by aiokafka."""
    args = options("bench instructions", argv, instructions.__doc__, events=10_000,
                   what="baseline,decode,typed,chunks,task,task-aiokafka")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed")
    records = engine_records(make_lines(args.events))
    with tempfile.TemporaryDirectory() as tmp:
        records_file = Path(tmp) / "records.pkl"
        records_file.write_bytes(pickle.dumps(records))

        def count(what: str, passes: int) -> int:
            done = subprocess.run(
                [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                 *call_command(counted_loop, what, str(records_file), str(passes))],
                capture_output=True, text=True, check=True)
            found = _REFS.search(done.stderr)
            if found is None:
                raise RuntimeError(f"no count in valgrind's output:\n{done.stderr[-2000:]}")
            return int(found.group(1).replace(",", ""))

        figures = {what: (count(what, 1) - count(what, 0)) / len(records)
                   for what in args.what.split(",")}
    base = figures.get("baseline")
    for what, value in figures.items():
        ratio = f"  {value / base:5.2f}x the baseline" if base else ""
        print(f"{what:<13} {value:10,.0f} instructions/event{ratio}")
    return 0


#: The trace headers of ``bench trace``: a kernel's span per event, one vendor's state.
_TRACESTATE = b"rojo=00f067aa0ba902b7"


def _trace_headers(offset: int) -> tuple[tuple[str, bytes], ...]:
    parent = f"00-4bf92f3577b34da6a3ce929d0e0e4736-{offset + 1:016x}-01".encode()
    return (("traceparent", parent), ("tracestate", _TRACESTATE))


def _spans_on() -> None:
    """Tracing on as a deployment has it (a batch span processor), every span exported to
    an exporter that drops it: the cost of making and batching spans, not of a network."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    tracing.install(provider, {})


def trace(argv: list[str] | None = None) -> int:
    """What carrying the trace context costs a projector, per event, in a stream task's
    shape (docs/metrics.md, "Tracing"): ``before``, each record handed to ``process``
    directly, as before the context was carried; ``untraced``, as the task hands over a
    record without headers now (what a deployment without tracing pays); ``traced``,
    through ``feed`` with a ``traceparent`` (a span per event) and a ``tracestate`` on every
    record, checked and put on every output; then both again with spans on (``on``: the
    SDK with a batch span processor whose exporter drops what it is given; each record's
    context kept as a link, a span per 1,000 records). CPU seconds, best of ``--repeat``."""
    args = options("bench trace", argv, trace.__doc__, events=200_000, projection="typed",
                   repeat=(5, "best of N"))
    if args.projection not in PROJECTIONS:
        raise SystemExit(f"--projection: one of {', '.join(PROJECTIONS)}")
    pairs = engine_records(make_lines(args.events))
    plain = inputs(pairs)
    traced = [record._replace(headers=_trace_headers(record.offset)) for record in plain]
    rows = [("before", plain, False), ("untraced", plain, True), ("traced", traced, True),
            ("untraced on", plain, True), ("traced on", traced, True)]
    best = {name: float("inf") for name, _, _ in rows}
    for _ in range(args.repeat):  # (the rows in turn: a drift of the machine hits each alike)
        for name, records, fed in rows:
            gc.collect()
            def work(r: list[InputRecord] = records, f: bool = fed) -> int:
                return task_shape(r, args.projection, f)

            if name.endswith(" on"):
                _spans_on()
            try:
                seconds, _ = best_of(1, work)
            finally:
                tracing.shutdown()
            best[name] = min(best[name], seconds)
    lines = [["how", "CPU s", "us/event", "ratio"]]
    for name, records, _ in rows:
        lines.append([name, f"{best[name]:.3f}", f"{best[name] * 1e6 / len(records):.2f}",
                      f"{best[name] / best['before']:.2f}"])
    print(f"{len(plain):,} events, {args.projection}, best of {args.repeat}")
    print(table(lines))
    return 0
