"""The topology test driver: declared consumers run by the engine's own code on a
:class:`~symfonic_stream.testing.broker.MemoryBroker`, on a clock the test moves.

What runs is what ``symfonic-stream run`` runs, minus the network: each declared engine's
:class:`~symfonic_stream.engine.topology.Topology` (built from its declaration and the
settings by ``app/topologies.py``), one :class:`~symfonic_stream.engine.task.StreamTask`
per input partition with its processor and state stores, the process's
:class:`~symfonic_stream.engine.task.Committer` and the commit protocol
(``engine/transaction.py``: the state prepared into the changelog, the position record, the
dead letters' headers), the punctuation every :func:`~symfonic_stream.engine.engine.
punctuation_interval`, and a restore that applies the changelog's records to fresh stores
then calls the processor's ``restored``, as set-up step 3, restore, does. Only the Kafka
clients are the broker's (:mod:`.broker`).

The driver's work runs on an event loop of its own, in a thread of its own, so its methods
are plain calls from a test, synchronous or ``async``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from symfonic_stream.app.topologies import build_topology
from symfonic_stream.config import Settings
from symfonic_stream.consumers import Consumer, consumer, deployed
from symfonic_stream.engine.engine import punctuation_interval
from symfonic_stream.engine.setup import has_position, roll_back
from symfonic_stream.engine.task import Committer, StreamTask, task_state
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transaction import POSITION, Transactions, position_store, resume_offset
from symfonic_stream.kafka.producer import ProcessProducer
from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Resume, Ticket
from symfonic_stream.models.topics import Topic
from symfonic_stream.models.trace import Traced
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.sdk.publisher import encode_event
from symfonic_stream.sdk.reader import RunReader, RunReadError, RunRecord
from symfonic_stream.sdk.resumes import Owner, ResumeReader
from symfonic_stream.sdk.reviewer import Reviewer, TicketOutcome, Unnamed
from symfonic_stream.testing.broker import Headers, MemoryBroker, MemoryProducer, Record
from symfonic_stream.testing.fakes import FakeResumeReader, FakeReviewer, FakeRunReader

__all__ = ["TopologyTestDriver"]

T = TypeVar("T")
TracedModel = TypeVar("TracedModel", bound=Traced)


def _traced(model: TracedModel, record: Record) -> TracedModel:
    """``model`` with the trace context of the record it was read from."""
    model.traced(record.headers)
    return model


#: Rounds of records passed between the driver's engines before it gives up (a loop of
#: engines that write what they read would never settle).
MAX_ROUNDS = 10_000


@dataclass(slots=True)
class _EngineRun:
    """One declared engine as the driver runs it: its topology, its committer (one
    producer, as a process has), its metrics, and a task per input partition set up."""

    topology: Topology
    metrics: ConsumerMetrics
    committer: Committer
    tasks: dict[int, StreamTask] = field(default_factory=dict)


class TopologyTestDriver:
    """Declared consumers (by name, or a :class:`~symfonic_stream.consumers.Consumer` not
    registered yet; none named: every deployed one), on a broker in memory, on a clock of
    the test's (Unix seconds, from ``start``).

    Every topic has ``partitions`` partitions. Given another driver's ``broker``, this one
    starts where that one's consumers committed: a new process after a crash. Records
    written to a topic one of the driver's engines reads are processed by it at once, so
    the pause router's tickets reach the resume validator, and answers go from the intake
    to the validator, as on a broker. Settings default to the ``SYMFONIC_*`` environment,
    as the consumers read it.
    """

    def __init__(self, *consumers: str | Consumer, settings: Settings | None = None,
                 start: float = 0.0, partitions: int = 1, broker: MemoryBroker | None = None
                 ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.names = TopicNames(self.settings.topic_prefix)
        #: The topics, changelogs and group offsets (``broker``: another driver's, whose
        #: consumers this one takes over, their state restored from the changelogs).
        self.broker = broker if broker is not None else MemoryBroker(partitions)
        self._now = float(start)
        self.broker.now_ms = int(self._now * 1000)
        chosen = [consumer(c) if isinstance(c, str) else c for c in consumers] or list(deployed())
        self.consumers: tuple[Consumer, ...] = tuple(chosen)
        self._engines: dict[str, _EngineRun] = {}
        self._cursors: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="symfonic-driver",
                                        daemon=True)
        self._thread.start()
        self._closed = False
        try:
            for declared in self.consumers:
                for engine in declared.engines:
                    topology = replace(build_topology(engine, self.settings), clock=self.now)
                    self._engines[engine.name] = self._call(self._engine_run(topology))
        except BaseException:  # (a bad setting, say: no thread left behind)
            self.close()
            raise

    # -- the driver's own loop ------------------------------------------------------------

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the driver's loop and wait for it (from any thread but the
        loop's own)."""
        if self._closed:
            work.close()
            raise RuntimeError("the driver is closed")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def on_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` on the driver's loop, from any loop (the fakes' way in)."""
        if asyncio.get_running_loop() is self._loop:
            return await work
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop the driver's loop and thread (the fixtures do it after each test)."""
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    async def _engine_run(self, topology: Topology) -> _EngineRun:
        metrics = ConsumerMetrics(topology.consumer, CollectorRegistry())
        broker = self.broker

        async def new_producer(partition: int) -> ProcessProducer:
            return MemoryProducer(broker, topology.transactional_id(partition))

        committer = Committer(new_producer, Transactions(topology, metrics), linger_s=0.0,
                              max_records=self.settings.batch_max_records)
        return _EngineRun(topology, metrics, committer)

    # -- the clock ------------------------------------------------------------------------

    def now(self) -> float:
        """The driver's clock: what the processors are told the time is (Unix seconds)."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, punctuating every engine's tasks on the way as
        the engine does, every :func:`~symfonic_stream.engine.engine.punctuation_interval`
        (gap and idle timeouts, a ticket's expiry, a closed run's grace fire then), and
        what they write is processed by whichever engine reads it."""
        if seconds < 0:
            raise ValueError(f"the clock only moves on: advance({seconds})")
        self.advance_to(self._now + seconds)

    def advance_to(self, moment: float) -> None:
        """Move the clock on to ``moment`` (Unix seconds), as :meth:`advance` does."""
        if moment < self._now:
            raise ValueError(f"the clock only moves on: it is {self._now}, not {moment}")
        self._call(self._advance(moment))

    async def _advance(self, moment: float) -> None:
        step = punctuation_interval(self.settings)
        while self._now < moment:
            self._set_clock(min(self._now + step, moment))
            for run in self._engines.values():
                for task in list(run.tasks.values()):
                    task.punctuate(self._now)
                    await self._settle(task)
            await self._pump()

    def _set_clock(self, moment: float) -> None:
        self._now = moment
        self.broker.now_ms = int(moment * 1000)

    # -- input ----------------------------------------------------------------------------

    def pipe(self, event: AgentEvent | Mapping[str, Any] | bytes, *,
             headers: Iterable[tuple[str, bytes]] = ()) -> Record:
        """A kernel's raw event, checked and encoded as the publisher SDK sends it
        (:func:`~symfonic_stream.sdk.encode_event`: an invalid one raises
        :class:`~symfonic_stream.sdk.InvalidEventError`), keyed by its run id, onto the raw
        topic; then processed. The record written (its partition and offset)."""
        parsed, value = encode_event(event, max_bytes=self.settings.max_record_bytes)
        return self.pipe_record(parsed.run_id.encode(), value, headers=headers)

    def pipe_record(self, key: bytes | None, value: bytes | None, *,
                    headers: Iterable[tuple[str, bytes]] = (), topic: str | Topic | None = None,
                    partition: int | None = None) -> Record:
        """Any record, unchecked (what a broken or hostile producer may write), onto
        ``topic`` (default: the raw topic), at ``partition`` (default: where Kafka's default
        partitioner puts ``key``); then processed."""
        return self._call(self.write(key, value, headers=tuple(headers), topic=topic,
                                     partition=partition))

    async def write(self, key: bytes | None, value: bytes | None, *, headers: Headers = (),
                    topic: str | Topic | None = None, partition: int | None = None) -> Record:
        """:meth:`pipe_record` on the driver's loop (the fakes' producers write so)."""
        name = self.topic_name(topic) if topic is not None else self.names.agent_events
        if partition is None:
            placer = MemoryProducer(self.broker, "placer")
            await placer.learn_partitions([name])
            partition = placer.partition_for(name, key)
        [record] = self.broker.append([(name, partition, key, value, headers)])
        await self._pump()
        return record

    def topic_name(self, topic: str | Topic) -> str:
        """A topic's name under the driver's prefix (a declared :class:`Topic`, or a name)."""
        return topic if isinstance(topic, str) else topic.name(self.names)

    # -- the engines at work --------------------------------------------------------------

    async def _pump(self) -> None:
        """Every record written to a topic an engine reads, processed and committed, until
        no engine has anything left to read."""
        for _ in range(MAX_ROUNDS):
            moved = False
            for run in self._engines.values():
                source = run.topology.source_topic
                for partition in range(self.broker.partition_count(source)):
                    task = self._task(run, partition)
                    records = self.broker.read(source, partition, task.next_offset)
                    if records:
                        task.absorb(records, self.broker.end(source, partition))
                        await self._settle(task)
                        moved = True
            if not moved:
                return
        raise RuntimeError(f"the driver's engines did not settle in {MAX_ROUNDS} rounds")

    async def _settle(self, task: StreamTask) -> None:
        """Commit what ``task`` has pending; after a failure, back to its last commit, as
        the engine's ``rebuild_task`` does (what failed is read again)."""
        if not (task.has_pending or task.failed):
            return
        await task.flush()
        if task.failed:
            roll_back(task)

    def _task(self, run: _EngineRun, partition: int) -> StreamTask:
        """The task of ``partition``, set up on first use: its state restored from what its
        changelog holds, resumed where its position (or its group) says."""
        task = run.tasks.get(partition)
        if task is None:
            task = run.tasks[partition] = self._set_up(run, partition)
        return task

    def _set_up(self, run: _EngineRun, partition: int) -> StreamTask:
        topology = run.topology
        position = position_store() if has_position(self.settings, topology) else None
        state = task_state(topology.processor_factory(partition), position)
        if topology.changelog_topic is not None:  # set-up step 3, restore
            changelog, _ = topology.changelog_place(partition)
            records = self.broker.read(topology.changelog_topic, changelog)
            for record in records:
                assert record.key is not None, "a changelog record has a key"
                state.store_partition.apply(record.key, record.value)
            state.store_partition.applied(self.broker.end(topology.changelog_topic, changelog))
            state.processor.restored()
        group = self.broker.committed(topology.group_id, topology.source_topic, partition)
        saved = position.get(POSITION) if position is not None else None
        offset = resume_offset(saved, group)  # set-up step 4, position
        return StreamTask(topology, partition, run.committer, state, offset or 0,
                          metrics=run.metrics, max_record_bytes=self.settings.max_record_bytes,
                          group_offset=group)

    def crash(self, *consumers: str) -> None:
        """The named consumers' processes (none named: every one) die: their tasks,
        processors and stores are gone, whatever they had not committed with them. Each
        partition is set up again when next needed, its state restored from the changelog
        records the broker holds and resumed at its committed position, as a restarted
        consumer's would be."""
        self._call(self._crash(consumers))

    async def _crash(self, consumers: tuple[str, ...]) -> None:
        unknown = set(consumers) - {c.name for c in self.consumers}
        if unknown:
            raise KeyError(f"not run by this driver: {', '.join(sorted(unknown))}")
        for declared in self.consumers:
            if consumers and declared.name not in consumers:
                continue
            for engine in declared.engines:
                old = self._engines[engine.name]
                await old.committer.close()
                self._engines[engine.name] = await self._engine_run(old.topology)
        await self._pump()  # what was written and not processed yet

    # -- output ---------------------------------------------------------------------------

    def records(self, topic: str | Topic) -> list[Record]:
        """Every committed record of ``topic``, in the order written."""
        return self.broker.records(self.topic_name(topic))

    def read(self, topic: str | Topic) -> list[Record]:
        """The records of ``topic`` written since the last ``read`` of it."""
        name = self.topic_name(topic)
        found = self.broker.records(name)
        start, self._cursors[name] = self._cursors.get(name, 0), len(found)
        return found[start:]

    def topics(self) -> list[str]:
        """Every topic written to so far."""
        return self.broker.topics()

    def run(self, run_id: str, projection: str = "typed") -> list[RunRecord]:
        """Every record of run ``run_id`` on ``projection``'s topic so far, through every
        pause, as the run reader SDK reads and checks them (a hole or a repeat in ``seq``
        raises :class:`~symfonic_stream.sdk.SequenceError`)."""
        async def read() -> list[RunRecord]:
            found: list[RunRecord] = []
            reader = FakeRunReader(self, run_id, projection=projection, follow=True)
            try:
                async for record in reader:
                    found.append(record)
            except RunReadError as exc:
                if not FakeRunReader.ran_out(exc):
                    raise
            return found

        return self._call(read())

    # -- pauses ---------------------------------------------------------------------------

    def queue(self, queue: str = "default", tenant: str | None = None) -> str:
        """The topic of human-review queue ``queue`` (of ``tenant``, with per-tenant queues)."""
        return self.names.human_queue(queue, tenant)

    def tickets(self, queue: str = "default", tenant: str | None = None) -> list[Ticket]:
        """Every ticket routed to ``queue`` so far, in order (each with its record's
        ``trace_context``)."""
        return [_traced(Ticket.model_validate_json(r.value or b""), r)
                for r in self.records(self.queue(queue, tenant))]

    def answer(self, ticket: Ticket | str, answer: Any, *, token: str | None = None,
               responder: str | None = None, tenant: str | None = None) -> TicketOutcome:
        """A reviewer's answer to ``ticket`` (a ticket, or its id with ``token``), with the
        ticket's own token unless ``token`` says another, sent and decided: the resume
        validator's verdict, as the reviewer SDK reports it."""
        if not any(run.topology.source_topic == self.names.resume_requests
                   for run in self._engines.values()):
            raise ValueError("no consumer of this driver decides answers: run `resumes` too")

        async def send() -> TicketOutcome:
            reviewer = FakeReviewer(self)
            named: str | Unnamed | None = Unnamed.TENANT if tenant is None else tenant
            if isinstance(ticket, Ticket):
                ticket_id, said = ticket.ticket_id, token or ticket.token
                named = ticket.tenant if tenant is None else tenant
            elif token is None:
                raise ValueError("answering a ticket by its id needs its token")
            else:
                ticket_id, said = ticket, token
            trace = ticket.trace_context if isinstance(ticket, Ticket) else None
            request = await reviewer.submit(ticket_id, said, answer, responder, tenant=named,
                                            trace=trace)
            return await reviewer.outcome(ticket_id, request_id=request)

        return self._call(send())

    def resumes(self) -> list[Resume]:
        """Every accepted answer on ``<prefix>.resumes``, in order (what a kernel reads)."""
        return [_traced(Resume.model_validate_json(r.value or b""), r)
                for r in self.records(self.names.resumes)]

    # -- the fakes of the SDK -------------------------------------------------------------

    def run_reader(self, run_id: str, **options: Any) -> RunReader:
        """A :class:`~symfonic_stream.sdk.RunReader` of ``run_id`` on this driver's topics
        (:class:`~symfonic_stream.testing.FakeRunReader`; ``options`` are its own)."""
        return FakeRunReader(self, run_id, **options)

    def reviewer(self, group_id: str = "symfonic-test-review", *,
                 follow_outcomes: bool = True) -> Reviewer:
        """A :class:`~symfonic_stream.sdk.Reviewer` on this driver's queues
        (:class:`~symfonic_stream.testing.FakeReviewer`)."""
        return FakeReviewer(self, group_id, follow_outcomes=follow_outcomes)

    def resume_reader(self, owner: Owner, group_id: str = "symfonic-test-kernel"
                      ) -> ResumeReader:
        """A kernel's :class:`~symfonic_stream.sdk.ResumeReader` on this driver's resumes
        (:class:`~symfonic_stream.testing.FakeResumeReader`)."""
        return FakeResumeReader(self, owner, group_id)
