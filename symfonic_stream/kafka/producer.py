"""The process's transactional producer: the aiokafka calls the commit protocol is made of,
the record batches a transaction writes, and the offsets it commits, fenced by the group's
generation.

:mod:`symfonic_stream.engine.transaction` says what happens in a transaction and in which
order; this module does each step against aiokafka and bounds every wait. One producer
writes every transaction of a process, for all its partitions (``exactly_once_v2``,
KIP-447): a zombie is fenced by its group generation, which the offsets of every
transaction carry (TxnOffsetCommit v3, below), and a dead process's open transaction by the
epoch of its transactional id (:mod:`symfonic_stream.kafka.id_fencing`). The aiokafka
behaviours worked around here, each explained in docs/engine.md ("aiokafka, read closely"):

* a failed send is not reported to the transaction: every future is awaited before EndTxn;
* a dead sender leaves the producer FATAL and later calls fail an assert: checked first,
  such a producer is dropped, never aborted or committed (aio-libs/aiokafka#1004);
* offsets, commit and abort wait without a timeout (aio-libs/aiokafka#905): bounded here;
* one offsets call per transaction, one partition (aio-libs/aiokafka#1098);
* a fatal producer parks errors on futures nobody awaits: seen on close;
* AddPartitionsToTxn right after a commit waits 20 ms for the previous markers
  (KAFKA-5477): :data:`ADD_PARTITIONS_RETRY_S` instead;
* aiokafka 0.14 sends TxnOffsetCommit v0, which carries no generation: the coordinator
  would take a zombie's offsets. :func:`send_offsets_fenced` sends **v3**, with the member's
  generation and id, so the coordinator refuses the offsets of a member whose partitions
  were reassigned (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``, ``FENCED_INSTANCE_ID``)
  and its transaction can only abort (checked against every broker of the test matrix by
  ``tests/integration/test_group_fencing.py``).

**Record batches.** Whole batches are handed to aiokafka (``send_batch``): ``send`` per record
cost a coroutine, a metadata check and a future per record, a third of a projector's
produce-side CPU. There are two ways to build them, writing the same bytes
(``tests/unit/test_producer_batches.py``):

* **native** (``symfonic_stream._native.RecordBatches``, Rust, ``native/src/batch.rs``): a
  transaction's outputs in one call, its changelog records in another; each record placed
  by Kafka's default partitioner and encoded there, no Python per record. Used when
  the native extension is installed and the producer does not compress;
* **aiokafka's builder**: a record at a time, straight into the batch's C record builder, as
  aiokafka's own ``BatchBuilder.append`` does less its keyword parsing and its serializers
  (this producer has none): that wrapper was a third of the cost of appending a record,
  some 2,200 instructions (docs/benchmarks.md). :data:`DIRECT_APPEND` checks at import
  that aiokafka still keeps what this reaches into, else the public ``append`` is used.

Either way a batch that fills up waits, and :meth:`TransactionBatches.send_all` hands every
batch over in send order, so per partition records keep the order they were appended in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace, UnionType
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidProducerEpoch,
    ProducerFenced,
    for_code,
)
from aiokafka.producer import sender as aiokafka_sender
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.producer.sender import TxnOffsetCommitHandler

from symfonic_stream import faults
from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import PRODUCER_MAX_BATCH_BYTES, transactional_producer_kwargs
from symfonic_stream.kafka.group import (
    GENERATION_ERRORS,
    GenerationFenced,
    GroupMetadata,
    TxnOffsetCommitRequest_v3,
    TxnOffsetCommitV3,
    by_topic,
)
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.native import extension as _extension

if TYPE_CHECKING:
    from symfonic_stream._native import RecordBatches

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

    #: Output topic → its ``__value_schema_id`` header value (SYMFONIC_SCHEMA_ID_FRAMING=
    #: header; kafka/schema_registry.py); empty: no header.
    value_schema_ids: Mapping[str, bytes] = MappingProxyType({})

    def __init__(self, settings: Settings, transactional_id: str,
                 value_schema_ids: Mapping[str, bytes] | None = None) -> None:
        self.transactional_id = transactional_id
        if value_schema_ids:
            self.value_schema_ids = value_schema_ids
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
        #: Batches built natively (kafka/producer.py): aiokafka's builder compresses.
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

    # -- one transaction: steps 3-7 of the commit protocol (engine/transaction.py) -------

    async def transact(
        self,
        writes: Sequence[PartitionWrites],
        offsets: Mapping[TopicPartition, int] | None,
        group_id: str,
        member: GroupMetadata | None = None,
        steps: Steps | None = None,
    ) -> dict[int, int]:
        """Steps 3-7: ``writes`` and ``offsets`` (committed to ``group_id``; with ``member``,
        fenced by its generation) in one Kafka transaction; for each changelog partition
        written to, the offset the records written there reach (:meth:`TransactionBatches.
        offset_after`). ``steps`` receives each step's wall-clock seconds.

        Raises :class:`TransactionAborted` when it was rolled back (the producer may go
        on), :class:`ProducerUnusable` when the producer must be dropped or the generation
        is over (:meth:`abort_after`).
        """
        sends: Sends = []
        lap = _Lap(steps)
        try:
            # 3. begin
            if not self.usable:
                raise ProducerUnusable(f"producer {self.transactional_id} is not usable",
                                       fenced=False)
            await self._producer.begin_transaction()
            batches = TransactionBatches(self._producer, native=self.native_batches)
            sends = batches.sends
            lap("begin")
            # 4. produce
            await self.learn_partitions({r.topic for each in writes for r in each.outputs})
            await self.learn_partitions({each.dead_letter_topic for each in writes
                                         if each.dead_letters and each.dead_letter_topic})
            if self.value_schema_ids:
                writes = with_value_schema_ids(writes, self.value_schema_ids)
            for each in writes:
                batches.append_writes(each, self.partition_for, self._partition_counts)
            await batches.send_all()
            lap("produce")
            # 5. await the sends
            if sends:
                await asyncio.wait_for(asyncio.gather(*sends), self._timeout)
            lap("await_sends")
            written = batches.changelog_offsets(writes)
            # 6. send offsets
            if offsets:
                await self.send_offsets(offsets, group_id, member)
                lap("send_offsets")
            if faults.ARMED:
                faults.fault_point("in_transaction")
            # 7. commit
            await asyncio.wait_for(self._producer.commit_transaction(), self._timeout)
            lap("commit")
            if faults.ARMED:
                faults.fault_point("commit_logged")
            return written
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise await self.abort_after(exc, sends) from exc  # or raises ProducerUnusable

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group_id: str,
                           member: GroupMetadata | None = None) -> None:
        """The offsets into the transaction; with ``member``, fenced by its generation."""
        sending = (self._producer.send_offsets_to_transaction(dict(offsets), group_id)
                   if member is None else send_offsets_fenced(self._producer, offsets, member))
        await asyncio.wait_for(sending, self._timeout)

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


# -- one transaction's record batches --------------------------------------------------------

@dataclass(slots=True)
class PartitionWrites:
    """What one input partition's part of a transaction writes (step 4, produce), in this order:
    its outputs (each where Kafka's default partitioner puts its key, a keyless one on
    ``keyless`` modulo the topic's partitions), its dead letters (on their topic, placed
    the same way), and its state changes on its changelog partition, each key under its
    prefix."""

    keyless: int
    #: The engine's OutputRecords (``topic``, ``key``, ``value``, ``headers``).
    outputs: list[Any]
    #: (key, value, headers) of each dead letter.
    dead_letters: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]
    dead_letter_topic: str | None
    #: Changelog key (without the prefix) → encoded value (None: a tombstone).
    changelog: dict[bytes, bytes | None]
    #: (changelog topic, partition, key prefix); None when nothing changed.
    changelog_place: tuple[str, int, bytes] | None


#: The header that names a record value's schema in the registry (kafka/schema_registry.py).
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"


def with_value_schema_ids(writes: Sequence[PartitionWrites], ids: Mapping[str, bytes]
                          ) -> list[PartitionWrites]:
    """``writes`` with the ``__value_schema_id`` header on every output to a topic of ``ids``
    (a tombstone has no value, so no schema: it gets none). The value stays as it was."""
    changed = []
    for each in writes:
        outputs = [
            record._replace(headers=(*record.headers, (VALUE_SCHEMA_ID_HEADER, schema_id)))
            if record.value is not None and (schema_id := ids.get(record.topic)) is not None
            else record
            for record in each.outputs
        ]
        changed.append(dataclasses.replace(each, outputs=outputs))
    return changed


#: Each commit step's wall-clock seconds, for ``symfonic_stream_commit_step_seconds_total``.
Steps = list[tuple[str, float]]


class _Lap:
    """Appends ``(step, seconds since the previous lap)`` to ``steps`` (if given)."""

    __slots__ = ("_mark", "_steps")

    def __init__(self, steps: Steps | None) -> None:
        self._steps = steps
        self._mark = time.monotonic()

    def __call__(self, step: str) -> None:
        if self._steps is not None:
            now = time.monotonic()
            self._steps.append((step, now - self._mark))
            self._mark = now



if TYPE_CHECKING:
    from symfonic_stream._native import RecordBatches


Sends = list["asyncio.Future[Any]"]
Where = tuple[str, int]
#: The headers of every record without any (the record builder only reads them).
_NO_HEADERS: list[tuple[str, bytes]] = []

# Without the extension (an install built where no cargo was): aiokafka's builder.
_RecordBatches: type[RecordBatches] | None = (
    _extension.RecordBatches if _extension is not None else None)


#: Whether a producer that does not compress builds its batches natively.
NATIVE_BATCHES = _RecordBatches is not None


def _builder_is_as_read() -> bool:
    """Whether aiokafka's BatchBuilder still keeps what :meth:`TransactionBatches.append` reaches
    into: its C record builder (``_builder``) and the count of records in it
    (``_relative_offset``, which the sender reads for the batch's sequence numbers)."""
    probe = BatchBuilder(1024, 0, is_transactional=True)
    builder = getattr(probe, "_builder", None)
    return (isinstance(getattr(probe, "_relative_offset", None), int)
            and callable(getattr(builder, "append", None)))


#: Records go straight to aiokafka's C record builder (when not native).
DIRECT_APPEND = _builder_is_as_read()
if not DIRECT_APPEND:
    log.warning("aiokafka's BatchBuilder changed: appending through its public append()")


class TransactionBatches:
    """One transaction's batches (see the module's docstring for the two ways)."""

    def __init__(self, producer: AIOKafkaProducer, *, native: bool = False) -> None:
        self._producer = producer
        self.sends: Sends = []
        #: Where each of ``sends`` went, in the same order.
        self.sent_to: list[Where] = []
        # One timestamp for a transaction's records (CreateTime: when it was produced).
        self._native = (_RecordBatches(PRODUCER_MAX_BATCH_BYTES, int(time.time() * 1000))
                        if native and _RecordBatches is not None else None)
        self._taken: list[tuple[Where, Any]] = []
        self._open: dict[Where, Any] = {}
        self._full: list[tuple[Where, Any]] = []

    @property
    def native(self) -> bool:
        return self._native is not None

    def append_outputs(
        self,
        records: list[Any],  # the engine's OutputRecords
        partition_for: Callable[[str, bytes | None], int],
        counts: dict[str, int],
        keyless: int,
    ) -> None:
        """Every output on its partition: a keyed one where Kafka's default partitioner
        puts its key (``partition_for``; ``counts``: each topic's partition count), a
        keyless one on ``keyless`` modulo the count."""
        if self._native is not None:
            self._native.add_outputs(records, counts, keyless)
            return
        append = self.append
        for record in records:
            append(record.topic, partition_for(record.topic, record.key), record.key,
                   record.value, record.headers)

    def append_writes(self, writes: PartitionWrites,
                      partition_for: Callable[[str, bytes | None, int], int],
                      counts: dict[str, int]) -> None:
        """One input partition's records (:class:`PartitionWrites`), in their order;
        ``partition_for(topic, key, keyless)`` places a dead letter (every topic's partition
        count learnt first)."""
        keyless = writes.keyless
        self.append_outputs(writes.outputs, lambda topic, key: partition_for(
            topic, key, keyless), counts, keyless)
        topic = writes.dead_letter_topic
        if topic is not None:
            for key, value, headers in writes.dead_letters:
                self.append(topic, partition_for(topic, key, keyless), key, value, headers)
        if writes.changelog and writes.changelog_place is not None:
            self.append_state(*writes.changelog_place, writes.changelog)

    def changelog_offsets(self, writes: Sequence[PartitionWrites]) -> dict[int, int]:
        """Once the sends are acknowledged: for each changelog partition written to, the
        offset its records reach (:meth:`offset_after`)."""
        records: dict[tuple[str, int], int] = {}
        for each in writes:
            if each.changelog and each.changelog_place is not None:
                where = each.changelog_place[:2]
                records[where] = records.get(where, 0) + len(each.changelog)
        written: dict[int, int] = {}
        for (topic, partition), count in records.items():
            after = self.offset_after(topic, partition, count)
            if after is not None:
                written[partition] = after
        return written

    def append_state(self, topic: str, partition: int, prefix: bytes,
                     changes: dict[bytes, bytes | None]) -> None:
        """A state store's changes (None: a tombstone) on one changelog partition."""
        if self._native is not None:
            self._native.add_state(topic, partition, prefix, changes)
            return
        for key, value in changes.items():
            self.append(topic, partition, prefix + key, value, ())

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
    ) -> None:
        if self._native is not None:
            self._native.add(topic, partition, key, value, headers)
            return
        if key is None and value is None:
            value = b""  # aiokafka asserts on a record with neither (Kafka allows it)
        if type(headers) is not list:  # the C record builder takes a list, nothing else
            headers = list(headers) if headers else _NO_HEADERS
        where = (topic, partition)
        batch = self._open.get(where)
        if batch is None:
            batch = self._open[where] = self._producer.create_batch()
        if DIRECT_APPEND:  # (inline: a function call per record costs what it saves)
            offset = batch._relative_offset
            if batch._builder.append(offset, None, key, value, headers) is not None:
                batch._relative_offset = offset + 1
                return
            batch.close()  # full, as aiokafka's append leaves it
        elif batch.append(timestamp=None, key=key, value=value, headers=headers) is not None:
            return
        # Full: it waits its turn, and the next one starts (a first record always fits).
        self._full.append((where, batch))
        batch = self._open[where] = self._producer.create_batch()
        batch.append(timestamp=None, key=key, value=value, headers=headers)

    def in_send_order(self) -> list[tuple[Where, Any]]:
        """Every batch with its (topic, partition): the full ones first, in the order they
        filled, then the open ones, in the order they were started."""
        if self._native is not None:
            self._taken.extend(((topic, partition), batch)
                               for topic, partition, batch in self._native.take())
            return list(self._taken)
        return [*self._full, *self._open.items()]

    def offset_after(self, topic: str, partition: int, records: int) -> int | None:
        """Once the sends are acknowledged: the offset after the ``records`` sent to (topic,
        partition) when they went in one batch; else the first offset of the last batch
        (everything before it was sent by us). None: nothing went there."""
        sent = zip(self.sends, self.sent_to, strict=True)
        firsts: list[int] = [future.result().offset for future, where in sent
                             if where == (topic, partition) and future.done()
                             and not future.exception()]
        if not firsts:
            return None
        return firsts[0] + records if len(firsts) == 1 else max(firsts)

    async def send_all(self) -> None:
        for where, batch in self.in_send_order():
            topic, partition = where
            self.sends.append(await self._producer.send_batch(batch, topic, partition=partition))
            self.sent_to.append(where)
        self._taken.clear()
        self._full.clear()
        self._open.clear()


