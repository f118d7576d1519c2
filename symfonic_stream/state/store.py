"""State stores and their transactions: what one task remembers, changelogged, in one place.

A processor keeps what it must remember (a run's next index, a ticket's token) in one or
more :class:`StateStore` s, Kafka Streams' key-value stores with a changelog. The stores of
one task live in one :class:`StorePartition`: the *committed* values in a :class:`Backend`
(memory, or the partition's RocksDB database: :mod:`.disk`), encoded as the changelog
carries them, and the changes since in a :class:`PartitionTransaction`, as in Quix
Streams' ``state/`` (its ``PartitionTransaction`` and ``StorePartition``):

* ``get`` hands out the transaction's own decoded copy of a value (decoded from the
  backend the first time it is needed), so a processor may change it in place, or ``put`` a
  new one, or ``delete`` the key: nothing outside the transaction sees it, and nothing
  needs saying after a change in place;
* at commit step 2, prepare state (:mod:`symfonic_stream.engine.transaction`) the partition
  **prepares** the transaction: every value it handed out or was given, encoded, where the
  encoding differs from what the key held (a tombstone for a deleted key), is the changelog
  this Kafka transaction carries; a new transaction opens on top of it, so processing goes
  on while the Kafka transaction is in flight (it reads the prepared changes, not the
  backend, for what they hold). The decoded values stay with the new transaction (up to
  :data:`HOT_KEYS` per store, the latest), so a key used again is not decoded again;
* at commit step 9, advance, once the Kafka transaction committed, the partition **flushes** the
  prepared changes into the backend, with the changelog offset they reach (the backend remembers
  it: a restart restores only the changelog after it);
* an **abort** drops both transactions and every decoded value: what they held goes, the
  backend holds the last commit, and the processor rebuilds what it derives from the stores
  (``restored``), as after a restore. Nothing is rolled back, because nothing committed
  was touched.

Restoring (:mod:`.restore`) and tailing kept state (:mod:`.kept`) write changelog records
straight into the backend (:meth:`StorePartition.apply`), then the offset they reached
(:meth:`StorePartition.applied`): the same object, whatever brought the records.

Several stores of one task share its changelog partition: every key carries its store's
prefix (``<name>/``), so no store can read another's record, whatever the key holds.

``schedule`` / ``due``: a deadline per key (a gap timeout, a closed run's grace), kept in a
heap in memory, so a punctuation costs what is due, never the number of keys. Deadlines
are derived from values: an abort or a restore drops them and ``restored`` schedules them
again.

A store made outside the engine (offline, a processor's unit test) has a partition of its
own in memory, never committed: its transaction holds everything.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import orjson

V = TypeVar("V")

#: Changed keys of one commit: changelog key → encoded value (``None``: a tombstone).
Changes = dict[bytes, bytes | None]
#: One store's part of a prepared transaction: key → encoded value (``None``: deleted).
StoreChanges = dict[str, bytes | None]
#: What a store's own partition held uncommitted when it joins a task's: values, their
#: encodings as read, the keys handed out, the keys added.
Carried = tuple[dict[str, Any], dict[str, bytes | None], set[str], int]

#: The deadline of a key that came due and was not scheduled again. Overwritten, not
#: deleted: a punctuation fires and reschedules thousands of keys, and deleting then
#: re-inserting them would fill a dict of a million keys with dead entries until it
#: resizes, tens of milliseconds inside one punctuation (bench/soak.py saw 108 ms).
_FIRED = float("-inf")
#: Not read by this transaction yet (``None`` is a key read and absent, or deleted).
_UNREAD: Any = object()
#: Decoded values a store keeps from one transaction to the next (the latest used): a run
#: that sends a record per transaction is decoded once, not per record. Over it by a
#: quarter, the oldest are dropped down to it at the next prepare.
HOT_KEYS = 8192


@dataclass(frozen=True, slots=True)
class Codec(Generic[V]):
    """How a store's values travel in its changelog (and rest in its backend)."""

    encode: Callable[[V], bytes]
    decode: Callable[[bytes], V]

    @classmethod
    def fields(cls, names: Sequence[str], decode: Callable[[bytes], V]) -> Codec[V]:
        """A value written as the JSON array of its attributes ``names``, in that order
        (each one orjson writes natively); ``decode`` reads it back, with any older
        layout."""
        attributes = operator.attrgetter(*names)
        dumps = orjson.dumps

        def encode(value: V) -> bytes:
            return dumps(attributes(value))

        return cls(encode, decode)


