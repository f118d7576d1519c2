"""``python -m bench rebalance``: a deployment scaled as operators scale it, with the state
users have, every run checked afterwards (issues 32 and 36; docs/benchmarks.md, "Scaling
with the state users have").

``--runs`` open runs over ``--partitions``, projected by ``--instances`` ``run typed``
processes until caught up; a probe run per partition publishes every 50 ms, each probe
output timed as it becomes readable; then ``join``, ``leave`` (SIGTERM) and
``kill-restart`` (SIGKILL, a successor under the same name on the same state folder: what
the kubelet does to a crashed container, in the same pod, with its ``emptyDir`` and its pod
name as the instance id): for each the stall (the longest wait between two probe outputs
of a partition it caused), the changelog records read at set-up and the probes' outputs
per second before and after. Every run then gets
its closing event and the typed topic is compared run by run, byte for byte, with the
reference oracle's projection (``tests/reference/oracle.py``) of everything published.
``--chart-values FILE``: the instances configured as the Helm chart configures its pods
with those values over its defaults (``helm/symfonic-stream/values.yaml`` itself: the
chart's default deployment; :func:`chart_options`). ``--partitions-only N``: one instance
on N partitions instead (:func:`many_partitions`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiokafka import AIOKafkaProducer

from bench.harness import markdown, options, say, write_json
from bench.kafka_io import (
    OffsetWatcher,
    OutputReader,
    Session,
    end_offsets,
    publish,
    publish_at_rate,
    until,
)
from bench.processes import Process
from bench.workload import raw_event
from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import plain_producer_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames
from tests.reference import oracle

PROBE_EVERY_S = 0.05
#: Seconds of probe outputs counted before and after an event for its outputs per second.
RATE_WINDOW_S = 5.0
RESTORED = "symfonic_stream_state_records_restored_total"
TRICKLE_RATE = 200.0
TRICKLE_S = 20.0
CHART_VALUES = Path(__file__).resolve().parents[1] / "helm" / "symfonic-stream" / "values.yaml"


def event(run_id: str, index: int, kind: str, ts: float) -> bytes:
    """A raw event of the benchmark's runs (a text delta says which run it is)."""
    text = {"text": f"open run {run_id}"} if kind == "text_delta" else {}
    return raw_event(run_id, index, kind, ts, scope={"tenant": "acme"}, **text)


