"""What the fault matrix feeds each consumer, and what it must have written (the checks).

Input comes in *batches* of whole units (whole runs, whole tickets with their answers), so
the feeder can stop at any batch boundary and what was sent is always a complete input:
the expected output is then a function of what was sent, computed without the code under
test (the typed and chunk projections by :mod:`tests.reference.oracle`).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.synthetic import Damage, RunShape, deliver, generate_run, interleave
from tests.reference import oracle

from .conftest import Record
from .harness import BOOTSTRAP

Sent = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]]]
#: Headers of the pause router's ticket registrations on resume-requests.
TICKET_HEADERS: list[tuple[str, bytes]] = [("symfonic-record-type", b"ticket")]
ANSWER_HEADERS: list[tuple[str, bytes]] = [("symfonic-record-type", b"answer")]


@dataclass(frozen=True, slots=True)
class Workload:
    """One consumer's input and the check of its output."""

    consumer: str
    source: Callable[[TopicNames], str]
    outputs: Callable[[TopicNames], list[str]]
    batch: Callable[[random.Random, int], list[Sent]]
    check: Callable[[TopicNames, list[Sent], dict[str, list[Record]]], None]
    stateful: bool = True


# --------------------------------------------------------------------------- the copier


def _copier_batch(rng: random.Random, number: int) -> list[Sent]:
    return [(f"run-{rng.randrange(40)}".encode(), f"{number}-{i}".encode(), [])
            for i in range(100)]


def check_copier(names: TopicNames, sent: list[Sent], read: dict[str, list[Record]]) -> None:
    copied = read[f"{names.prefix}.copier-output"]
    values = [r.value for r in copied]
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicates"
    assert sorted(v or b"" for v in values) == sorted(v or b"" for _, v, _ in sent), "lost"
    by_key: dict[bytes | None, list[bytes | None]] = {}
    for key, value, _ in sent:
        by_key.setdefault(key, []).append(value)
    got: dict[bytes | None, list[bytes | None]] = {}
    for r in sorted(copied, key=lambda r: (r.partition, r.offset)):
        got.setdefault(r.key, []).append(r.value)
    assert got == by_key, "per-key order broken"


# --------------------------------------------------------------------------- projectors


def _runs_batch(
    rng: random.Random, number: int, *, shape: RunShape, runs: int = 6
) -> list[Sent]:
    generated = [
        deliver(rng, generate_run(rng, f"r{number}-{n}", shape=shape), Damage())
        for n in range(runs)
    ]
    return [(e["run_id"].encode(), orjson.dumps(e), []) for e in interleave(rng, generated)]


def reference_by_run(lines: Iterable[bytes], projection: oracle.ProjectionName
                     ) -> dict[str, list[oracle.Envelope]]:
    """The reference projection of ``lines`` (:mod:`tests.reference.oracle`, never the
    code under test), each run's envelopes in order; every line must be a good event."""
    expected, dead = oracle.project(lines, projection)
    assert not dead, f"the input itself has bad lines: {dead[:3]}"
    return oracle.envelopes_by_run(expected)


def reference_values_by_run(lines: Iterable[bytes], projection: oracle.ProjectionName
                            ) -> dict[str, list[bytes]]:
    """:func:`reference_by_run`, each envelope as the bytes a consumer writes."""
    return {run: [oracle.encode(e) for e in envelopes]
            for run, envelopes in reference_by_run(lines, projection).items()}


def _projector_check(projection: oracle.ProjectionName) -> Callable[..., None]:
    def check(names: TopicNames, sent: list[Sent], read: dict[str, list[Record]]) -> None:
        topic = names.stream_events if projection == "typed" else names.stream_chunks
        got = oracle.envelopes_by_run(orjson.loads(r.value or b"") for r in read[topic])
        want = reference_by_run((v or b"" for _, v, _ in sent), projection)
        assert set(got) == set(want), f"runs missing {sorted(set(want) - set(got))[:5]}"
        for run_id, envelopes in want.items():
            seqs = [e["seq"] for e in got[run_id]]
            assert seqs == list(range(len(seqs))), f"{run_id}: seq {seqs[:20]}..."
            assert got[run_id] == envelopes, f"{run_id} differs from the reference projection"
        keys = {r.key for r in read[topic]}
        assert keys == {run_id.encode() for run_id in want}
        assert read[names.dead_letter] == [], "a healthy record was dead-lettered"
    return check


