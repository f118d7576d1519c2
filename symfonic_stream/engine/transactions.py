"""One input partition's transactional producer, and what to do when aiokafka fails.

Fencing without KIP-447: aiokafka's ``send_offsets_to_transaction`` takes only a group
id, not the consumer's generation, so the broker cannot tell a zombie from the current
owner by its offsets commit (aio-libs/aiokafka#844: a rebalance in the middle of a
transaction lets the old owner commit offsets of a partition it no longer owns). Fencing
is therefore done by transactional id, as Kafka Streams did before KIP-447: one producer
per assigned input partition, ``transactional_id = <group>-<source topic>-<partition>``.
Whoever owns partition p next calls InitProducerId with the same id, which bumps the
epoch, aborts (or completes) the previous owner's open transaction and makes every later
request of the old producer fail with ProducerFenced / InvalidProducerEpoch.

aiokafka details this module works around (read in aiokafka 0.14's producer.py,
sender.py and transaction_manager.py):

* A produce request that fails is *not* reported to the transaction manager: the batch's
  future fails, but ``commit_transaction`` would still commit the rest of the transaction
  with the offsets (a silent loss). Every send future is awaited before committing and any
  failure aborts instead.
* ProducerFenced, InvalidProducerEpoch, InvalidTxnState, OutOfOrderSequenceNumber and any
  unexpected error raised in the background sender kill the sender task; the transaction
  manager moves to FATAL_ERROR (aio-libs/aiokafka#1004 shows such an "Unexpected error
  during batch delivery"). From there ``commit_transaction`` and ``abort_transaction``
  fail an internal ``assert`` on the state transition, and ``send`` raises
  IllegalOperation. So the state is checked first and a fatal producer is never used
  again: it is dropped with its partition, never aborted or committed twice.
* ``send_offsets_to_transaction``, ``commit_transaction`` and ``abort_transaction`` wait
  on futures with no timeout. aio-libs/aiokafka#905: when the group coordinator's broker
  goes away mid-transaction, TxnOffsetCommit is retried against the dead node until
  something times out, and an abort queues behind it. Each wait here is bounded by the
  transaction timeout; when it expires the outcome is unknown, so the producer is dropped
  and the partition rebuilt from what Kafka says committed (the next InitProducerId, on
  whichever broker now coordinates, waits for the old transaction to finish either way).
* aio-libs/aiokafka#1098: several ``send_offsets_to_transaction`` calls in one
  transaction can race in the sender and kill it with a KeyError. Here a transaction
  carries exactly one call with exactly one partition (the producer's own), and should
  the sender die anyway it is the fatal case above.
* Fatal producers park their error on futures nobody awaits (the transaction waiter, the
  batches' drain waiters); :func:`_retrieve_parked_errors` marks them seen on close.
* The broker writes a transaction's commit markers after answering its EndTxn, and
  answers CONCURRENT_TRANSACTIONS to the next transaction's AddPartitionsToTxn until they
  are written (KAFKA-5477), usually a few milliseconds. aiokafka then waits a fixed
  ``sender.BACKOFF_OVERRIDE`` of 20 ms, which a third of back-to-back transactions paid
  (``bench/results/txn-probe.txt``); :func:`_shorten_add_partitions_retry` makes it
  :data:`ADD_PARTITIONS_RETRY_S`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced
from aiokafka.producer import sender as aiokafka_sender

from symfonic_stream.config import Settings
from symfonic_stream.engine.dead_letters import dead_letter_headers
from symfonic_stream.engine.faults import fault_point
from symfonic_stream.engine.records import Collector
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.clients import transactional_producer_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key

log = logging.getLogger(__name__)

# aiokafka's TransactionState values, by name (the enum is internal).
_ABORTABLE_STATES = frozenset({"IN_TRANSACTION", "ABORTABLE_ERROR"})


class TransactionAborted(Exception):
    """The transaction was aborted cleanly; the producer can be used again."""


class ProducerUnusable(Exception):
    """The producer is fenced or in a fatal state; drop it with its partition."""

    def __init__(self, message: str, *, fenced: bool) -> None:
        super().__init__(message)
        self.fenced = fenced


#: Bound on the cached key → partition choices of one producer (one entry per active run).
_PARTITION_CACHE_MAX = 100_000


#: Retry delay of an AddPartitionsToTxn refused while the previous transaction's markers
#: are being written (aiokafka's own is 20 ms; the markers take a few ms).
ADD_PARTITIONS_RETRY_S = 0.002


def _shorten_add_partitions_retry() -> None:
    """Set aiokafka's retry delay for CONCURRENT_TRANSACTIONS on AddPartitionsToTxn."""
    if not isinstance(getattr(aiokafka_sender, "BACKOFF_OVERRIDE", None), float):
        log.warning("aiokafka has no sender.BACKOFF_OVERRIDE: keeping its retry delay")
        return
    aiokafka_sender.BACKOFF_OVERRIDE = ADD_PARTITIONS_RETRY_S