# -- offsets, fenced by the group's generation (TxnOffsetCommit v3, kafka/group.py) --------

class _GenerationOffsetsHandler(TxnOffsetCommitHandler):  # type: ignore[misc]
    """aiokafka's TxnOffsetCommit step, sending v3 with the member's generation."""

    def __init__(self, sender: Any, offsets: Any, group_id: str, member: GroupMetadata) -> None:
        super().__init__(sender, offsets, group_id)
        self._member = member

    def create_request(self) -> TxnOffsetCommitV3:
        txn = self._sender._txn_manager
        member = self._member
        return TxnOffsetCommitV3(
            TxnOffsetCommitRequest_v3, txn.transactional_id, self._group_id, txn.producer_id,
            txn.producer_epoch, member.generation_id, member.member_id,
            member.group_instance_id, by_topic(self._offsets), {})

    def handle_response(self, resp: Any) -> float | None:
        errors = [(name, [(index, code) for index, code, _ in partitions])
                  for name, partitions, _ in resp.topics]
        refused = {code for _, partitions in errors for _, code in partitions} & GENERATION_ERRORS
        if refused:
            exc = GenerationFenced(
                f"{for_code(min(refused)).__name__}: generation {self._member.generation_id}"
                f" of member {self._member.member_id!r} in group {self._group_id!r} is over")
            self._sender._txn_manager.error_transaction(exc)
            return None
        result: float | None = super().handle_response(SimpleNamespace(errors=errors))
        return result


