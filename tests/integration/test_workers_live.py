"""``run typed --workers 2`` on the broker: two worker processes in one group, one endpoint.

The supervisor's workers split a 4-partition raw topic between them and the output is
exactly once (read_committed, run by run equal to the reference oracle's, dense seq, no
duplicate); its ``/metrics`` holds both workers' series, told apart by ``worker``;
SIGTERM stops both gracefully (exit 0). A worker killed with SIGKILL makes the supervisor
stop the other and exit 1, and a killed supervisor leaves no worker running.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import orjson
import psutil
from prometheus_client.parser import text_string_to_metric_families

from symfonic_stream.models.names import TopicNames

from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    wait_caught_up,
)
from .observe import (
    ASSIGNED_GAUGE,
    describe_group,
    read_to_committed_end,
    stop_gracefully,
    wait_idle,
)
from .workloads import WORKLOADS

TYPED = "typed"


def scrape(proc: ConsumerProcess) -> list[tuple[str, dict[str, str], float]]:
    status, text = proc.probe("/metrics")
    assert status == 200, f"/metrics answered {status}: {text[:300]}\n{proc.log()}"
    return [(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


def owned_by_worker(proc: ConsumerProcess, topic: str) -> dict[str, frozenset[int]]:
    """worker label → the partitions of ``topic`` that worker reports it owns."""
    owned: dict[str, set[int]] = {}
    for name, labels, value in scrape(proc):
        if name == ASSIGNED_GAUGE and labels.get("topic") == topic and value == 1:
            owned.setdefault(labels["worker"], set()).add(int(labels["partition"]))
    return {worker: frozenset(partitions) for worker, partitions in owned.items()}


async def wait_split(proc: ConsumerProcess, group: str, topic: str) -> dict[str, frozenset[int]]:
    """Until the group is stable with two members, each one of the two workers (by the
    partitions they own), and all four partitions owned."""
    deadline = time.monotonic() + 90
    seen: object = None
    while time.monotonic() < deadline:
        owned = await asyncio.to_thread(owned_by_worker, proc, topic)
        view = await describe_group(BOOTSTRAP, group, topic)
        seen = (view.state, dict(view.members), owned)
        if (view.state == "Stable" and set(owned) == {"0", "1"}
                and sorted(map(sorted, owned.values())) == sorted(map(sorted,
                                                                      view.members.values()))
                and frozenset().union(*owned.values()) == frozenset(range(4))):
            return owned
        await asyncio.sleep(0.25)
    raise AssertionError(f"the workers never split the partitions: {seen}\n{proc.log()}")


async def test_two_workers_share_the_partitions_and_the_output_is_exactly_once(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    group, source = names.group(TYPED), names.agent_events
    workload = WORKLOADS[TYPED]  # whole runs; the check is the reference oracle's
    rng = random.Random(31)
    sent = [record for number in range(12) for record in workload.batch(rng, number)]
    proc = ConsumerProcess(TYPED, prefix, tmp_path, args=["run", TYPED, "--workers", "2"])
    try:
        await proc.start().wait_ready(within=90)
        assert proc.probe("/healthz")[0] == 200
        owned = await wait_split(proc, group, source)
        assert not owned["0"] & owned["1"]
        await produce(source, sent)
        await wait_caught_up(group, source, within=120)
        await wait_idle(proc, within=120)
        samples = await asyncio.to_thread(scrape, proc)
        read_in = {w: sum(v for n, labels, v in samples if labels.get("worker") == w
                          and n == "symfonic_stream_records_in_total") for w in ("0", "1")}
        assert read_in["0"] > 0 and read_in["1"] > 0, read_in
        assert read_in["0"] + read_in["1"] == len(sent), read_in
        own = {n: v for n, labels, v in samples if "worker" not in labels}
        assert own == {"symfonic_stream_workers": 2, "symfonic_stream_workers_up": 2}
        await stop_gracefully(proc)  # SIGTERM: both commit, leave, exit 0; so does it
        read = {topic: await read_to_committed_end(
                    topic, group=group, source=source, processes=[proc])
                for topic in workload.outputs(names)}
    finally:
        proc.stop()
    workload.check(names, sent, read)  # every run, dense seq, equal to the oracle's
    seqs = [(r.key, orjson.loads(r.value or b"")["seq"]) for r in read[names.stream_events]]
    assert len(seqs) == len(set(seqs)) > len(sent) / 2, "a duplicate, or next to no output"


def workers_of(proc: ConsumerProcess) -> dict[int, psutil.Process]:
    children = psutil.Process(proc.pid).children()
    return {int(child.environ()["SYMFONIC_WORKER_INDEX"]): child for child in children}


async def test_a_killed_worker_stops_the_other_and_the_supervisor_exits_1(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix, with_copier=False)
    proc = ConsumerProcess(TYPED, prefix, tmp_path, workers=2)  # SYMFONIC_WORKERS=2
    try:
        await proc.start().wait_ready(within=90)
        workers = workers_of(proc)
        assert sorted(workers) == [0, 1]
        workers[1].kill()
        assert await proc.wait(60) == 1, proc.log()
        assert not workers[0].is_running(), "the other worker outlived its supervisor"
    finally:
        proc.stop()
    log = proc.log(10_000)
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    said = [(line["message"], line.get("worker"), line.get("status")) for line in lines
            if line["logger"] == "symfonic_stream.runtime.workers"]
    assert ("worker exited on its own; stopping the others", 1, -9) in said, log
    assert not [m for m in said if "did not stop in time" in m[0]], log  # 0 stopped gracefully
    # Both workers' own lines say which worker they are.
    assert {line.get("worker") for line in lines
            if line["logger"] != "symfonic_stream.runtime.workers"} >= {0, 1}


async def test_a_killed_supervisor_leaves_no_worker_running(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    await create_topics(prefix, with_copier=False)
    proc = ConsumerProcess(TYPED, prefix, tmp_path, workers=2)
    try:
        await proc.start().wait_ready(within=90)
        workers = list(workers_of(proc).values())
        assert len(workers) == 2
        proc.kill()
        _gone, alive = await asyncio.to_thread(psutil.wait_procs, workers, 60)
        assert not alive, f"workers {alive} outlived their supervisor:\n{proc.log()}"
    finally:
        proc.stop()