class Backend(Protocol):
    """Where a partition's committed values rest, encoded, by store prefix and key; and the
    changelog offset they hold everything before (None: not known)."""

    @property
    def offset(self) -> int | None: ...

    @property
    def on_disk(self) -> bool: ...

    def get(self, prefix: bytes, key: str) -> bytes | None: ...

    def scan(self, prefix: bytes) -> Iterator[tuple[str, bytes]]: ...

    def keys_after(self, prefix: bytes, after: str | None, limit: int) -> list[str]: ...

    def count(self, prefix: bytes, fresh: bool = False) -> int:
        """The store's committed keys (``fresh``: counted now, not as last written)."""

    def write(self, changes: Mapping[bytes, StoreChanges], offset: int | None,
              counts: Mapping[bytes, int]) -> None:
        """A committed transaction: each store's changes (by prefix), and the offset."""

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One changelog record read back (a restore, a tail): its key carries the prefix."""

    def mark(self, offset: int, counts: Mapping[bytes, int]) -> None:
        """The records applied so far reach ``offset``; each store's key count."""

    def close(self) -> None: ...

    def destroy(self) -> None:
        """Close it and forget everything it holds."""


class MemoryBackend:
    """The committed values in memory, one dict per store (the default)."""

    on_disk = False

    def __init__(self) -> None:
        self._stores: dict[bytes, dict[str, bytes]] = {}
        self._offset: int | None = None

    @property
    def offset(self) -> int | None:
        return self._offset

    def _of(self, prefix: bytes) -> dict[str, bytes]:
        found = self._stores.get(prefix)
        if found is None:
            found = self._stores[prefix] = {}
        return found

    def get(self, prefix: bytes, key: str) -> bytes | None:
        values = self._stores.get(prefix)
        return None if values is None else values.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[str, bytes]]:
        """In the order the keys were first written."""
        return iter(list(self._of(prefix).items()))

    def keys_after(self, prefix: bytes, after: str | None, limit: int) -> list[str]:
        keys = sorted(key for key in self._of(prefix) if after is None or key > after)
        return keys[:limit]

    def count(self, prefix: bytes, fresh: bool = False) -> int:
        return len(self._of(prefix))

    def write(self, changes: Mapping[bytes, StoreChanges], offset: int | None,
              counts: Mapping[bytes, int]) -> None:
        for prefix, changed in changes.items():
            values = self._of(prefix)
            for key, raw in changed.items():
                if raw is None:
                    values.pop(key, None)
                else:
                    values[key] = raw
        if offset is not None:
            self._offset = offset

    def apply(self, key: bytes, value: bytes | None) -> None:
        head, _, rest = key.partition(b"/")
        values = self._of(head + b"/")
        if value is None:
            values.pop(rest.decode(), None)
        else:
            values[rest.decode()] = value

    def mark(self, offset: int, counts: Mapping[bytes, int]) -> None:
        self._offset = offset

    def close(self) -> None:
        """Nothing to close."""

    def destroy(self) -> None:
        self._stores.clear()
        self._offset = None


class PartitionTransaction:
    """One partition's stores since the last commit point, decoded: each store's values
    (``None``: absent or deleted) with the encoding each was read as (committed or
    prepared), the keys handed out or written, which the prepare encodes again, and how
    many keys the changes add (or remove). Owned by its :class:`StorePartition`; the
    stores read and write their part directly (``StateStore.get`` is the hot path)."""

    __slots__ = ("added", "handed", "read_as", "values")

    def __init__(self, stores: Sequence[StateStore[Any]],
                 carried: PartitionTransaction | None = None) -> None:
        if carried is None:
            self.values: dict[bytes, dict[str, Any]] = {s.prefix: {} for s in stores}
            self.read_as: dict[bytes, dict[str, bytes | None]] = {s.prefix: {} for s in stores}
        else:  # the decoded values go on, the latest HOT_KEYS of each store
            self.values, self.read_as = carried.values, carried.read_as
            for prefix, values in self.values.items():
                if len(values) > HOT_KEYS + HOT_KEYS // 4:
                    kept = list(values)[-HOT_KEYS:]
                    read_as = self.read_as[prefix]
                    self.values[prefix] = {key: values[key] for key in kept}
                    self.read_as[prefix] = {key: read_as[key] for key in kept}
        self.handed: dict[bytes, set[str]] = {s.prefix: set() for s in stores}
        self.added: dict[bytes, int] = dict.fromkeys(self.values, 0)

    def changes(self, store: StateStore[Any]) -> StoreChanges:
        """``store``'s keys whose value now encodes otherwise than it was read (None: a
        tombstone)."""
        prefix, encode = store.prefix, store.codec.encode
        values, read_as, changes = self.values[prefix], self.read_as[prefix], {}
        for key in self.handed[prefix]:
            value = values[key]
            raw = None if value is None else encode(value)
            if raw != read_as[key]:
                changes[key] = raw
        return changes

    def changed(self, stores: Sequence[StateStore[Any]]) -> bool:
        return any(self.changes(store) for store in stores if self.handed[store.prefix])

    def prepare(self, stores: Sequence[StateStore[Any]], changelog: Changes
                ) -> dict[bytes, StoreChanges]:
        """Each changed key's value encoded (or a tombstone): into ``changelog`` under its
        changelog key, and returned by store, for the backend at the flush."""
        prepared: dict[bytes, StoreChanges] = {}
        for store in stores:
            prefix = store.prefix
            if not self.handed[prefix]:
                continue
            changes = self.changes(store)
            if changes:
                self.read_as[prefix].update(changes)
                for key, raw in changes.items():
                    changelog[prefix + key.encode()] = raw
                prepared[prefix] = changes
        return prepared