# --------------------------------------------------------------------------- pauses


def _pauses_batch(rng: random.Random, number: int) -> list[Sent]:
    return _runs_batch(rng, number, shape=RunShape(min_events=3, max_events=12, pause_share=0.7))


def check_pauses(names: TopicNames, sent: list[Sent], read: dict[str, list[Record]]) -> None:
    interrupts: dict[str, dict[str, Any]] = {}
    for _, value, _ in sent:
        event = orjson.loads(value or b"")
        if event.get("interrupt"):
            interrupts.setdefault(event["interrupt"]["interrupt_id"], event)
    # Synthetic pauses expire an hour after their (2025) timestamps: mostly expired when
    # routed; both queues together hold each ticket once.
    queues = (names.human_queue("default"), names.expired_queue)
    tickets = [orjson.loads(r.value or b"") for q in queues for r in read[q]]
    counted = Counter(t["ticket_id"] for t in tickets)
    assert [t for t, n in counted.items() if n > 1] == [], "a ticket routed twice"
    assert set(counted) == set(interrupts), "a ticket lost"
    for ticket in tickets:
        event = interrupts[ticket["ticket_id"]]
        assert ticket["run_id"] == event["run_id"]
        assert ticket["token"] == event["interrupt"]["token"]
        assert ticket["kind"] == ("ask_user" if event["kind"] == "ask_user" else "interrupt")
    registrations = [r for r in read[names.pause_registrations]
                     if ("symfonic-record-type", b"ticket") in r.headers]
    assert sorted(r.key or b"" for r in registrations) == sorted(
        i.encode() for i in interrupts
    ), "registrations differ from the tickets"
    assert read[names.dead_letter] == [], "a healthy record was dead-lettered"


# --------------------------------------------------------------------------- resumes


def _resumes_batch(rng: random.Random, number: int) -> list[Sent]:
    out: list[Sent] = []
    for n in range(20):
        ticket_id = f"t{number}-{n}"
        token = f"tok-{rng.randrange(10**9)}"
        ticket: dict[str, Any] = {
            "ticket_id": ticket_id, "queue": "default", "kind": "ask_user", "name": "ask_user",
            "questions": [], "payload": {}, "token": token, "run_id": f"run-{ticket_id}",
            "root_run_id": None, "session_id": None, "thread_id": None, "tool_call_id": "c",
            "tenant": None, "principal": None, "expires_at": 4_102_444_800.0,
            "resumable": True, "routed_at": 1.0, "source": "x/0/0",
        }
        out.append((ticket_id.encode(), orjson.dumps(ticket), TICKET_HEADERS))
        for answer in range(rng.randint(1, 3)):
            good = rng.random() < 0.8
            request = {"ticket_id": ticket_id, "token": token if good else "wrong",
                       "answer": {"n": answer}, "responder": f"{ticket_id}/{answer}"}
            out.append((ticket_id.encode(), orjson.dumps(request), ANSWER_HEADERS))
    return out


def expected_verdicts(sent: list[Sent]) -> dict[str, str]:
    """responder → ``accepted`` or the rejection reason, in each ticket's own order."""
    answered: set[str] = set()
    verdicts: dict[str, str] = {}
    for _, value, headers in sent:
        if list(headers) == TICKET_HEADERS:
            continue
        request = orjson.loads(value or b"")
        if request["token"] == "wrong":
            verdicts[request["responder"]] = "bad_token"
        elif request["ticket_id"] in answered:
            verdicts[request["responder"]] = "already_answered"
        else:
            answered.add(request["ticket_id"])
            verdicts[request["responder"]] = "accepted"
    return verdicts


