"""``python -m bench.rebalance``: a deployment scaled as operators scale it, with the state
users have, and every run checked afterwards.

1. ``--runs`` open runs (index 0 of each, default a million) are published over
   ``--partitions`` (12) and projected by one ``symfonic-stream run typed`` instance, until
   its group's committed offsets reach the end.
2. A probe run per partition publishes an event every 50 ms; each probe output is timed
   as it becomes readable (read_committed).
3. The scale events, each timed by the longest wait between two probe outputs of a
   partition that it caused (the time until every partition produced again):
   ``join-leave``: a second instance joins (every partition restores on its new owner), is
   held ``--hold-s``, then leaves with SIGTERM (the first gets all of them back at once);
   ``kill-restart``: the only instance is SIGKILLed and a new one started.
4. Every run gets its closing event (``done`` at index 1); the group catches up.
5. The typed topic is read whole and compared, run by run and byte for byte, with the
   reference oracle's projection (``tests/reference/oracle.py``) of everything published:
   a run whose state a restore lost ends with a second seq 0 after a false gap, or not at
   all; either differs.

Printed: per event, the longest time until a partition produced again, the changelog
records the instances restored, and the runs that differ (0 is the only passing answer).
Issue 32 found 16.6 % (join-leave) and 25 % (kill-restart) of the runs differing here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.consumers import Consumer
from bench.kafka_io import cleanup, create_topics, end_offsets, prefix_settings, publish
from bench.progress import say
from symfonic_stream.config import Settings
from symfonic_stream.kafka.admin import Admin, group_offsets
from symfonic_stream.kafka.clients import client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames
from tests.reference import oracle

PROBE_EVERY_S = 0.05
ASSIGNED = "symfonic_stream_partition_assigned"
RESTORED = "symfonic_stream_state_records_restored_total"


def _event(run_id: str, index: int, kind: str, ts: float) -> bytes:
    event: dict[str, Any] = {"run_id": run_id, "index": index, "kind": kind, "timestamp": ts,
                             "scope": {"tenant": "acme"}}
    if kind == "text_delta":
        event["text"] = f"open run {run_id}"
    return orjson.dumps(event)


def _opening(runs: int) -> Iterator[tuple[bytes, bytes]]:
    for n in range(runs):
        run_id = f"run-{n:07d}"
        yield run_id.encode(), _event(run_id, 0, "text_delta", 1_764_480_000.0 + n / 1000)


def _closing(runs: int) -> Iterator[tuple[bytes, bytes]]:
    for n in range(runs):
        run_id = f"run-{n:07d}"
        yield run_id.encode(), _event(run_id, 1, "done", 1_764_490_000.0 + n / 1000)


def _probe_keys(partitions: int) -> dict[int, str]:
    """One probe run id per partition, found by Kafka's default partitioner."""
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < partitions:
        run_id = f"probe-{n}"
        keys.setdefault(partition_for_key(run_id, partitions), run_id)
        n += 1
    return keys


@dataclass
class Event:
    """One scale event and what it cost."""

    name: str
    at: float = 0.0
    #: Per partition: the longest wait between two of its probe outputs after the event.
    stall_s: dict[int, float] = field(default_factory=dict)
    restored_records: float = 0.0

    @property
    def longest_s(self) -> float:
        return max(self.stall_s.values(), default=float("nan"))