def transactional_id(topology: Topology, partition: int) -> str:
    """The id that fences every earlier owner of ``partition``'s producer."""
    return f"{topology.group_id}-{topology.source_topic}-{partition}"


def _consume_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _retrieve_parked_errors(producer: Any) -> None:
    """Mark as seen the errors a fatal aiokafka producer parks on futures nobody awaits.

    When the sender dies, aiokafka sets the error on the transaction waiter and on each
    queued batch's drain waiter; once we stop using the producer nothing awaits those, and
    asyncio would log every one of them as "Future exception was never retrieved".
    """
    futures = [getattr(producer._txn_manager, "_transaction_waiter", None)]
    accumulator = producer._message_accumulator
    batches = [b for queue in getattr(accumulator, "_batches", {}).values() for b in queue]
    batches.extend(getattr(accumulator, "_pending_batches", ()))
    futures.extend(getattr(batch, "_drain_waiter", None) for batch in batches)
    for future in futures:
        if future is not None and future.done() and not future.cancelled():
            future.exception()


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says a newer producer took over the id."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ProducerFenced | InvalidProducerEpoch):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Batches:
    """One transaction's open record batches, one per output (topic, partition)."""

    def __init__(self, producer: AIOKafkaProducer, futures: list[asyncio.Future[Any]]) -> None:
        self._producer = producer
        self._futures = futures
        self._open: dict[tuple[str, int], Any] = {}

    async def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
    ) -> None:
        if key is None and value is None:
            # aiokafka asserts on a record with neither key nor value (Kafka allows it).
            value = b""
        if type(headers) is not list:
            headers = list(headers)  # the C record builder takes a list, nothing else
        where = (topic, partition)
        batch = self._open.get(where)
        if batch is None:
            batch = self._open[where] = self._producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is not None:
            return
        # Full: hand it over and start the next one (a first record always fits).
        await self._send(batch, where)
        batch = self._open[where] = self._producer.create_batch()
        batch.append(timestamp=None, key=key, value=value, headers=headers)

    async def send_rest(self) -> None:
        for where, batch in self._open.items():
            await self._send(batch, where)
        self._open.clear()

    async def _send(self, batch: Any, where: tuple[str, int]) -> None:
        topic, partition = where
        future: asyncio.Future[Any] = await self._producer.send_batch(
            batch, topic, partition=partition
        )
        self._futures.append(future)