def check_resumes(names: TopicNames, sent: list[Sent], read: dict[str, list[Record]]) -> None:
    got: list[tuple[str, str]] = []
    for record in read[names.resumes]:
        got.append((orjson.loads(record.value or b"")["responder"], "accepted"))
    for record in read[names.resume_rejections]:
        rejection = orjson.loads(record.value or b"")
        got.append((rejection["responder"], rejection["reason"]))
    responders = Counter(responder for responder, _ in got)
    assert [r for r, n in responders.items() if n > 1] == [], "an answer was checked twice"
    assert dict(got) == expected_verdicts(sent)


class Feeder:
    """Sends whole batches of a workload at a steady rate until stopped.

    One idempotent ``acks=all`` producer for the whole test, so a broker going away costs
    retries, never a duplicate. A send that fails for good fails the test (at
    :meth:`stop` or :meth:`sent_at_least`): what reached the broker would be unknown.
    """

    def __init__(self, workload: Workload, topic: str, seed: int, rate: float) -> None:
        self._workload = workload
        self._topic = topic
        self._rng = random.Random(seed)
        self._rate = rate
        self._batches = 0
        self.sent: list[Sent] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._producer: AIOKafkaProducer | None = None

    async def send_batches(self, count: int) -> None:
        for _ in range(count):
            await self._send_one()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def sent_at_least(self, count: int, within: float = 180.0) -> None:
        """Until ``count`` records were sent (the feeder's own progress, not a sleep)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while len(self.sent) < count:
            if self._task is not None and self._task.done():
                self._task.result()  # a failed send fails the test here
                raise AssertionError("the feeder stopped before sending enough")
            assert loop.time() < deadline, f"sent {len(self.sent)} of {count} in {within} s"
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        try:
            if self._task is not None:
                await self._task
        finally:
            if self._producer is not None:
                await self._producer.stop()
                self._producer = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self._send_one()

    async def _send_one(self) -> None:
        if self._producer is None:
            self._producer = AIOKafkaProducer(
                bootstrap_servers=BOOTSTRAP, enable_idempotence=True, acks="all", linger_ms=5
            )
            await self._producer.start()
        batch = self._workload.batch(self._rng, self._batches)
        self._batches += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        futures = []
        for key, value, headers in batch:
            futures.append(await self._producer.send(
                self._topic, key=key, value=value, headers=list(headers)))
        await asyncio.gather(*futures)
        self.sent.extend(batch)
        ahead = len(batch) / self._rate - (loop.time() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)


WORKLOADS: dict[str, Workload] = {
    "copier": Workload(
        "copier", lambda n: n.agent_events, lambda n: [f"{n.prefix}.copier-output"],
        _copier_batch, check_copier, stateful=False,
    ),
    "typed": Workload(
        "typed", lambda n: n.agent_events, lambda n: [n.stream_events, n.dead_letter],
        lambda rng, number: _runs_batch(rng, number, shape=RunShape(max_events=60)),
        _projector_check("typed"),
    ),
    "chunks": Workload(
        "chunks", lambda n: n.agent_events, lambda n: [n.stream_chunks, n.dead_letter],
        lambda rng, number: _runs_batch(rng, number, shape=RunShape(max_events=60)),
        _projector_check("chunks"),
    ),
    "pauses": Workload(
        "pauses", lambda n: n.agent_events,
        lambda n: [n.human_queue("default"), n.expired_queue, n.pause_registrations,
                   n.dead_letter],
        _pauses_batch, check_pauses,
    ),
    # The validator's engine, fed as the router and its intake would feed it (the intake,
    # the same process's other engine, is stateless and has its own tests).
    "resumes": Workload(
        "resumes", lambda n: n.pause_registrations,
        lambda n: [n.resumes, n.resume_rejections, n.dead_letter],
        _resumes_batch, check_resumes,
    ),
}
