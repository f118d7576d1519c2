"""A process's transactional producer: the aiokafka calls the commit protocol is made of.

:mod:`symfonic_stream.engine.commit` says what happens in a transaction and in which order;
this module does each step against aiokafka and bounds every wait. One producer writes every
transaction of a process, for all its partitions (``exactly_once_v2``, KIP-447): a zombie is
fenced by its group generation, which the offsets of every transaction carry
(:mod:`symfonic_stream.kafka.group_fencing`), and a dead process's open transaction by the
epoch of its transactional id (:mod:`symfonic_stream.kafka.id_fencing`). The aiokafka
behaviours worked around here, each explained in docs/engine.md ("aiokafka, read closely"):

* a failed send is not reported to the transaction: every future is awaited before EndTxn;
* a dead sender leaves the producer FATAL and later calls fail an assert: checked first,
  such a producer is dropped, never aborted or committed (aio-libs/aiokafka#1004);
* offsets, commit and abort wait without a timeout (aio-libs/aiokafka#905): bounded here;
* one offsets call per transaction, one partition (aio-libs/aiokafka#1098);
* a fatal producer parks errors on futures nobody awaits: seen on close;
* AddPartitionsToTxn right after a commit waits 20 ms for the previous markers
  (KAFKA-5477): :data:`ADD_PARTITIONS_RETRY_S` instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from types import UnionType
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced
from aiokafka.producer import sender as aiokafka_sender

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import transactional_producer_kwargs
from symfonic_stream.kafka.group_fencing import GenerationFenced, GroupMetadata, send_offsets_fenced
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.kafka.record_batches import NATIVE_BATCHES, Sends, TransactionBatches

log = logging.getLogger(__name__)

# aiokafka's TransactionState values, by name (the enum is internal).
_ABORTABLE_STATES = frozenset({"IN_TRANSACTION", "ABORTABLE_ERROR"})
#: Bound on the cached key → partition choices of one producer (one entry per active run).
_PARTITION_CACHE_MAX = 100_000
#: Retry delay of an AddPartitionsToTxn refused while the previous transaction's markers
#: are being written (aiokafka's own is 20 ms; the markers take a few ms).
ADD_PARTITIONS_RETRY_S = 0.002


class TransactionAborted(Exception):
    """The transaction was aborted cleanly; the producer can be used again."""


class ProducerUnusable(Exception):
    """The producer is fenced or in a fatal state, or a commit's outcome is unknown."""

    def __init__(self, message: str, *, fenced: bool) -> None:
        super().__init__(message)
        self.fenced = fenced


def _shorten_add_partitions_retry() -> None:
    if not isinstance(getattr(aiokafka_sender, "BACKOFF_OVERRIDE", None), float):
        log.warning("aiokafka has no sender.BACKOFF_OVERRIDE: keeping its retry delay")
        return
    aiokafka_sender.BACKOFF_OVERRIDE = ADD_PARTITIONS_RETRY_S


def _caused_by(exc: BaseException, kinds: type[BaseException] | UnionType) -> bool:
    """Whether ``exc``, or what caused it, is one of ``kinds``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kinds):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says a newer producer took over the id."""
    return _caused_by(exc, ProducerFenced | InvalidProducerEpoch)


def _consume_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _retrieve_parked_errors(producer: Any) -> None:
    """Mark as seen the errors a fatal aiokafka producer parks on futures nobody awaits
    (else asyncio logs each as "Future exception was never retrieved")."""
    futures = [getattr(producer._txn_manager, "_transaction_waiter", None)]
    accumulator = producer._message_accumulator
    batches = [b for queue in getattr(accumulator, "_batches", {}).values() for b in queue]
    batches.extend(getattr(accumulator, "_pending_batches", ()))
    futures.extend(getattr(batch, "_drain_waiter", None) for batch in batches)
    for future in futures:
        if future is not None and future.done() and not future.cancelled():
            future.exception()


