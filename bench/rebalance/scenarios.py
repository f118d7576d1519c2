"""The instances of one run and the scale events applied to them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from aiokafka.admin import AIOKafkaAdminClient

from bench.consumers import Consumer
from bench.kafka_io import cleanup, create_topics, end_offsets, prefix_settings, publish
from bench.progress import say
from bench.rebalance.load import Probes, check, closing, opening
from symfonic_stream.config import Settings
from symfonic_stream.kafka.admin import group_offsets
from symfonic_stream.kafka.clients import admin_kwargs
from symfonic_stream.models.names import TopicNames

ASSIGNED = "symfonic_stream_partition_assigned"
RESTORED = "symfonic_stream_state_records_restored_total"
#: Seconds of probe outputs counted before and after an event for its outputs per second.
RATE_WINDOW_S = 5.0


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


def metric_sum(consumer: Consumer, name: str) -> float:
    status, body = consumer._get("/metrics")
    if status != 200:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith(name) and not line.startswith("#"))


def owned(consumer: Consumer) -> set[int]:
    status, body = consumer._get("/metrics")
    if status != 200:
        return set()
    found = set()
    for line in body.decode().splitlines():
        if line.startswith(ASSIGNED + "{") and line.rstrip().endswith(" 1.0"):
            found.add(int(line.split('partition="', 1)[1].split('"', 1)[0]))
    return found


async def until(check_: Callable[[], bool], what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(check_):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {within:.0f} s: {what}")
        await asyncio.sleep(0.1)


class Deployment:
    """The typed projector's instances of one run, on its own topic prefix."""

    def __init__(self, settings: Settings, log_dir: Path, state_dir: Path | None,
                 static: bool = False, cache_keys: int | None = None,
                 leave_on_stop: bool = False) -> None:
        self.settings = settings
        self._static = static
        self._cache_keys = cache_keys
        self._leave_on_stop = leave_on_stop
        self.names = TopicNames(settings.topic_prefix)
        self._log_dir = log_dir
        self._state_dir = state_dir
        self.live: dict[str, Consumer] = {}
        self.gone: list[Consumer] = []

    def start(self, tag: str) -> Consumer:
        instance = Consumer("typed", self.settings, self._log_dir)
        instance.log_path = self._log_dir / f"{self.settings.topic_prefix}-typed-{tag}.log"
        if self._state_dir is not None:  # a folder of its own, as a pod's volume is
            instance.env["SYMFONIC_STATE_DIR"] = str(self._state_dir / tag)
            if self._cache_keys is not None:
                instance.env["SYMFONIC_STATE_CACHE_KEYS"] = str(self._cache_keys)
        if self._static:  # its name, as a pod's
            instance.env["SYMFONIC_GROUP_INSTANCE_ID"] = tag
            if self._leave_on_stop:
                instance.env["SYMFONIC_LEAVE_GROUP_ON_STOP"] = "true"
        self.live[tag] = instance.start()
        return instance

    async def settled(self, within: float = 900) -> None:
        """Until every live instance is ready and the partitions are all owned."""
        every = set(range(self.settings.partitions))

        def ready() -> bool:
            return all(i.ready() for i in self.live.values()) and \
                set().union(*(owned(i) for i in self.live.values())) == every
        await until(ready, "every partition owned by a ready instance", within)

    def restored(self) -> float:
        return sum(metric_sum(i, RESTORED) for i in self.live.values() if i.alive())

    def stop(self, tag: str) -> None:
        instance = self.live.pop(tag)
        instance.stop()
        self.gone.append(instance)

    def kill(self, tag: str) -> None:
        instance = self.live.pop(tag)
        assert instance.proc is not None
        instance.proc.kill()
        instance.proc.wait(10)
        self.gone.append(instance)

    def replace(self, tag: str) -> Consumer:
        """SIGKILL an instance and start another in its place (its folder too)."""
        self.kill(tag)
        return self.start(tag)

    def memory(self) -> dict[str, tuple[float, float]]:
        """Each live instance's RSS now and its peak, in MiB."""
        found = {}
        for tag, instance in self.live.items():
            peak = instance.sample_rss()
            now = psutil.Process(instance.pid).memory_info().rss
            found[tag] = (round(now / 2**20, 1), round(peak / 2**20, 1))
        return found

    def stop_all(self) -> None:
        for tag in list(self.live):
            self.stop(tag)