class StorePartition:
    """One task's state stores over one backend: the committed values, the transaction
    being committed (*prepared*, at most one) and the one open for processing.

    The whole life of a transaction is here: :meth:`prepare` (commit step 2, prepare state),
    :meth:`flush` (commit step 9, advance) and :meth:`abort`; and restoring into it, :meth:`apply`
    then :meth:`applied`.
    """

    def __init__(self, stores: Iterable[StateStore[Any]], backend: Backend | None = None
                 ) -> None:
        self.stores = tuple(stores)
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        #: Committed keys per store (kept here: a database would count by scanning).
        self.counts = {s.prefix: self.backend.count(s.prefix) for s in self.stores}
        self._prepared: dict[bytes, StoreChanges] | None = None
        self._prepared_added: dict[bytes, int] = {}
        self._recount = False
        carried = [store.join(self) for store in self.stores]
        self._open()
        transaction = self.transaction
        for store, (values, read_as, handed, added) in zip(self.stores, carried, strict=True):
            transaction.values[store.prefix].update(values)
            transaction.read_as[store.prefix].update(read_as)
            transaction.handed[store.prefix].update(handed)
            transaction.added[store.prefix] += added

    def _open(self, carried: PartitionTransaction | None = None) -> None:
        self.transaction = PartitionTransaction(self.stores, carried)
        for store in self.stores:
            store.begin(self.transaction)

    @property
    def offset(self) -> int | None:
        """The changelog offset the committed values hold everything before."""
        return self.backend.offset

    @property
    def changed(self) -> bool:
        """Whether the open transaction changed a key (encodes what it handed out)."""
        return self.transaction.changed(self.stores)

    # -- reading what the open transaction has not ---------------------------------------

    def raw(self, prefix: bytes, key: str) -> bytes | None:
        """``key``'s encoded value as the prepared changes or the backend hold it."""
        prepared = self._prepared
        if prepared is not None:
            changes = prepared.get(prefix)
            if changes is not None and key in changes:
                return changes[key]
        return self.backend.get(prefix, key)

    def count(self, store: StateStore[Any]) -> int:
        prefix = store.prefix
        return (self.counts[prefix] + self._prepared_added.get(prefix, 0)
                + self.transaction.added[prefix])

    def committed_items(self, store: StateStore[Any]) -> Iterator[tuple[str, bytes | None]]:
        """Every key of ``store`` beyond the open transaction, encoded (None: deleted by
        the prepared changes): the backend's, then those only prepared."""
        prefix = store.prefix
        prepared = (self._prepared or {}).get(prefix, {})
        for key, committed in self.backend.scan(prefix):
            yield key, prepared.get(key, committed)
        for key, raw in prepared.items():
            if self.backend.get(prefix, key) is None:
                yield key, raw

    # -- the transaction ------------------------------------------------------------------

    def prepare(self, changelog: Changes,
                last_put: tuple[StateStore[Any], str, Any] | None = None) -> None:
        """Commit step 2, prepare state: the open transaction's changes into ``changelog`` (after
        ``last_put``, one more value: the task's position); a new one opens on top of them,
        with the decoded values."""
        if self._prepared is not None:
            raise RuntimeError("a transaction is prepared already (at most one in flight)")
        if last_put is not None:
            store, key, value = last_put
            store.put(key, value)
        self._prepared = self.transaction.prepare(self.stores, changelog)
        self._prepared_added = self.transaction.added
        self._open(self.transaction)

    def flush(self, offset: int | None) -> None:
        """Commit step 9, advance: the prepared changes are the changelog's: into the backend, with
        the changelog ``offset`` they reach (None: unknown, or nothing changed)."""
        prepared, self._prepared = self._prepared or {}, None
        for prefix, added in self._prepared_added.items():
            self.counts[prefix] += added
        self._prepared_added = {}
        if prepared or offset is not None:
            self.backend.write(prepared, offset, self.counts)

    def abort(self) -> int:
        """Drop the prepared and the open transaction, every decoded value (and every
        store's deadlines); the keys the transactions held. The processor must rebuild what
        it derives (``restored``)."""
        transaction = self.transaction
        dropped = sum(len(keys) for keys in transaction.handed.values())
        dropped += sum(len(changes) for changes in (self._prepared or {}).values())
        self._prepared, self._prepared_added = None, {}
        self._open()
        for store in self.stores:
            store.drop_deadlines()
        return dropped

    # -- restoring ----------------------------------------------------------------------

    def owns(self, key: bytes) -> bool:
        return any(key.startswith(store.prefix) for store in self.stores)

    def apply(self, key: bytes, value: bytes | None) -> bool:
        """One changelog record read back (a restore or a tail), into the backend if one of
        the stores owns its key; whether one does. Only while nothing is uncommitted: the
        decoded values are dropped, to be read again."""
        if not self.owns(key):
            return False
        if not self._recount:
            if self._prepared is not None or self.transaction.changed(self.stores):
                raise RuntimeError("changelog records applied over uncommitted changes")
            if any(self.transaction.values.values()):
                self._open()
        self.backend.apply(key, value)
        self._recount = True
        return True

    def applied(self, offset: int | None) -> None:
        """The records applied so far reach changelog ``offset`` (None: an offset not known,
        outside the engine): counted again, and marked in the backend (a database writes
        them with that checkpoint)."""
        if self._recount:
            self.counts = {s.prefix: self.backend.count(s.prefix, fresh=True)
                           for s in self.stores}
            self._recount = False
        if offset is not None:
            self.backend.mark(offset, self.counts)


