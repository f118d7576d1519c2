"""Issue 19's first goal: the first event of a run whose partition holds N earlier records.

One partition of ``<prefix>.stream-events`` gets N envelopes of other runs (runs of
:data:`RUN_LEN` records, :data:`WIDTH` of them interleaved, text and thinking deltas of
20-200 characters, each run closed by an ``end``; written with an idempotent producer,
which ``read_committed`` readers see like committed records), then the target run's
:data:`TARGET_TEXTS` text deltas and its closing ``end``. Measured, each several times:

* **start-up**: a gateway (in this process) from ``Gateway(...)`` to both tails caught up,
  i.e. every record of the window read and filed once (``/readyz`` says so within
  :data:`symfonic_stream.gateway.server.REFRESH_S` of it);
* **held**: request → first SSE ``id:`` line for the target run, its records in memory;
* **read back**: the same on a second gateway with ``SYMFONIC_GATEWAY_CACHE_BYTES`` at its
  minimum (1 KiB), which no longer holds the target's first records: they are read back
  from Kafka from the run's first offset, a consumer started for the request;
* **reader (baseline)**: the project's :class:`~symfonic_stream.sdk.reader.RunReader`,
  which reads the run's partition from offset 0, to the target's first record.

Each also to the run's last record (the stream's close, the reader's end record).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.kafka_io import create_topics, end_offsets, prefix_settings, publish
from bench.progress import say
from bench.sse_client import first_event
from symfonic_stream.config import Settings
from symfonic_stream.gateway.server import Gateway
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.reader import RunReader

#: Records per earlier run (the last one its ``end``), and runs interleaved at a time.
RUN_LEN = 100
WIDTH = 200
TARGET_TEXTS = 5
#: The smallest ``SYMFONIC_GATEWAY_CACHE_BYTES`` allowed: the target's first records go.
TINY_CACHE_BYTES = 1024
_WORDS = ("the ", "model ", "streams ", "a ", "token ", "and ", "then ", "tool ", "result ",
          "reads ", "Kafka ", "partition ", "offset ", "quickly, ", "because ", "of ")


def envelope(run_id: str, seq: int, ts: float, kind: str, text: str) -> bytes:
    return orjson.dumps({"run_id": run_id, "seq": seq, "source_index": seq, "ts": ts,
                         "event": {"type": kind, "text": text}})


def end_envelope(run_id: str, seq: int, ts: float) -> bytes:
    return orjson.dumps({"run_id": run_id, "seq": seq, "source_index": seq, "ts": ts,
                         "end": {"status": "completed", "error": None}})


def earlier_records(count: int, seed: int = 19) -> Iterator[tuple[bytes, bytes]]:
    """``count`` envelopes of other runs, interleaved as a projector writes them."""
    rng = random.Random(seed)
    texts = ["".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 30)))[:200]
             for _ in range(997)]
    ts = time.time() - 3600
    made = block = 0
    while made < count:
        runs = [f"run-{block:05d}-{n:03d}-{rng.getrandbits(32):08x}" for n in range(WIDTH)]
        for seq in range(RUN_LEN):
            for run_id in runs:
                if made == count:
                    return
                ts += 0.0001
                key = run_id.encode()
                if seq == RUN_LEN - 1:
                    yield key, end_envelope(run_id, seq, ts)
                else:
                    kind = "thinking_delta" if (made * 7) % 10 < 2 else "text_delta"
                    yield key, envelope(run_id, seq, ts, kind, texts[made % len(texts)])
                made += 1
        block += 1


def target_records(run_id: str) -> list[tuple[bytes, bytes]]:
    now = time.time()
    records = [(run_id.encode(), envelope(run_id, seq, now, "text_delta", f"part {seq} "))
               for seq in range(TARGET_TEXTS)]
    return [*records, (run_id.encode(), end_envelope(run_id, TARGET_TEXTS, now))]


@dataclass
class Series:
    """One figure's repetitions, in milliseconds (start-up: seconds)."""

    values: list[float] = field(default_factory=list)
    whole: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        got: dict[str, Any] = {"median": statistics.median(self.values),
                               "max": max(self.values), "all": self.values}
        if self.whole:
            got.update(whole_median=statistics.median(self.whole), whole_max=max(self.whole))
        return got


async def _started(settings: Settings) -> tuple[Gateway, asyncio.Task[None], float]:
    started = time.perf_counter()
    gateway = Gateway(settings)
    await gateway.start()
    task = asyncio.create_task(gateway.serve())
    async with asyncio.timeout(600):
        for tail in gateway.tails.values():
            await tail.caught_up.wait()
    return gateway, task, time.perf_counter() - started