async def caught_up(settings: Settings, names: TopicNames, within: float) -> None:
    """Until the typed group's committed offsets reach the raw topic's end."""
    ends = await end_offsets(settings, names.agent_events, settings.partitions)
    deadline = time.monotonic() + within
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    await admin.start()
    try:
        while True:
            offsets = await group_offsets(admin, names.group("typed"))
            done = {tp.partition: off for tp, off in offsets.items()
                    if tp.topic == names.agent_events}
            if all(done.get(p, 0) >= end for p, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the typed group did not catch up within {within:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def _timed(deployment: Deployment, event: Event, act: Callable[[], object],
                 hold_s: float) -> Event:
    before = deployment.restored() + sum(metric_sum(i, RESTORED) for i in deployment.gone)
    event.at = time.time()
    # In a thread: a SIGTERMed instance is waited for until it exits, and the probes'
    # publisher and reader share this event loop (blocked, they would time their own stall).
    await asyncio.to_thread(act)
    await deployment.settled()
    await asyncio.sleep(hold_s)  # the deployment runs like this for a while
    after = deployment.restored() + sum(metric_sum(i, RESTORED) for i in deployment.gone)
    event.restored_records = max(0.0, after - before)
    return event


async def scale(base: Settings, runs: int, partitions: int, instances: int, hold_s: float,
                log_dir: Path, state_dir: Path | None, static: bool,
                cache_keys: int | None = None, leave_on_stop: bool = False) -> Outcome:
    """The whole run: load, events, close, check (the package's docstring)."""
    settings = prefix_settings(base, f"rb{uuid.uuid4().hex[:8]}", partitions)
    outcome = Outcome(runs, partitions, instances, state_dir is not None, static,
                      cache_keys=cache_keys, leave_on_stop=leave_on_stop)
    started = time.monotonic()
    await create_topics(settings)
    deployment = Deployment(settings, log_dir, state_dir, static, cache_keys, leave_on_stop)
    probes = Probes(settings, deployment.names)
    try:
        say(f"publishing {runs:,} open runs over {partitions} partitions")
        await publish(settings, opening(runs))
        for n in range(instances):
            deployment.start(f"i{n}")
        await deployment.settled()
        await caught_up(settings, deployment.names, within=3600)
        await probes.start()
        await asyncio.sleep(RATE_WINDOW_S)
        joined = f"i{instances}"
        outcome.events = [
            await _timed(deployment, Event("join"), lambda: deployment.start(joined), hold_s),
            await _timed(deployment, Event("leave"), lambda: deployment.stop(joined), hold_s),
            await _timed(deployment, Event("kill-restart"), lambda: deployment.replace("i0"),
                         hold_s),
        ]
        outcome.rss_mib = deployment.memory()  # (every run still open)
        say("closing every run")
        # The last event's window ends here: a million closing events, which the probes
        # then wait behind, are not its stall (until this was fixed, its figures included
        # them: every partition, the survivor's too, seemed to stall 4-7 s).
        closing_at = time.time()
        await publish(settings, closing(runs))
        await caught_up(settings, deployment.names, within=3600)
        await probes.stop()
        ends = [e.at for e in outcome.events[1:]] + [closing_at]
        for event, end in zip(outcome.events, ends, strict=True):
            event.stall_s = probes.stalls(event.at, end)
            event.outputs_before = probes.rate(event.at - RATE_WINDOW_S, event.at)
            event.outputs_after = probes.rate(event.at, event.at + RATE_WINDOW_S)
        deployment.stop_all()
        say("reading the typed topic and checking every run against the reference")
        outcome.runs_differing, outcome.example = await check(
            settings, deployment.names, runs, probes.sent)
    finally:
        deployment.stop_all()
        await cleanup(base, [settings.topic_prefix])
    outcome.seconds = time.monotonic() - started
    return outcome