class StateStore(Generic[V]):
    """One key → value store of a task: reads and writes go to its partition's open
    transaction (see the module's docstring)."""

    def __init__(self, name: str, codec: Codec[V]) -> None:
        if not name or "/" in name:
            raise ValueError(f"a store name is a non-empty word without '/': {name!r}")
        self.name = name
        self.prefix = f"{name}/".encode()
        self.codec = codec
        # Deadlines: the current one per key, and a heap that may hold stale entries.
        self._deadline: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        #: Deadlines later than this are not kept (None: every one is): whoever set it walks
        #: the keys and schedules each deadline once it comes within (values on disk).
        self._horizon: float | None = None
        self._partition: StorePartition
        self._values: dict[str, V | None]
        self._read_as: dict[str, bytes | None]
        self._handed: set[str]
        self._added: dict[bytes, int]
        StorePartition([self])  # a partition of its own until an engine task's takes it

    def join(self, partition: StorePartition) -> Carried:
        """Be one of ``partition``'s stores from now on (only while nothing it holds is
        committed); what its partition's open transaction holds of it, to carry over."""
        previous = getattr(self, "_partition", None)
        carried: Carried = ({}, {}, set(), 0)
        if previous is not None and previous is not partition:
            if previous.counts[self.prefix] or previous.offset is not None:
                raise RuntimeError(f"store {self.name!r} holds committed values: it cannot "
                                   "change partition")
            carried = (dict(self._values), dict(self._read_as), set(self._handed),
                       self._added[self.prefix])
        self._partition = partition
        return carried

    def begin(self, transaction: PartitionTransaction) -> None:
        """Read and write ``transaction`` from now on (its partition opened it)."""
        self._values = transaction.values[self.prefix]
        self._read_as = transaction.read_as[self.prefix]
        self._handed = transaction.handed[self.prefix]
        self._added = transaction.added

    @property
    def partition(self) -> StorePartition:
        return self._partition

    @property
    def on_disk(self) -> bool:
        """Whether the committed values rest on disk (not in memory)."""
        return self._partition.backend.on_disk

    # -- reading and writing -----------------------------------------------------------

    def get(self, key: str) -> V | None:
        """``key``'s value: the transaction's own, to change in place (the prepare writes
        it if it changed)."""
        value = self._values.get(key, _UNREAD)
        if value is _UNREAD:
            raw = self._read_as[key] = self._partition.raw(self.prefix, key)
            value = self._values[key] = None if raw is None else self.codec.decode(raw)
        self._handed.add(key)
        return value

    def __contains__(self, key: str) -> bool:
        return self.peek(key) is not None

    def __len__(self) -> int:
        return self._partition.count(self)

    def put(self, key: str, value: V) -> None:
        if self.get(key) is None:
            self._added[self.prefix] += 1
        self._values[key] = value

    def delete(self, key: str) -> None:
        """Forget ``key`` (a tombstone at the next commit) and its deadline."""
        if self.get(key) is not None:
            self._added[self.prefix] -= 1
            self._values[key] = None
        self._deadline.pop(key, None)

    def items(self) -> Iterator[tuple[str, V]]:
        """Every key and value, a snapshot for reading (``get`` a value to change it): the
        committed ones (memory: in the order they were first written; on disk: in key
        order), then those only this transaction holds."""
        values, decode = dict(self._values), self.codec.decode
        found: list[tuple[str, V]] = []
        for key, raw in self._partition.committed_items(self):
            value = values.pop(key, _UNREAD)
            if value is _UNREAD:
                if raw is not None:
                    found.append((key, decode(raw)))
            elif value is not None:
                found.append((key, value))
        found.extend((key, value) for key, value in values.items() if value is not None)
        return iter(found)

    def keys_after(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` committed keys after ``after`` (None: from the first), in key
        order: a walk over every key, one slice per call, each read as it is then."""
        return self._partition.backend.keys_after(self.prefix, after, limit)

    def peek(self, key: str) -> V | None:
        """``key``'s value now, for reading only (a walk over every key reads each once and
        keeps none): never change what it returns."""
        value = self._values.get(key, _UNREAD)
        if value is _UNREAD:
            raw = self._partition.raw(self.prefix, key)
            return None if raw is None else self.codec.decode(raw)
        return value

    # -- deadlines ---------------------------------------------------------------------

    def schedule(self, key: str, at: float) -> None:
        """``key`` is due at ``at`` (replacing any earlier deadline of it); beyond the
        horizon (:meth:`limit_deadlines_to`) the key is left with no deadline instead."""
        if self._horizon is not None and at > self._horizon:
            self._deadline.pop(key, None)  # (a heap entry of it goes stale)
            return
        if self._deadline.get(key) == at:
            return
        self._deadline[key] = at
        heapq.heappush(self._heap, (at, key))

    def limit_deadlines_to(self, horizon: float | None) -> None:
        """Keep no deadline later than ``horizon`` (None: keep every one): those kept so far
        beyond it are dropped too, and the heap rebuilt without them."""
        self._horizon = horizon
        if horizon is None:
            return
        current = self._deadline
        self._deadline = {key: at for key, at in current.items() if at <= horizon}
        self._heap = [(at, key) for at, key in self._heap
                      if at <= horizon and self._deadline.get(key) == at]
        heapq.heapify(self._heap)

    def drop_deadlines(self) -> None:
        """Every deadline gone (an abort: the processor schedules them again)."""
        self._deadline.clear()
        self._heap.clear()

    def deadline(self, key: str) -> float | None:
        at = self._deadline.get(key)
        return None if at is None or at == _FIRED else at

    def due(self, now: float) -> Iterator[str]:
        """Pop and yield every key whose deadline is at or before ``now``, earliest first.

        A key rescheduled or deleted since its entry was pushed is skipped when that stale
        entry comes up: the heap never needs searching.
        """
        heap, current = self._heap, self._deadline
        while heap and heap[0][0] <= now:
            at, key = heapq.heappop(heap)
            if current.get(key) == at:
                current[key] = _FIRED
                yield key

    def next_due(self) -> float | None:
        """The earliest deadline still scheduled (stale entries dropped on the way)."""
        heap, current = self._heap, self._deadline
        while heap and current.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def partitions_of(stores: Iterable[StateStore[Any]]) -> list[StorePartition]:
    """The partitions ``stores`` belong to, each once, in the order first met."""
    found: dict[int, StorePartition] = {}
    for store in stores:
        found.setdefault(id(store.partition), store.partition)
    return list(found.values())


def write_changes(stores: Iterable[StateStore[Any]], changes: Changes) -> None:
    """A whole commit of ``stores`` outside the engine (offline checks, benchmarks, tests):
    their changes into ``changes``, then into their backends."""
    for partition in partitions_of(stores):
        partition.prepare(changes)
        partition.flush(None)


def restore_records(stores: Iterable[StateStore[Any]],
                    records: Iterable[tuple[bytes, bytes | None]]) -> int:
    """Changelog records into the partitions of the stores whose prefixes they carry,
    outside the engine (a processor's stores restored in a test or a benchmark); how many
    a store took."""
    stores = list(stores)
    taken = 0
    for key, value in records:
        for store in stores:
            if key.startswith(store.prefix):
                taken += store.partition.apply(key, value)
                break
    for partition in partitions_of(stores):
        partition.applied(None)
    return taken