async def _stopped(gateway: Gateway, task: asyncio.Task[None]) -> None:
    gateway.stop()
    await task
    await gateway.close()


async def _requests(gateway: Gateway, run_id: str, count: int, series: Series) -> None:
    path = f"/v1/runs/{run_id}/events"
    for _ in range(count):
        first_s, seq, whole_s, seqs = await first_event("127.0.0.1", gateway.port, path)
        if seq != 0 or seqs != TARGET_TEXTS + 1:
            raise RuntimeError(f"{path}: first seq {seq}, {seqs} messages")
        series.values.append(first_s * 1000)
        series.whole.append(whole_s * 1000)
        await asyncio.sleep(0.05)


async def _reader(settings: Settings, run_id: str, series: Series) -> None:
    started = time.perf_counter()
    first = None
    async with RunReader(run_id, settings) as reader:
        async for record in reader:
            if first is None:
                first = time.perf_counter() - started
                if record.seq != 0:
                    raise RuntimeError(f"reader: first seq {record.seq}")
    assert first is not None
    series.values.append(first * 1000)
    series.whole.append((time.perf_counter() - started) * 1000)


def _held_from(gateway: Gateway, run_id: str) -> int:
    run = gateway.tails["events"].store.get(run_id)
    if run is None:
        raise RuntimeError(f"the gateway has not indexed {run_id}")
    return run.held_from


async def measure(base: Settings, prefix: str, earlier: int, repeats: int,
                  requests: int) -> dict[str, Any]:
    settings = prefix_settings(base, prefix, 1).model_copy(update={
        "gateway_port": 0, "gateway_host": "127.0.0.1"})
    await create_topics(settings)
    topic = TopicNames(prefix).stream_events
    say(f"first event: writing {earlier:,} earlier records to {topic}")
    publish_s = await publish(settings, earlier_records(earlier), topic)
    target = f"target-{prefix}"
    await publish(settings, target_records(target), topic)
    ends = await end_offsets(settings, topic, 1)
    say(f"  wrote {ends[0]:,} records in {publish_s:.1f} s")
    startup, held, read_back, reader = Series(), Series(), Series(), Series()
    store: dict[str, Any] = {}
    for n in range(repeats):
        gateway, task, took = await _started(settings)
        startup.values.append(took)
        say(f"  start-up {n + 1}/{repeats}: {took:.2f} s")
        if n < repeats - 1:
            await _stopped(gateway, task)
    tail = gateway.tails["events"]
    store = {"runs": len(tail.store), "held_bytes": tail.store.held_bytes,
             "target_held_from": _held_from(gateway, target)}
    try:
        if store["target_held_from"] != 0:
            raise RuntimeError(f"the target's seqs below {store['target_held_from']} are "
                               "not held: raise SYMFONIC_GATEWAY_CACHE_BYTES")
        await _requests(gateway, target, requests, held)
    finally:
        await _stopped(gateway, task)
    say(f"  held: median {statistics.median(held.values):.1f} ms")
    tiny = settings.model_copy(update={"gateway_cache_bytes": TINY_CACHE_BYTES})
    gateway, task, tiny_startup = await _started(tiny)
    try:
        store["tiny_cache_target_held_from"] = _held_from(gateway, target)
        if store["tiny_cache_target_held_from"] == 0:
            raise RuntimeError("the 1 KiB cache still holds the target's first record")
        await _requests(gateway, target, requests, read_back)
    finally:
        await _stopped(gateway, task)
    say(f"  read back: median {statistics.median(read_back.values):.1f} ms")
    for n in range(repeats):
        await _reader(settings, target, reader)
        say(f"  reader {n + 1}/{repeats}: {reader.values[-1]:.0f} ms")
    held_s, back_s, base_s = held.summary(), read_back.summary(), reader.summary()
    return {
        "earlier_records": earlier, "partition_records": ends[0], "publish_s": publish_s,
        "repeats": repeats, "requests": requests, "store": store,
        "startup_s": startup.summary(), "startup_tiny_cache_s": tiny_startup,
        "startup_records_per_s": ends[0] / statistics.median(startup.values),
        "held_ms": held_s, "read_back_ms": back_s, "reader_ms": base_s,
        "held_x_reader": held_s["median"] / base_s["median"],
        "read_back_x_reader": back_s["median"] / base_s["median"],
    }