def every_run(runs: int, closing: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """Each run's opening event (index 0), or with ``closing`` its ``done`` (index 1)."""
    for n in range(runs):
        run_id = f"run-{n:07d}"
        yield run_id.encode(), (event(run_id, 1, "done", 1_764_490_000.0 + n / 1000) if closing
                                else event(run_id, 0, "text_delta", 1_764_480_000.0 + n / 1000))


def one_run_per_partition(partitions: int, prefix: str) -> dict[int, str]:
    """A run id per partition (``<prefix><n>``), found by Kafka's default partitioner."""
    runs: dict[int, str] = {}
    n = 0
    while len(runs) < partitions:
        runs.setdefault(partition_for_key(f"{prefix}{n}", partitions), f"{prefix}{n}")
        n += 1
    return runs


def chart_options(values: Path) -> dict[str, Any]:
    """This benchmark's options for the pods the chart makes with ``values`` over its
    defaults (their ``engine`` blocks, as templates/_helpers.tpl maps them): a state folder
    per instance that a restart keeps (``emptyDir`` or a claim), the instance's name as its
    group instance id (the pod's name), leaving on SIGTERM, and the cache and keep settings
    as the ConfigMap sets them."""
    engine = {**yaml.safe_load(CHART_VALUES.read_text())["engine"],
              **(yaml.safe_load(values.read_text()) or {}).get("engine", {})}
    on_disk = engine["stateStore"] != "memory"
    return {"state_dir": on_disk,
            "cache_keys": int(engine["stateCacheKeys"]) if on_disk else None,
            "static": bool(engine["staticMembership"]),
            "leave_on_stop": bool(engine["staticMembership"] and engine["leaveGroupOnStop"]),
            "state_keep_s": float(engine["stateKeepS"])}


class Probes:
    """Publishes a probe event per partition every 50 ms; times their outputs."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._names = TopicNames(settings.topic_prefix)
        self._keys = one_run_per_partition(settings.partitions, "probe-")
        self._next: dict[str, int] = dict.fromkeys(self._keys.values(), 0)
        self.sent: list[bytes] = []
        #: (partition, wall time readable) of every probe output.
        self.seen: list[tuple[int, float]] = []
        self._stop = asyncio.Event()
        self._reader = OutputReader(settings, [self._names.stream_events], settings.partitions,
                                    self._read, wait_ms=20, from_end=True)
        self._publishing: asyncio.Task[None] | None = None

    def _read(self, records: list[Any], now: float) -> None:
        self.seen.extend((r.partition, now) for r in records
                         if r.key and r.key.startswith(b"probe-"))

    async def start(self) -> None:
        await self._reader.start()
        self._publishing = asyncio.create_task(self._publish())

    async def _publish(self) -> None:
        producer = AIOKafkaProducer(**plain_producer_kwargs(self._settings, "bench-probes"))
        await producer.start()
        try:
            while not self._stop.is_set():
                now, sends = time.time(), []
                for partition, run_id in self._keys.items():
                    index = self._next[run_id]
                    self._next[run_id] = index + 1
                    value = event(run_id, index, "text_delta", now)
                    sends.append(await producer.send(self._names.agent_events, value,
                                                     key=run_id.encode(), partition=partition))
                    self.sent.append(value)
                await asyncio.gather(*sends)
                await asyncio.sleep(PROBE_EVERY_S)
        finally:
            await producer.stop()

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

    def rate(self, since: float, until: float) -> float:
        """Probe outputs per second readable in ``[since, until)``."""
        return sum(1 for _, when in self.seen if since <= when < until) / (until - since)

    async def stop(self) -> None:
        self._stop.set()
        if self._publishing is not None:
            await self._publishing
        await self._reader.stop()


async def check(settings: Settings, runs: int, probe_events: list[bytes]) -> tuple[int, str]:
    """Runs whose committed output is not the reference's projection of their input."""
    got: dict[bytes, list[bytes]] = defaultdict(list)

    def on_batch(records: list[Any], _: float) -> None:
        for record in records:
            got[record.key].append(record.value)

    reader = OutputReader(settings, [TopicNames(settings.topic_prefix).stream_events],
                          settings.partitions, on_batch)
    await reader.start()
    try:
        await reader.wait_caught_up(within=3600)
    finally:
        await reader.stop()
    lines = [v for _, v in every_run(runs)] + probe_events + [v for _, v in every_run(runs, True)]
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


@dataclass
class Event:
    """One scale event and what it cost."""

    name: str
    at: float = 0.0
    #: Per partition: the longest wait between two of its probe outputs after the event.
    stall_s: dict[int, float] = field(default_factory=dict)
    #: Changelog records the instances read at set-up because of it.
    restored_records: float = 0.0
    outputs_before: float = 0.0
    outputs_after: float = 0.0

    @property
    def longest_s(self) -> float:
        return max(self.stall_s.values(), default=float("nan"))


@dataclass
class Outcome:
    """One run's figures."""

    runs: int
    partitions: int
    instances: int
    state_dir: bool
    static: bool
    events: list[Event] = field(default_factory=list)
    runs_differing: int = -1
    example: str = ""
    seconds: float = 0.0
    #: ``SYMFONIC_STATE_CACHE_KEYS`` (None: the default).
    cache_keys: int | None = None
    #: ``SYMFONIC_LEAVE_GROUP_ON_STOP`` (with static membership).
    leave_on_stop: bool = False
    #: Per live instance, with every run still open: (RSS, peak RSS) in MiB.
    rss_mib: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: The chart's values the instances were configured from (``--chart-values``).
    chart_values: str = ""


class Deployment:
    """The typed projector's instances of one run, on its own topic prefix."""

    def __init__(self, settings: Settings, log_dir: Path, args: argparse.Namespace) -> None:
        self.settings = settings
        self._log_dir = log_dir
        self._args = args
        self.live: dict[str, Process] = {}

    def start(self, tag: str) -> Process:
        instance = Process("typed", self.settings, self._log_dir)
        instance.log_path = self._log_dir / f"{self.settings.topic_prefix}-typed-{tag}.log"
        if self._args.state_dir:  # a folder of its own, as a pod's volume is
            instance.env["SYMFONIC_STATE_DIR"] = str(self._log_dir / "state" / tag)
            if self._args.cache_keys is not None:
                instance.env["SYMFONIC_STATE_CACHE_KEYS"] = str(self._args.cache_keys)
        if self._args.static:  # its name, as a pod's
            instance.env["SYMFONIC_GROUP_INSTANCE_ID"] = tag
            if self._args.leave_on_stop:
                instance.env["SYMFONIC_LEAVE_GROUP_ON_STOP"] = "true"
        if self._args.state_keep_s is not None:
            instance.env["SYMFONIC_STATE_KEEP_S"] = str(self._args.state_keep_s)
        self.live[tag] = instance.start()
        return instance

    async def settled(self, within: float = 900) -> None:
        """Until every live instance is ready and the partitions are all owned."""
        def owned(instance: Process) -> set[int]:
            return {int(s.labels["partition"]) for s in instance.samples()
                    if s.name == "symfonic_stream_partition_assigned" and s.value == 1.0}

        def ready() -> bool:
            return all(i.ready() for i in self.live.values()) and set().union(
                *(owned(i) for i in self.live.values())) == set(range(self.settings.partitions))

        async def settled() -> bool:
            return await asyncio.to_thread(ready)

        if not await until(settled, within, every=0.1):
            raise RuntimeError(f"not within {within:.0f} s: every partition owned by a "
                               "ready instance")

    def restored(self) -> float:
        """Changelog records the live instances read so far."""
        return sum(i.metric(RESTORED) for i in self.live.values() if i.alive())

    def stop(self, tag: str) -> None:
        self.live.pop(tag).stop()

    def replace(self, tag: str) -> Process:
        """SIGKILL an instance and start another in its place, under its name, on its folder
        (a container the kubelet restarts in the same pod)."""
        self.live.pop(tag).kill()
        return self.start(tag)

    def memory(self) -> dict[str, tuple[float, float]]:
        """Each live instance's RSS now and its peak, in MiB."""
        return {tag: (round(i.rss() / 2**20, 1), round(i.sample_rss() / 2**20, 1))
                for tag, i in self.live.items()}

    def stop_all(self) -> None:
        for tag in list(self.live):
            self.stop(tag)


async def caught_up(settings: Settings, within: float) -> None:
    """Until the typed group's committed offsets reach the raw topic's end."""
    names = TopicNames(settings.topic_prefix)
    ends = await end_offsets(settings, names.agent_events, settings.partitions)
    async with OffsetWatcher(settings, names.agent_events) as watcher:
        await watcher.wait(names.group("typed"), sum(ends.values()), within, every=0.5)


async def _timed(deployment: Deployment, event: Event, act: Callable[[], object],
                 hold_s: float) -> Event:
    before = deployment.restored()
    event.at = time.time()
    # In a thread: a SIGTERMed instance is waited for until it exits, and the probes'
    # publisher and reader share this event loop (blocked, they would time their own stall).
    await asyncio.to_thread(act)
    await deployment.settled()
    await asyncio.sleep(hold_s)  # the deployment runs like this for a while
    event.restored_records = max(0.0, deployment.restored() - before)
    return event


async def scale(session: Session, args: argparse.Namespace) -> Outcome:
    """The whole run: load, events, close, check (the module's docstring)."""
    settings = await session.topics("scale", args.partitions)
    outcome = Outcome(args.runs, args.partitions, args.instances, args.state_dir, args.static,
                      cache_keys=args.cache_keys, leave_on_stop=args.leave_on_stop,
                      chart_values=str(args.chart_values or ""))
    started = time.monotonic()
    deployment = Deployment(settings, session.log_dir, args)
    probes = Probes(settings)
    try:
        say(f"publishing {args.runs:,} open runs over {args.partitions} partitions")
        await publish(settings, every_run(args.runs))
        for n in range(args.instances):
            deployment.start(f"i{n}")
        await deployment.settled()
        await caught_up(settings, within=3600)
        await probes.start()
        await asyncio.sleep(RATE_WINDOW_S)
        joined = f"i{args.instances}"
        outcome.events = [
            await _timed(deployment, Event("join"), lambda: deployment.start(joined),
                         args.hold_s),
            await _timed(deployment, Event("leave"), lambda: deployment.stop(joined),
                         args.hold_s),
            await _timed(deployment, Event("kill-restart"), lambda: deployment.replace("i0"),
                         args.hold_s),
        ]
        outcome.rss_mib = deployment.memory()  # (every run still open)
        say("closing every run")
        # The last event's window ends here: a million closing events, which the probes
        # then wait behind, are not its stall (until this was fixed, its figures included
        # them: every partition, the survivor's too, seemed to stall 4-7 s).
        closing_at = time.time()
        await publish(settings, every_run(args.runs, closing=True))
        await caught_up(settings, within=3600)
        await probes.stop()
        ends = [e.at for e in outcome.events[1:]] + [closing_at]
        for one, end in zip(outcome.events, ends, strict=True):
            one.stall_s = probes.stalls(one.at, end)
            one.outputs_before = probes.rate(one.at - RATE_WINDOW_S, one.at)
            one.outputs_after = probes.rate(one.at, one.at + RATE_WINDOW_S)
        deployment.stop_all()
        say("reading the typed topic and checking every run against the reference")
        outcome.runs_differing, outcome.example = await check(settings, args.runs, probes.sent)
    finally:
        deployment.stop_all()
    outcome.seconds = time.monotonic() - started
    return outcome


@dataclass
class PartitionsOutcome:
    partitions: int
    first_output_s: float = 0.0
    #: From the start to the log's "partitions assigned" (the process and the group's join).
    assigned_s: float = 0.0
    rate: float = TRICKLE_RATE
    transactions_per_s: float = 0.0


def _logged_at(log: Path, message: str) -> float:
    """The wall time of the first line of ``log`` with ``message``."""
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("message") == message:
                return datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
    raise RuntimeError(f"{log} has no line {message!r}")


async def many_partitions(session: Session, partitions: int) -> PartitionsOutcome:
    settings = await session.topics("partitions", partitions)
    outcome = PartitionsOutcome(partitions)
    runs = one_run_per_partition(partitions, "p-")
    instance = Process("typed", settings, session.log_dir)
    instance.env["SYMFONIC_LOG_LEVEL"] = "INFO"  # (its "partitions assigned" line)
    first: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def on_batch(records: list[Any], at: float) -> None:  # (the time the first is readable)
        if not first.done():
            first.set_result(at)

    reader = OutputReader(settings, [TopicNames(settings.topic_prefix).stream_events],
                          partitions, on_batch, wait_ms=20)
    try:
        await publish(settings, [(r.encode(), event(r, 0, "text_delta", time.time()))
                                 for r in runs.values()])
        await reader.start()
        started = time.time()
        instance.start()
        outcome.first_output_s = await asyncio.wait_for(first, 600) - started
        await instance.wait_ready(within=600)
        outcome.assigned_s = _logged_at(instance.log_path, "partitions assigned") - started
        say(f"{partitions} partitions: first output after {outcome.first_output_s:.2f} s, "
            f"{outcome.first_output_s - outcome.assigned_s:.2f} s after the assignment")
        ids = list(runs.values())
        labels = {"consumer": "typed", "outcome": "committed"}
        before = instance.metric("symfonic_stream_transactions_total", **labels)
        count = int(TRICKLE_RATE * TRICKLE_S)

        def encode(i: int, now: float) -> tuple[bytes, bytes]:
            run = ids[i % len(ids)]
            return run.encode(), event(run, 1 + i // len(ids), "text_delta", now)

        _, achieved = await publish_at_rate(settings, count, encode, TRICKLE_RATE)
        await asyncio.sleep(2.0)  # the last transactions of the trickle
        outcome.rate = achieved
        outcome.transactions_per_s = (
            instance.metric("symfonic_stream_transactions_total", **labels) - before
        ) / (count / achieved + 2.0)
    finally:
        await reader.stop()
        instance.stop()
    return outcome


def report(outcome: Outcome) -> str:
    lines = [markdown([["event", "longest stall (s)", "changelog records read at set-up",
                        "probe outputs/s before → after"],
                       *([e.name, f"{e.longest_s:.2f}", f"{e.restored_records:,.0f}",
                          f"{e.outputs_before:.0f} → {e.outputs_after:.0f}"]
                         for e in outcome.events)])]
    lines.append(f"\n{outcome.runs:,} runs on {outcome.partitions} partitions, "
                 f"{outcome.instances} instances (+1 joining), "
                 f"{f'as the chart with {outcome.chart_values}: ' if outcome.chart_values else ''}"
                 f"persistent store "
                 f"{'on' if outcome.state_dir else 'off'}, static membership "
                 f"{'on' if outcome.static else 'off'}"
                 f"{' (leaving on stop)' if outcome.leave_on_stop else ''}, cache keys "
                 f"{'default' if outcome.cache_keys is None else outcome.cache_keys}: "
                 f"runs differing from the reference **{outcome.runs_differing:,}** "
                 f"{outcome.example}")
    for tag, (now, peak) in sorted(outcome.rss_mib.items()):
        lines.append(f"- {tag}: RSS {now:.0f} MiB with every run open (peak {peak:.0f} MiB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = options(
        "bench rebalance", argv, __doc__, runs=1_000_000, partitions=12, instances=2,
        hold_s=(20.0, "how long the deployment runs after each event"),
        state_dir=(False, "each instance keeps its state on disk (SYMFONIC_STATE_DIR)"),
        cache_keys=(int, "with --state-dir: SYMFONIC_STATE_CACHE_KEYS (values per store and "
                         "partition kept in memory; 0: all, loaded at start)"),
        static=(False, "static group membership (SYMFONIC_GROUP_INSTANCE_ID per instance)"),
        leave_on_stop=(False, "with --static: SYMFONIC_LEAVE_GROUP_ON_STOP (a SIGTERMed "
                              "instance leaves its group)"),
        state_keep_s=(float, "SYMFONIC_STATE_KEEP_S (unset: the default)"),
        chart_values=(Path, "configure the instances as the chart does its pods with these "
                            "values over its defaults (helm/symfonic-stream/values.yaml: the "
                            "default deployment); instead of the five options above"),
        partitions_only=(int, "only the one instance on N partitions (first output, txn/s)"),
        json=(Path, "also write the figures here"))
    if args.chart_values:
        vars(args).update(chart_options(args.chart_values))
    log_dir = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    say(f"consumer logs in {log_dir}")

    async def run() -> tuple[str, Any, bool]:
        async with Session("rb", log_dir=log_dir) as session:
            if args.partitions_only:
                many = await many_partitions(session, args.partitions_only)
                return (f"{many.partitions} partitions, one instance: first output "
                        f"{many.first_output_s:.2f} s after start, "
                        f"{many.first_output_s - many.assigned_s:.2f} s after its partitions "
                        f"were assigned; at {many.rate:.0f} events/s, "
                        f"{many.transactions_per_s:.1f} transactions/s"), asdict(many), True
            outcome = await scale(session, args)
            return report(outcome), asdict(outcome), outcome.runs_differing == 0

    text, figures, ok = asyncio.run(run())
    print(text)
    if args.json:
        write_json(args.json, figures)
    return 0 if ok else 1

