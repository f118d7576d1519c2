"""One transaction's record batches, one open per output (topic, partition).

Whole batches are handed to aiokafka (``send_batch``): ``send`` per record cost a coroutine,
a metadata check and a future per record, a third of a projector's produce-side CPU. There
are two ways to build them, writing the same bytes (``tests/unit/test_producer_batches.py``):

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
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import BatchBuilder

from symfonic_stream.kafka.clients import PRODUCER_MAX_BATCH_BYTES
from symfonic_stream.native import extension as _extension

if TYPE_CHECKING:
    from symfonic_stream._native import RecordBatches

log = logging.getLogger(__name__)

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