class PartitionProducer:
    """The transactional producer of one input partition.

    Everything one batch (or one punctuation) of the partition produces — outputs, dead
    letters, changelog writes — and, for a batch, the partition's next offset commit in one
    transaction: all visible to read_committed readers, or none.
    """

    def __init__(self, settings: Settings, topology: Topology, partition: int) -> None:
        self.partition = partition
        self.transactional_id = transactional_id(topology, partition)
        self._topology = topology
        self._timeout = settings.transaction_timeout_ms / 1000
        _shorten_add_partitions_retry()
        self._producer = AIOKafkaProducer(
            **transactional_producer_kwargs(settings, self.transactional_id)
        )
        self._closed = False
        # Output partitions by (topic, key): run ids repeat for every event of a run, and
        # aiokafka's pure-Python murmur2 for every record was a tenth of a projector's CPU.
        self._partitions: dict[tuple[str, bytes], int] = {}
        self._partition_counts: dict[str, int] = {}

    async def start(self) -> None:
        """Connect and run InitProducerId (the ``init_transactions`` step).

        This fences any zombie holding the same transactional id and resolves its open
        transaction before we read the partition's state or committed offset.
        """
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
        manager: Any = self._producer._txn_manager
        sender_task = self._producer._sender.sender_task
        if sender_task is not None and sender_task.done():
            return False
        return not manager.is_fatal_error()

    def _state(self) -> str:
        return str(self._producer._txn_manager.state.name)

    async def commit(
        self,
        out: Collector,
        offsets: Mapping[TopicPartition, int] | None,
    ) -> None:
        """Produce ``out`` and commit ``offsets`` in one transaction.

        Raises :class:`TransactionAborted` when the transaction was rolled back and the
        producer may be reused, :class:`ProducerUnusable` when it must be dropped.
        """
        if not self.usable:
            raise ProducerUnusable(f"producer {self.transactional_id} is not usable", fenced=False)
        futures: list[asyncio.Future[Any]] = []
        try:
            await self._producer.begin_transaction()
            await self._send_all(out, futures)
            if offsets:
                await asyncio.wait_for(
                    self._producer.send_offsets_to_transaction(
                        dict(offsets), self._topology.group_id
                    ),
                    self._timeout,
                )
            if futures:
                # A failed produce must abort: aiokafka would commit the rest without it.
                await asyncio.wait_for(asyncio.gather(*futures), self._timeout)
            fault_point("in_transaction")
            await asyncio.wait_for(self._producer.commit_transaction(), self._timeout)
            fault_point("commit_logged")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            for future in futures:
                # The failed sends' errors are the same story as ``exc``: mark them seen.
                future.add_done_callback(_consume_exception)
            await self._abort_after(exc)
            raise TransactionAborted(f"transaction of {self.transactional_id} aborted") from exc

    async def _send_all(self, out: Collector, futures: list[asyncio.Future[Any]]) -> None:
        """Queue every record of ``out`` in batches, appending each batch's future.

        Records are appended to one batch per output partition and the batches are handed
        to aiokafka whole (``send_batch``, which adds the partition to the transaction):
        ``send`` per record cost a coroutine, a metadata check and a delivery future per
        record, a third of a projector's produce-side CPU. Per partition, records keep the
        order of ``out``, as with ``send``.
        """
        topology = self._topology
        batches = _Batches(self._producer, futures)
        for record in out.outputs:
            partition = await self._partition_for(record.topic, record.key)
            await batches.append(
                record.topic, partition, record.key, record.value, record.headers
            )
        for letter in out.dead_letters:
            topic = topology.dead_letter_topic
            partition = await self._partition_for(topic, letter.record.key)
            headers = dead_letter_headers(letter, topology.consumer)
            await batches.append(topic, partition, letter.record.key, letter.record.value, headers)
        if out.state:
            if topology.changelog_topic is None:
                raise RuntimeError(f"{topology.consumer} is stateless but wrote state")
            for key, value in out.state.items():
                # Co-partitioned: the state of input partition p lives in changelog p.
                await batches.append(topology.changelog_topic, self.partition, key, value, ())
        await batches.send_rest()

    async def _partition_for(self, topic: str, key: bytes | None) -> int:
        """The default partitioner's choice for ``key``.

        A record without a key (a raw record that arrived without one, copied or
        dead-lettered) goes to the partition with the input partition's number, modulo
        the topic's partitions: Kafka promises no order between keyless records, and a
        fixed choice keeps one transaction's keyless records in one batch.
        """
        if key is not None:
            cached = self._partitions.get((topic, key))
            if cached is not None:
                return cached
        count = self._partition_counts.get(topic)
        if count is None:
            count = self._partition_counts[topic] = len(await self._producer.partitions_for(topic))
        if key is None:
            return self.partition % count
        if len(self._partitions) >= _PARTITION_CACHE_MAX:
            self._partitions.clear()
        partition = self._partitions[(topic, key)] = partition_for_key(key, count)
        return partition

    async def _abort_after(self, exc: Exception) -> None:
        """Roll back after ``exc``, or raise :class:`ProducerUnusable` when we cannot."""
        fenced = is_fenced(exc)
        if fenced or not self.usable or self._state() not in _ABORTABLE_STATES:
            # Fenced, fatal, or mid-commit after a timeout (outcome unknown): the
            # transaction manager cannot abort from here, and must not try.
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
        log.warning(
            "transaction aborted",
            extra={"transactional_id": self.transactional_id, "error": repr(exc)},
        )

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
            log.warning(
                "producer did not stop cleanly",
                extra={"transactional_id": self.transactional_id, "error": repr(exc)},
            )