class ProcessProducer:
    """The transactional producer of one process (every input partition it owns)."""

    def __init__(self, settings: Settings, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._timeout = settings.transaction_timeout_ms / 1000
        _shorten_add_partitions_retry()
        self._producer = AIOKafkaProducer(
            **transactional_producer_kwargs(settings, transactional_id)
        )
        self._closed = False
        # Output partitions by (topic, key): a run's id repeats for every event of a run,
        # and murmur2 per record was a tenth of a projector's CPU.
        self._partitions: dict[tuple[str, bytes], int] = {}
        self._partition_counts: dict[str, int] = {}
        #: Batches built natively (kafka/record_batches.py): aiokafka's builder compresses.
        self.native_batches = NATIVE_BATCHES and settings.compression == "none"

    async def start(self) -> None:
        """Connect and run InitProducerId: every earlier producer of this id is fenced and
        its open transaction finished before this returns."""
        try:
            await asyncio.wait_for(self._producer.start(), self._timeout)
        except BaseException:
            await self.close()
            raise

    @property
    def usable(self) -> bool:
        """Not closed, the sender alive, and not in aiokafka's FATAL_ERROR state."""
        if self._closed:
            return False
        sender_task = self._producer._sender.sender_task
        if sender_task is not None and sender_task.done():
            return False
        return not self._producer._txn_manager.is_fatal_error()

    def _state(self) -> str:
        return str(self._producer._txn_manager.state.name)

    # -- the steps of a transaction (symfonic_stream/engine/commit.py) -------------------

    async def begin(self) -> TransactionBatches:
        if not self.usable:
            raise ProducerUnusable(f"producer {self.transactional_id} is not usable", fenced=False)
        await self._producer.begin_transaction()
        return TransactionBatches(self._producer, native=self.native_batches)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group_id: str,
                           member: GroupMetadata | None = None) -> None:
        """The offsets into the transaction; with ``member``, fenced by its generation."""
        sending = (self._producer.send_offsets_to_transaction(dict(offsets), group_id)
                   if member is None else send_offsets_fenced(self._producer, offsets, member))
        await asyncio.wait_for(sending, self._timeout)

    async def await_sends(self, sends: Sends) -> None:
        if sends:
            await asyncio.wait_for(asyncio.gather(*sends), self._timeout)

    async def commit(self) -> None:
        await asyncio.wait_for(self._producer.commit_transaction(), self._timeout)

    async def abort_after(self, exc: Exception, sends: Sends) -> TransactionAborted:
        """Roll back after ``exc``: the error to raise, or :class:`ProducerUnusable` raised
        when the producer cannot abort (fenced, fatal, or a commit of unknown outcome)."""
        for future in sends:
            future.add_done_callback(_consume_exception)  # the same story as ``exc``
        fenced = is_fenced(exc)
        if fenced or not self.usable or self._state() not in _ABORTABLE_STATES:
            raise ProducerUnusable(
                f"producer {self.transactional_id} cannot continue after {exc!r}", fenced=fenced
            ) from exc
        try:
            await asyncio.wait_for(self._producer.abort_transaction(), self._timeout)
        except asyncio.CancelledError:
            raise
        except Exception as abort_exc:
            raise ProducerUnusable(
                f"abort of {self.transactional_id} failed: {abort_exc!r}",
                fenced=is_fenced(abort_exc),
            ) from exc
        log.warning("transaction aborted",
                    extra={"transactional_id": self.transactional_id, "error": repr(exc)})
        if _caused_by(exc, GenerationFenced):  # aborted; the partitions are another's now
            raise ProducerUnusable(f"the group's generation is over: {exc}", fenced=True) from exc
        return TransactionAborted(f"transaction of {self.transactional_id} aborted")

    async def learn_partitions(self, topics: Iterable[str]) -> None:
        """Know each topic's partition count (asked once per topic) for
        :meth:`partition_for`."""
        for topic in topics:
            if topic not in self._partition_counts:
                self._partition_counts[topic] = len(await self._producer.partitions_for(topic))

    @property
    def partition_counts(self) -> dict[str, int]:
        """Each output topic's partition count, as learnt (:meth:`learn_partitions`)."""
        return self._partition_counts

    def partition_for(self, topic: str, key: bytes | None, keyless: int = 0) -> int:
        """The default partitioner's choice for ``key`` (``topic`` learnt first); a keyless
        record (copied or dead-lettered as it arrived) goes to ``keyless`` (its input
        partition's number), modulo: Kafka promises no order between keyless records, and
        one transaction's stay in one batch.
        """
        if key is not None:
            cached = self._partitions.get((topic, key))
            if cached is not None:
                return cached
        count = self._partition_counts[topic]
        if key is None:
            return keyless % count
        if len(self._partitions) >= _PARTITION_CACHE_MAX:
            self._partitions.clear()
        partition = self._partitions[(topic, key)] = partition_for_key(key, count)
        return partition

    async def close(self) -> None:
        """Stop the producer. An open transaction is left to the next owner's fencing."""
        if self._closed:
            return
        self._closed = True
        _retrieve_parked_errors(self._producer)
        try:
            await asyncio.wait_for(self._producer.stop(), self._timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # closing is best effort: the producer is dropped anyway
            log.warning("producer did not stop cleanly",
                        extra={"transactional_id": self.transactional_id, "error": repr(exc)})