class Probes:
    """Publishes a probe event per partition every 50 ms; times their outputs."""

    def __init__(self, settings: Settings, names: TopicNames) -> None:
        self._settings = settings
        self._names = names
        self._keys = _probe_keys(settings.partitions)
        self._next: dict[str, int] = dict.fromkeys(self._keys.values(), 0)
        self.sent: list[bytes] = []
        #: (partition, wall time readable) of every probe output.
        self.seen: list[tuple[int, float]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        reader = AIOKafkaConsumer(**client_kwargs(self._settings, "bench-probe-reader"),
                                  group_id=None, isolation_level="read_committed",
                                  fetch_max_wait_ms=20)
        await reader.start()
        tps = [TopicPartition(self._names.stream_events, p)
               for p in range(self._settings.partitions)]
        reader.assign(tps)
        await reader.seek_to_end(*tps)
        self._tasks = [asyncio.create_task(self._read(reader)),
                       asyncio.create_task(self._publish())]

    async def _publish(self) -> None:
        producer = AIOKafkaProducer(**plain_producer_kwargs(self._settings, "bench-probes"))
        await producer.start()
        try:
            while not self._stop.is_set():
                now, sends = time.time(), []
                for partition, run_id in self._keys.items():
                    index = self._next[run_id]
                    self._next[run_id] = index + 1
                    value = _event(run_id, index, "text_delta", now)
                    sends.append(await producer.send(self._names.agent_events, value,
                                                     key=run_id.encode(), partition=partition))
                    self.sent.append(value)
                await asyncio.gather(*sends)
                await asyncio.sleep(PROBE_EVERY_S)
        finally:
            await producer.stop()

    async def _read(self, reader: AIOKafkaConsumer) -> None:
        try:
            while not self._stop.is_set():
                batch = await reader.getmany(timeout_ms=100)
                now = time.time()
                for tp, records in batch.items():
                    if any(r.key and r.key.startswith(b"probe-") for r in records):
                        self.seen.append((tp.partition, now))
        finally:
            await reader.stop()

    def stalls(self, at: float, until: float) -> dict[int, float]:
        """Per partition, the longest wait between two probe outputs that ended in
        ``(at, until]``: how long the event kept it from producing."""
        last: dict[int, float] = {}
        longest: dict[int, float] = {}
        for partition, when in self.seen:
            if at < when <= until and partition in last:
                longest[partition] = max(longest.get(partition, 0.0), when - last[partition])
            last[partition] = when
        return longest

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


def _owned(consumer: Consumer) -> set[int]:
    status, body = consumer._get("/metrics")
    if status != 200:
        return set()
    owned = set()
    for line in body.decode().splitlines():
        if line.startswith(ASSIGNED + "{") and line.rstrip().endswith(" 1.0"):
            owned.add(int(line.split('partition="', 1)[1].split('"', 1)[0]))
    return owned


def _metric_sum(consumer: Consumer, name: str) -> float:
    status, body = consumer._get("/metrics")
    if status != 200:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith(name))


