"""The SDK's readers and reviewer over a :class:`~symfonic_stream.testing.TopologyTestDriver`
instead of Kafka: for UI authors (a run's records), review-tool authors (a queue's tickets,
answers and their verdicts) and kernel authors (the accepted answers).

Each is the SDK's own class with its Kafka clients swapped for the driver's
(:mod:`.broker`): the reader's checks (a dense ``seq``, the end record that ends a read),
the reviewer's requests and its matching of verdicts, the resume reader's check of a
resume's tenant are the SDK's code. Two differences, both because a test has no one
waiting: a fake reader does not wait for records the driver has not written (it ends with
:class:`~symfonic_stream.sdk.ReaderTimeout` where a live one would wait), and a fake's
``async for`` over tickets or resumes ends at the end of what is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any, Protocol, TypeVar, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.sdk.reader import ReaderTimeout, RunReader
from symfonic_stream.sdk.resumes import Owner, ResumeReader
from symfonic_stream.sdk.reviewer import Reviewer
from symfonic_stream.testing.broker import Headers, MemoryBroker, MemoryConsumer, Record

__all__ = ["FakeResumeReader", "FakeReviewer", "FakeRunReader"]

T = TypeVar("T")


class Driver(Protocol):
    """What the fakes use of a :class:`~symfonic_stream.testing.TopologyTestDriver`."""

    settings: Settings
    broker: MemoryBroker

    def queue(self, queue: str = "default", tenant: str | None = None) -> str: ...

    async def on_loop(self, work: Coroutine[Any, Any, T]) -> T: ...

    async def write(self, key: bytes | None, value: bytes | None, *, headers: Headers = (),
                    topic: str | None = None, partition: int | None = None) -> Record: ...


class FakeRunReader(RunReader):
    """:class:`~symfonic_stream.sdk.RunReader` of one run on ``driver``'s topics (``since``
    aside, its options are the reader's). ``idle_timeout_s`` defaults to 0: when the driver
    holds no more of a run that has not ended, it raises
    :class:`~symfonic_stream.sdk.ReaderTimeout` at once (:meth:`ran_out` tells)."""

    def __init__(self, driver: Driver, run_id: str, *, projection: str = "typed",
                 topic: str | None = None, from_seq: int = 0, follow: bool = False,
                 idle_timeout_s: float = 0.0) -> None:
        super().__init__(run_id, driver.settings, projection=projection, topic=topic,
                         from_seq=from_seq, follow=follow, idle_timeout_s=idle_timeout_s)
        self._driver = driver

    async def open(self) -> None:
        broker = self._driver.broker
        consumer = MemoryConsumer(broker)
        self.partition = partition_for_key(self._key, broker.partition_count(self.topic))
        consumer.assign([TopicPartition(self.topic, self.partition)])
        self._consumer = cast(AIOKafkaConsumer, consumer)

    @staticmethod
    def ran_out(exc: BaseException) -> bool:
        """Whether ``exc`` says the driver holds no more of the run (not a bad record)."""
        return isinstance(exc, ReaderTimeout)


class _DriverProducer:
    """What the reviewer asks of its producer, written through the driver."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self._driver.broker.partition_count(topic)))

    async def send_and_wait(self, topic: str, value: bytes | None = None,
                            key: bytes | None = None,
                            headers: Sequence[tuple[str, bytes]] | None = None) -> Record:
        driver = self._driver
        return await driver.on_loop(driver.write(key, value, headers=tuple(headers or ()),
                                                 topic=topic))

    async def stop(self) -> None:
        """Nothing to close."""


class FakeReviewer(Reviewer):
    """:class:`~symfonic_stream.sdk.Reviewer` on ``driver``'s queues, ready when made
    (``async with`` works too, and changes nothing): ``tickets`` yields a queue's tickets
    from the group's committed position to the end of what is written (then the ``async
    for`` ends); ``submit`` writes the request and the driver's resume validator decides
    it at once, so ``answer`` and ``outcome`` return its verdict."""

    def __init__(self, driver: Driver, group_id: str = "symfonic-test-review", *,
                 follow_outcomes: bool = True) -> None:
        super().__init__(group_id, driver.settings, follow_outcomes=follow_outcomes)
        self._driver = driver
        self._producer = cast(AIOKafkaProducer, _DriverProducer(driver))
        if follow_outcomes:  # the verdicts given from now on, as the SDK's follows them
            verdicts = MemoryConsumer(driver.broker, self._names.resumes,
                                      self._names.resume_rejections)
            verdicts.seek_to_end_now()
            self._verdicts = cast(AIOKafkaConsumer, verdicts)

    async def __aenter__(self) -> FakeReviewer:
        return self

    async def close(self) -> None:
        """Nothing to stop (the fake's clients are the driver's)."""

    async def tickets(self, queue: str, tenant: str | None = None) -> AsyncIterator[Ticket]:
        consumer = MemoryConsumer(self._driver.broker, self._driver.queue(queue, tenant),
                                  group_id=self._group_id)
        self._queue_consumer = cast(AIOKafkaConsumer, consumer)
        async for message in consumer:
            ticket = Ticket.model_validate_json(message.value or b"")
            ticket.traced(message.headers)
            yield ticket


class FakeResumeReader(ResumeReader):
    """:class:`~symfonic_stream.sdk.ResumeReader` on ``driver``'s ``<prefix>.resumes``, from
    the group's committed position to the end of what is written."""

    def __init__(self, driver: Driver, owner: Owner,
                 group_id: str = "symfonic-test-kernel") -> None:
        super().__init__(group_id, owner, driver.settings)
        self._driver = driver

    async def __aenter__(self) -> FakeResumeReader:
        self._consumer = cast(AIOKafkaConsumer, MemoryConsumer(
            self._driver.broker, self._topic, group_id=self._group_id))
        return self