async def send_offsets_fenced(
    producer: AIOKafkaProducer, offsets: Mapping[TopicPartition, int], member: GroupMetadata,
) -> None:
    """``producer.send_offsets_to_transaction`` with the member's generation (v3).

    aiokafka's own steps (AddOffsetsToTxn, retries, coordinator lookup) are kept; only the
    TxnOffsetCommit it sends is replaced, for this producer. Raises :class:`GenerationFenced`
    when the coordinator refuses the generation; the transaction must then be aborted.
    """
    if not member.in_generation:
        raise GenerationFenced(f"member of group {member.group_id!r} without a generation: "
                               "its membership was lost")
    sender: Any = producer._sender

    async def txn_offset_commit(pending: Any, group_id: str) -> bool | None:
        if not pending:
            return None
        try:
            node_id = await sender._find_coordinator(CoordinationType.GROUP, group_id)
        except GroupAuthorizationFailedError as exc:
            sender._txn_manager.error_transaction(exc)
            return None
        done: bool = await _GenerationOffsetsHandler(sender, pending, group_id, member).do(node_id)
        return done

    sender._do_txn_offset_commit = txn_offset_commit
    try:
        await producer.send_offsets_to_transaction(dict(offsets), member.group_id)
    except GenerationFenced:
        # aiokafka parks the same error on its transaction waiter, which nobody awaits.
        waiter: Any = sender._txn_manager._transaction_waiter
        if waiter.done() and not waiter.cancelled():
            waiter.exception()
        raise