async def _until(check: Any, what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {within:.0f} s: {what}")
        await asyncio.sleep(0.1)


async def _caught_up(settings: Settings, names: TopicNames, within: float) -> None:
    """Until the typed group's committed offsets reach the raw topic's end."""
    ends = await end_offsets(settings, names.agent_events, settings.partitions)
    deadline = time.monotonic() + within
    async with Admin(settings) as admin:
        while True:
            offsets = await admin.call("offsets", lambda c: group_offsets(c, names.group("typed")))
            done = {tp.partition: off for tp, off in offsets.items()
                    if tp.topic == names.agent_events}
            if all(done.get(p, 0) >= end for p, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the typed group did not catch up within {within:.0f} s")
            await asyncio.sleep(0.5)


@dataclass
class Outcome:
    """One scenario's figures."""

    scenario: str
    runs: int
    partitions: int
    events: list[Event] = field(default_factory=list)
    runs_differing: int = -1
    example: str = ""
    seconds: float = 0.0


class Scenario:
    """The instances of one scenario, on its own topic prefix."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.names = TopicNames(settings.topic_prefix)
        self._log_dir = log_dir
        self.instances: list[Consumer] = []

    def start(self, tag: str) -> Consumer:
        instance = Consumer("typed", self.settings, self._log_dir)
        instance.log_path = self._log_dir / f"{self.settings.topic_prefix}-typed-{tag}.log"
        self.instances.append(instance.start())
        return instance

    async def owning_all(self, instance: Consumer, within: float) -> None:
        every = set(range(self.settings.partitions))
        await _until(lambda: instance.ready() and _owned(instance) == every,
                     f"{instance.log_path.name} owns every partition", within)

    def restored(self) -> float:
        return sum(_metric_sum(i, RESTORED) for i in self.instances if i.alive())

    def stop(self) -> None:
        for instance in self.instances:
            instance.stop()


async def _join_leave(run: Scenario, probes: Probes, hold_s: float) -> list[Event]:
    first = run.instances[0]
    join, leave = Event("join"), Event("leave")
    before = run.restored()
    join.at = time.time()
    second = run.start("second")
    await _until(lambda: second.ready() and bool(_owned(second)) and first.ready()
                 and len(_owned(first) | _owned(second)) == run.settings.partitions,
                 "the partitions shared by two ready instances", within=600)
    join.restored_records = run.restored() - before
    await asyncio.sleep(hold_s)  # the deployment runs scaled out for a while
    before = _metric_sum(first, RESTORED)
    leave.at = time.time()
    second.stop()
    await run.owning_all(first, within=600)
    leave.restored_records = _metric_sum(first, RESTORED) - before
    return [join, leave]


async def _kill_restart(run: Scenario, probes: Probes) -> list[Event]:
    event = Event("kill-restart")
    event.at = time.time()
    victim = run.instances[0]
    assert victim.proc is not None
    victim.proc.kill()
    victim.proc.wait(10)
    successor = run.start("successor")
    await run.owning_all(successor, within=600)
    event.restored_records = _metric_sum(successor, RESTORED)
    return [event]


async def scenario(base: Settings, name: str, runs: int, partitions: int, hold_s: float,
                   log_dir: Path) -> Outcome:
    prefix = f"rb{uuid.uuid4().hex[:8]}"
    settings = prefix_settings(base, prefix, partitions)
    outcome = Outcome(name, runs, partitions)
    started = time.monotonic()
    await create_topics(settings)
    run = Scenario(settings, log_dir)
    probes = Probes(settings, run.names)
    try:
        say(f"{name}: publishing {runs:,} open runs over {partitions} partitions")
        await publish(settings, _opening(runs))
        run.start("first")
        await run.owning_all(run.instances[0], within=300)
        await _caught_up(settings, run.names, within=1800)
        await probes.start()
        await asyncio.sleep(2.0)  # probes flowing before the event
        events = (await _join_leave(run, probes, hold_s) if name == "join-leave"
                  else await _kill_restart(run, probes))
        await asyncio.sleep(2.0)  # every partition's next probe after the last event
        say(f"{name}: closing every run")
        await publish(settings, _closing(runs))
        await _caught_up(settings, run.names, within=1800)
        await probes.stop()
        for event, then in zip(events, [e.at for e in events[1:]] + [time.time()], strict=True):
            event.stall_s = probes.stalls(event.at, then)
        outcome.events = events
        run.stop()
        say(f"{name}: reading the typed topic and checking every run against the reference")
        outcome.runs_differing, outcome.example = await _check(settings, run.names, runs,
                                                               probes.sent)
    finally:
        run.stop()
        await cleanup(base, [prefix])
    outcome.seconds = time.monotonic() - started
    return outcome


async def _read_typed(settings: Settings, names: TopicNames) -> dict[bytes, list[bytes]]:
    by_run: dict[bytes, list[bytes]] = defaultdict(list)
    consumer = AIOKafkaConsumer(**client_kwargs(settings, "bench-check"), group_id=None,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(names.stream_events, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for records in batch.values():
                for record in records:
                    if record.offset < ends[TopicPartition(record.topic, record.partition)]:
                        by_run[record.key].append(record.value)
    finally:
        await consumer.stop()
    return by_run


async def _check(settings: Settings, names: TopicNames, runs: int,
                 probe_events: list[bytes]) -> tuple[int, str]:
    """Runs whose committed output is not the reference's projection of their input."""
    got = await _read_typed(settings, names)
    lines = [v for _, v in _opening(runs)] + probe_events + [v for _, v in _closing(runs)]
    expected, dead = oracle.project(lines, "typed")
    if dead:
        raise RuntimeError(f"the benchmark's own input has bad lines: {dead[:3]}")
    want: dict[bytes, list[bytes]] = defaultdict(list)
    for envelope in expected:
        want[str(envelope["run_id"]).encode()].append(oracle.encode(envelope))
    differing = [run for run in want.keys() | got.keys() if want.get(run) != got.get(run)]
    example = ""
    if differing:
        run = sorted(differing)[0]
        seqs = [orjson.loads(v).get("seq") for v in got.get(run, [])]
        example = f"{run.decode()}: seqs {seqs[:8]} (the reference has {len(want.get(run, []))})"
    return len(differing), example


def _report(outcomes: list[Outcome]) -> str:
    lines = ["| scenario | event | longest stall (s) | changelog records restored | "
             "runs differing from the reference |", "|---|---|---|---|---|"]
    for outcome in outcomes:
        for event in outcome.events:
            lines.append(f"| {outcome.scenario} ({outcome.runs:,} runs, {outcome.partitions} "
                         f"partitions) | {event.name} | {event.longest_s:.2f} | "
                         f"{event.restored_records:,.0f} | {outcome.runs_differing:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rebalance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--scenario", action="append", choices=["join-leave", "kill-restart"])
    parser.add_argument("--hold-s", type=float, default=30.0,
                        help="how long the second instance stays (join-leave)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    base = Settings()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    say(f"consumer logs in {log_dir}")

    async def go() -> list[Outcome]:
        done = []
        for name in args.scenario or ["join-leave", "kill-restart"]:
            done.append(await scenario(base, name, args.runs, args.partitions, args.hold_s,
                                       log_dir))
            say(_report(done[-1:]))
        return done

    outcomes = asyncio.run(go())
    print(_report(outcomes))
    for outcome in outcomes:
        if outcome.example:
            print(f"{outcome.scenario}: e.g. {outcome.example}")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if all(o.runs_differing == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
