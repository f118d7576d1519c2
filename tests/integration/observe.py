"""What the integration tests observe on the broker and in the consumer processes.

Every helper here waits for an *event* (bounded, polling the broker or a process's
``/metrics``), never for an amount of time standing in for one:

* :func:`describe_group` / :func:`group_assignment`: the consumer group as the broker's
  coordinator describes it (members and the partitions assigned to each);
* :func:`wait_for_assignment`: until the group is stable, every member is one of the
  test's :class:`~tests.integration.harness.ConsumerProcess` es (matched by the partitions
  the process reports in its ``symfonic_stream_consumer_lag_records`` gauge, since all
  members of a group share one ``client_id`` (``symfonic-stream-<version>-<group>``) and
  host), the whole topic is assigned, and a condition over "which process owns which
  partitions" holds;
* :func:`wait_idle` / :func:`quiesce`: until the group committed the input's end and no
  process holds buffered events; then the processes are stopped gracefully;
* :func:`read_to_committed_end`: every partition of a topic, read_committed, up to its
  last stable offset taken *after* all of the above, with no transaction left open;
* :func:`wait_until` (any awaited condition), :func:`wait_engine_idle` (an in-process
  engine's :func:`wait_idle`), :func:`open_transaction_records` (what a frozen writer's
  open transactions put on a topic), :func:`wait_consumed` / :func:`read_consumed_to_end`
  (the same waits and read for a source whose partitions may end in a commit marker).
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from prometheus_client.parser import text_string_to_metric_families

from symfonic_stream.processors.projector import (
    Buffered,
    RunState,
    decode_buffered,
    decode_run,
)

from .conftest import partitions_of, read_to_end
from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    InProcessEngine,
    Record,
    committed_offsets,
    end_offsets,
    open_transaction_partitions,
    samples_of,
    wait_caught_up,
)

#: How often the waits below look again (a poll interval, not a stand-in for an event).
POLL_S = 0.25
LAG_GAUGE = "symfonic_stream_consumer_lag_records"
ASSIGNED_GAUGE = "symfonic_stream_partition_assigned"  # newer engines only
BUFFERED_GAUGE = "symfonic_stream_buffered_events"
REBALANCES = "symfonic_stream_rebalances_total"
RESTORED = "symfonic_stream_state_records_restored_total"

#: Who owns what: process name -> partitions of the input topic.
Owners = dict[str, frozenset[int]]


# --------------------------------------------------------------------------- the group


@dataclass(frozen=True)
class GroupView:
    """One DescribeGroups answer: the group's state and each member's assigned partitions.

    The coordinator only reports assignments of a ``Stable`` group; in any other state
    (``PreparingRebalance``, ``CompletingRebalance``) members are listed with nothing.
    """

    state: str
    members: dict[str, frozenset[int]] = field(default_factory=dict)


async def describe_group(bootstrap: str, group: str, topic: str | None = None) -> GroupView:
    """The group as its coordinator describes it; partitions of ``topic`` only, if given."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = [g for response in responses for g in response.groups if g[1] == group]
    error_code, _, state, _, _, members = described[:6]
    assert error_code == 0, f"DescribeGroups({group}) failed with error {error_code}"
    view: dict[str, frozenset[int]] = {}
    for member in members:
        member_id, raw_assignment = member[0], member[4]
        partitions: set[int] = set()
        if raw_assignment:
            decoded = ConsumerProtocolMemberAssignment.decode(raw_assignment)
            for tp in decoded.partitions():
                if topic is None or tp.topic == topic:
                    partitions.add(tp.partition)
        view[str(member_id)] = frozenset(partitions)
    return GroupView(state=str(state), members=view)


async def group_assignment(bootstrap: str, group: str) -> dict[str, set[int]]:
    """Member id -> assigned partitions (over all topics) of a ``Stable`` group.

    Fails when the group is not stable: mid-rebalance the broker reports no assignment.
    """
    view = await describe_group(bootstrap, group)
    assert view.state == "Stable", f"group {group} is {view.state}, not Stable"
    return {member: set(partitions) for member, partitions in view.members.items()}


# --------------------------------------------------------------------------- the processes


def _metrics_text(process: ConsumerProcess) -> str | None:
    """The process's ``/metrics`` text; None when it is not running or does not answer."""
    if process.proc is None or process.proc.poll() is not None:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{process.port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of ``name`` in a ``/metrics`` text; fails when nothing declares ``name``
    (:func:`~tests.integration.harness.samples_of`)."""
    return samples_of(text_string_to_metric_families(text), name)


async def gauge_partitions(process: ConsumerProcess, topic: str) -> frozenset[int] | None:
    """The partitions of ``topic`` a running process has set up and consumes: those with a
    lag series, or an assignment series where the engine has that gauge (it drops both
    series of a revoked partition). None if the process does not answer."""
    text = await asyncio.to_thread(_metrics_text, process)
    if text is None:
        return None
    return frozenset(
        int(labels["partition"])
        for name in (LAG_GAUGE, ASSIGNED_GAUGE)
        for labels, _ in _samples(text, name)
        if labels.get("topic") == topic
    )


async def metric_value(process: ConsumerProcess, name: str) -> float:
    """The sum of every sample of ``name`` of the process's consumer (its resume intake's
    are another consumer's) on a running process (0 when its series has no value yet; a
    name nothing declares fails)."""
    text = await asyncio.to_thread(_metrics_text, process)
    assert text is not None, f"{process.log_path.name} does not answer:\n{process.log()}"
    return sum(value for labels, value in _samples(text, name)
               if labels.get("consumer", process.consumer) == process.consumer)


@dataclass(frozen=True)
class Assignment:
    """The group's stable assignment, each member matched to one of the test's processes."""

    owners: Owners
    member_of: dict[str, str]  # process name -> its member id (members only)
    state: str

    def member(self, name: str) -> str:
        return self.member_of[name]


async def _snapshot(
    bootstrap: str, group: str, topic: str, processes: Mapping[str, ConsumerProcess]
) -> tuple[Assignment | None, str]:
    """The stable, fully assigned group matched to ``processes`` (or None and why not)."""
    view = await describe_group(bootstrap, group, topic)
    if view.state != "Stable":
        return None, f"group is {view.state}: {dict(view.members)}"
    every = set(await partitions_of(bootstrap, topic))
    assigned = set().union(*view.members.values()) if view.members else set()
    if assigned != every:
        return None, f"partitions {sorted(every - assigned)} have no owner: {view.members}"
    reported = {name: await gauge_partitions(p, topic) for name, p in processes.items()}
    member_of: dict[str, str] = {}
    for member, partitions in view.members.items():
        matches = [name for name, gauged in reported.items() if gauged == partitions]
        if len(matches) != 1:
            return None, (
                f"member {member} owns {sorted(partitions)}, which "
                f"{'no' if not matches else 'more than one'} process reports: {reported}"
            )
        member_of[matches[0]] = member
    owners = {name: view.members[member_of[name]] if name in member_of else frozenset()
              for name in processes}
    # A process that is no member must not consume anything (a stale lag series would
    # mean the engine still works a partition the group gave to someone else).
    strays = {name: reported[name] for name in processes
              if name not in member_of and reported[name]}
    if strays:
        return None, f"processes outside the group still report partitions: {strays}"
    return Assignment(owners=owners, member_of=member_of, state=view.state), ""


async def wait_for_assignment(
    group: str,
    topic: str,
    processes: Mapping[str, ConsumerProcess],
    expect: Callable[[Owners], bool],
    what: str,
    *,
    bootstrap: str = BOOTSTRAP,
    within: float = 90.0,
) -> Assignment:
    """Until the broker's stable assignment of ``group``, matched to ``processes``, satisfies
    ``expect`` (``what`` says what that is, for the failure message).

    Matched means: every member of the group is exactly one of ``processes`` (the one whose
    lag gauge lists exactly that member's partitions), every partition of ``topic`` is
    assigned, and a process that is no member consumes nothing. Processes that are not
    members (stopped, killed, not started) own ``frozenset()``.
    """
    deadline = time.monotonic() + within
    why = ""
    while time.monotonic() < deadline:
        snapshot, why = await _snapshot(bootstrap, group, topic, processes)
        if snapshot is not None:
            if expect(snapshot.owners):
                return snapshot
            why = f"owners are {_show(snapshot.owners)}"
        await asyncio.sleep(POLL_S)
    logs = "\n".join(f"--- {name}\n{p.log(30)}" for name, p in processes.items())
    raise AssertionError(f"{group}: no hand-over to {what} within {within}s: {why}\n{logs}")


def _show(owners: Owners) -> dict[str, list[int]]:
    return {name: sorted(partitions) for name, partitions in owners.items()}


def split_between(owners: Owners, *names: str) -> bool:
    """Each of ``names`` owns at least one partition and nobody else owns any."""
    return all(owners[n] for n in names) and not any(
        partitions for n, partitions in owners.items() if n not in names
    )


def owned_only_by(owners: Owners, name: str) -> bool:
    """``name`` owns everything (the whole topic is assigned: see wait_for_assignment)."""
    return bool(owners[name]) and not any(p for n, p in owners.items() if n != name)


# --------------------------------------------------------------------------- quiet and read


async def wait_idle(process: ConsumerProcess, within: float = 90.0) -> None:
    """Until a running process holds no buffered event and has no lag on any partition."""
    deadline = time.monotonic() + within
    state = ""
    while time.monotonic() < deadline:
        text = await asyncio.to_thread(_metrics_text, process)
        assert text is not None, f"{process.log_path.name} stopped:\n{process.log()}"
        buffered = sum(value for _, value in _samples(text, BUFFERED_GAUGE))
        lag = {labels["partition"]: value for labels, value in _samples(text, LAG_GAUGE)}
        if buffered == 0 and not any(lag.values()):
            return
        state = f"buffered {buffered}, lag {lag}"
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"{process.log_path.name} not idle after {within}s: {state}")


async def stop_gracefully(*processes: ConsumerProcess, within: float = 60.0) -> None:
    """SIGTERM every running process and expect exit status 0 (its work committed)."""
    running = [p for p in processes if p.proc is not None and p.proc.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        status = await process.wait(within)
        assert status == 0, f"{process.log_path.name} exited with {status}:\n{process.log()}"


async def quiesce(
    group: str, source: str, processes: Sequence[ConsumerProcess], within: float = 120.0
) -> None:
    """Until ``group`` committed ``source``'s end and every running process is idle; then
    stop them all gracefully, so nothing can be written after a later read."""
    await wait_caught_up(group, source, within=within)
    for process in processes:
        if process.proc is not None and process.proc.poll() is None:
            await wait_idle(process, within=within)
    await stop_gracefully(*processes)


async def wait_no_open_transaction(topic: str, within: float = 60.0) -> None:
    """Until every partition's last stable offset is its high watermark."""
    deadline = time.monotonic() + within
    open_ = await open_transaction_partitions(topic)
    while open_ and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        open_ = await open_transaction_partitions(topic)
    assert not open_, f"{topic}: partitions {open_} still have an open transaction"


async def read_to_committed_end(
    topic: str,
    *,
    group: str,
    source: str,
    processes: Sequence[ConsumerProcess],
    within: float = 120.0,
) -> list[Record]:
    """Every record of ``topic`` (all partitions, read_committed) up to its committed end.

    The end (each partition's last stable offset) is taken only after ``group``'s committed
    offsets reached ``source``'s end, after each of ``processes`` is stopped or idle, and
    once no transaction is open on ``topic`` (so the end is the high watermark too): a
    record written late, a duplicate by a late joiner included, is read, not missed.
    """
    await wait_caught_up(group, source, within=within)
    for process in processes:
        if process.proc is not None and process.proc.poll() is None:
            await wait_idle(process, within=within)
    await wait_no_open_transaction(topic, within=within)
    ends = await end_offsets(topic)
    read = await read_to_end(BOOTSTRAP, topic, isolation_level="read_committed")
    records = [Record(r.topic, r.partition, r.offset, r.key, r.value, r.headers) for r in read]
    last = {r.partition: r.offset for r in records}
    # Nothing past the end seen before the read (a transaction marker is the last offset).
    assert all(last.get(p, -1) < end for p, end in ends.items()), (last, ends)
    return records


async def wait_committed(
    group: str, topic: str, partitions: frozenset[int], within: float = 60.0
) -> dict[int, int]:
    """Until ``group`` committed an offset past 0 on every one of ``partitions``."""
    deadline = time.monotonic() + within
    committed = await committed_offsets(group, topic)
    while not all(committed.get(p, 0) > 0 for p in partitions):
        assert time.monotonic() < deadline, (
            f"{group} committed nothing on some of {sorted(partitions)}: {committed}"
        )
        await asyncio.sleep(POLL_S)
        committed = await committed_offsets(group, topic)
    return committed


async def wait_committed_to(
    group: str, topic: str, ends: Mapping[int, int], partitions: Iterable[int],
    within: float = 60.0,
) -> None:
    """Until ``group`` committed at least ``ends[p]`` on every one of ``partitions``."""
    wanted = {p: ends[p] for p in partitions}
    committed: dict[int, int] = {}

    async def reached() -> bool:
        nonlocal committed
        committed = await committed_offsets(group, topic)
        return all(committed.get(p, 0) >= end for p, end in wanted.items())

    try:
        await wait_until(reached, f"{group} committed {wanted}", within)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: committed {committed}") from None


async def delete_all_records(topic: str) -> None:
    """Delete every record of ``topic`` (each partition's log starts at its end after)."""
    partitions = await partitions_of(BOOTSTRAP, topic)
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_uncommitted")
    await consumer.start()
    try:
        consumer.assign(tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=30_000)
    await admin.start()
    try:
        low = await admin.delete_records(
            {tp: RecordsToDelete(before_offset=end) for tp, end in ends.items()}
        )
    finally:
        await admin.close()
    assert {tp: low.get(tp) for tp in tps} == ends, f"{topic}: log starts {low}, ends {ends}"


# --------------------------------------------------------------------------- the changelog


@dataclass(frozen=True, slots=True)
class ChangelogRun:
    """One run as a guard's changelog holds it: its record, and the events held behind its
    holes (each under its own ``buf/<run_id>/<index>`` key)."""

    state: RunState
    held: dict[int, Buffered]


async def changelog_state(topic: str, key: bytes) -> ChangelogRun | None:
    """The latest committed state of one run in a guard's changelog (None: no record, or a
    tombstone), with its held events."""
    latest: RunState | None = None
    held: dict[int, Buffered] = {}
    buffered = b"buf/" + key.removeprefix(b"run/") + b"/"
    for record in await read_to_end(BOOTSTRAP, topic, isolation_level="read_committed"):
        if record.key == key:
            latest = None if record.value is None else decode_run(record.value)
        elif record.key is not None and record.key.startswith(buffered):
            index = int(record.key[len(buffered):])
            if record.value is None:
                held.pop(index, None)
            else:
                held[index] = decode_buffered(record.value)
    return None if latest is None else ChangelogRun(latest, held)


async def wait_changelog_state(
    topic: str, key: bytes, expect: Callable[[ChangelogRun], bool], what: str,
    within: float = 60.0
) -> ChangelogRun:
    """Until the run's committed changelog state satisfies ``expect``."""
    deadline = time.monotonic() + within
    state = await changelog_state(topic, key)
    while (state is None or not expect(state)) and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        state = await changelog_state(topic, key)
    assert state is not None and expect(state), f"{topic} {key!r}: not {what}: {state}"
    return state


# --------------------------------------------------------------------------- added waits


async def wait_until(
    check: Callable[[], Awaitable[bool]], what: str, within: float = 60.0
) -> None:
    """Until ``check()`` is true (polled every :data:`POLL_S`); fails naming ``what``."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(POLL_S)


def _engine_samples(running: InProcessEngine, name: str) -> list[float]:
    return [value for _, value in samples_of(running.registry.collect(), name)]


async def wait_engine_idle(running: InProcessEngine, within: float = 90.0) -> None:
    """:func:`wait_idle` for an in-process engine: no buffered event, no lag anywhere."""
    state = ""

    async def idle() -> bool:
        nonlocal state
        buffered = _engine_samples(running, BUFFERED_GAUGE)
        lag = _engine_samples(running, LAG_GAUGE)
        state = f"buffered {buffered}, lag {lag}"
        return not any(buffered) and not any(lag)

    try:
        await wait_until(idle, f"{running.engine.topology.consumer} idle", within)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {state}") from None


async def open_transaction_records(topic: str, within: float = 30.0) -> list[Record]:
    """The records of ``topic`` that belong to transactions still open: read
    read_uncommitted, at or past their partition's last stable offset.

    Meant for a topic whose only writer is frozen (SIGSTOP): it cannot begin or end a
    transaction, so the set can only shrink, when the broker writes the markers of a
    commit the coordinator had logged before the freeze (a few milliseconds). The answer
    is taken once two looks :data:`POLL_S` apart agree.
    """
    deadline = time.monotonic() + within
    previous: list[Record] | None = None
    while True:
        stable = await end_offsets(topic)
        read = await read_to_end(BOOTSTRAP, topic, isolation_level="read_uncommitted")
        current = [Record(r.topic, r.partition, r.offset, r.key, r.value, r.headers)
                   for r in read if r.offset >= stable[r.partition]]
        if current == previous:
            return current
        assert time.monotonic() < deadline, f"{topic}: open transactions keep changing"
        previous = current
        await asyncio.sleep(POLL_S)


async def _last_records(topic: str) -> dict[int, int]:
    """Partition -> offset of its last committed data record (transaction markers are no
    records: a partition whose last batch was transactional ends one past its marker)."""
    last: dict[int, int] = {}
    for record in await read_to_end(BOOTSTRAP, topic, isolation_level="read_committed"):
        last[record.partition] = record.offset
    return last


async def wait_consumed(group: str, topic: str, within: float = 120.0) -> None:
    """Until ``group`` committed past the last committed record of every partition of
    ``topic``, re-read on every look.

    :func:`~tests.integration.harness.wait_caught_up` for a source whose partitions may
    end in a transaction's commit marker, such as the resume validator's own input (it
    writes a re-keyed answer back to it): the engine commits ``last record + 1``, one short
    of such a partition's last stable offset, so committed offsets never reach it.
    """
    last: dict[int, int] = {}
    committed: dict[int, int] = {}

    async def consumed() -> bool:
        nonlocal last, committed
        last = await _last_records(topic)
        committed = await committed_offsets(group, topic)
        return all(committed.get(p, 0) > offset for p, offset in last.items())

    try:
        await wait_until(consumed, f"{group} consumed all of {topic}", within)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: last records {last}, committed {committed}") from None


async def read_consumed_to_end(
    topic: str,
    *,
    group: str,
    source: str,
    processes: Sequence[ConsumerProcess],
    within: float = 120.0,
) -> list[Record]:
    """:func:`read_to_committed_end` for a ``source`` whose partitions may end in a commit
    marker (see :func:`wait_consumed`); every one of ``processes`` must have stopped.

    Once ``group`` consumed every committed record of ``source``, with its writers gone and
    no transaction open on ``topic``, each partition of ``topic`` is read read_committed to
    its end: a record written late, a duplicate included, is read, not missed.
    """
    running = [p.log_path.name for p in processes if p.proc is not None and p.proc.poll() is None]
    assert not running, f"still running: {running}"
    await wait_consumed(group, source, within=within)
    await wait_no_open_transaction(topic, within=within)
    ends = await end_offsets(topic)
    read = await read_to_end(BOOTSTRAP, topic, isolation_level="read_committed")
    records = [Record(r.topic, r.partition, r.offset, r.key, r.value, r.headers) for r in read]
    last = {r.partition: r.offset for r in records}
    assert all(last.get(p, -1) < end for p, end in ends.items()), (last, ends)
    return records
