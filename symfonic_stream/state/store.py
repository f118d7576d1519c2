"""State stores: one task's key → value state, changelogged and restored by the store.

A processor keeps what it must remember (a run's next index, a ticket's token) in one or
more :class:`StateStore` s, as Kafka Streams' key-value stores with a changelog:

* ``get`` / ``put`` / ``delete`` (and ``touch`` for a value changed in place) mark the key
  *dirty*; nothing is written yet.
* At step 2 of every commit (:mod:`symfonic_stream.engine.commit`) the engine asks each
  store for its changes: the latest value of each dirty key, encoded, or a tombstone.
  They travel in the same transaction as the outputs and the input offset, so the
  changelog always matches the committed offset.
* Before a task consumes, the engine replays the task's changelog partition into its
  stores (:meth:`StateStore.restore`), each taking the records under its own prefix.
* ``schedule`` / ``due``: a deadline per key (a gap timeout, a closed run's grace), kept in
  a heap, so a punctuation costs what is due, never the number of keys.
* **Uncommitted changes roll back in memory** (a task's stores, :meth:`track_uncommitted`).
  The first time a key is read or written after a commit point, the store keeps its
  *before-image*, the value encoded as the changelog would carry it; a transaction that
  aborts (or a processor that raises) puts every key back to its image
  (:meth:`roll_back`), as Quix Streams' ``PartitionTransaction`` drops its cache on abort.
  Images are taken on ``get``, not on a write, because processors change values in place:
  a value changes only after the ``get`` that returned it (``items`` is a snapshot for
  reading). Two sets of images: those of the transaction being committed (taken at its
  step 2, dropped when it commits) and those since, so processing goes on during a commit.

Several stores of one task share its changelog partition: every key carries its store's
prefix (``<name>/``), so no store can read another's record, whatever the key holds.

**Values on disk.** With a persistent store and ``SYMFONIC_STATE_CACHE_KEYS``, the engine
gives each store its partition's database (:meth:`StateStore.back_with`): the values then
live there and the store holds a bounded cache of them (:mod:`.cached`); the rules above
are unchanged.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from symfonic_stream.state.cached import Backing, DiskValues

V = TypeVar("V")

#: Changed keys of one commit: changelog key → encoded value (``None``: a tombstone).
Changes = MutableMapping[bytes, bytes | None]

#: The deadline of a key that came due and was not scheduled again. Overwritten, not
#: deleted: a punctuation fires and reschedules thousands of keys, and deleting then
#: re-inserting them would fill a dict of a million keys with dead entries until it
#: resizes, tens of milliseconds inside one punctuation (bench/soak.py saw 108 ms).
_FIRED = float("-inf")

#: Before-images: key → its encoded value before the uncommitted changes (None: absent).
Images = dict[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Codec(Generic[V]):
    """How a store's values travel in its changelog."""

    encode: Callable[[V], bytes]
    decode: Callable[[bytes], V]
    #: A value that must stay in memory while it answers True (it holds what its encoding
    #: does not: the ordering guard's buffered events), when values live on disk.
    keep: Callable[[V], bool] | None = None


class StateStore(Generic[V]):
    """An in-memory key → value store written to, and restored from, a changelog."""

    def __init__(self, name: str, codec: Codec[V]) -> None:
        if not name or "/" in name:
            raise ValueError(f"a store name is a non-empty word without '/': {name!r}")
        self.name = name
        self.prefix = f"{name}/".encode()
        self._codec = codec
        self._values: dict[str, V] | DiskValues[V] = {}
        self._on_disk: DiskValues[V] | None = None
        self._dirty: set[str] = set()
        # Deadlines: the current one per key, and a heap that may hold stale entries.
        self._deadline: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        #: Deadlines later than this are not kept (None: every one is): whoever set it walks
        #: the keys and schedules each deadline once it comes within (values on disk).
        self._horizon: float | None = None
        # Rolling back: off for a store outside the engine (offline, tests of processors).
        self._tracking = False
        self._images: Images = {}  # since the last commit step 2
        self._images_taken: Images = {}  # of the transaction being committed

    # -- reading and writing -----------------------------------------------------------

    def get(self, key: str) -> V | None:
        value = self._values.get(key)
        if self._tracking and key not in self._images:
            self._images[key] = None if value is None else self._codec.encode(value)
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> Iterator[tuple[str, V]]:
        """Every key and value, in the order the keys were first put (values on disk: the
        database's in key order, then the new ones). For reading: ``get`` a value before
        changing it; keys may be put or deleted meanwhile."""
        if self._on_disk is None:
            assert isinstance(self._values, dict)
            return iter(list(self._values.items()))  # (a snapshot: keys change meanwhile)
        return self._on_disk.items([*self._dirty, *self._images, *self._images_taken])

    def keys_after(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` keys the database holds after ``after`` (None: from the first), in
        its key order: a walk over every key, one slice per call, each read as it is then.
        Values on disk only."""
        if self._on_disk is None:
            raise RuntimeError(f"store {self.name!r}: its values are not on disk")
        return self._on_disk.keys_after(after, limit)

    def peek(self, key: str) -> V | None:
        """``key``'s value now, for reading only: no before-image is kept, and a value on
        disk is not cached (so never change what it returns)."""
        if self._on_disk is None:
            return self._values.get(key)
        return self._on_disk.peek(key)

    def back_with(self, backing: Backing, limit: int, count: int | None) -> None:
        """Values on disk from now on, at most ``limit`` of them cached (``count``: how many
        keys the database holds, None: count them)."""
        if self._values:
            raise RuntimeError(f"store {self.name!r}: values go to disk before any is kept")
        self._tracking = True  # (what leaves the cache is known by its images)
        self._values = self._on_disk = DiskValues(
            backing, self.prefix, self._codec.decode, limit, self._codec.keep, count)

    @property
    def on_disk(self) -> DiskValues[V] | None:
        return self._on_disk

    def put(self, key: str, value: V) -> None:
        if self._tracking and key not in self._images:
            self.get(key)  # its image, before it is replaced
        self._values[key] = value
        self._dirty.add(key)

    def touch(self, key: str) -> None:
        """``key``'s value was changed in place: write it at the next commit."""
        if key in self._values:
            self._dirty.add(key)

    def delete(self, key: str) -> None:
        """Forget ``key`` (a tombstone at the next commit) and its deadline."""
        if self._tracking and key not in self._images:
            self.get(key)
        if self._values.pop(key, None) is not None or key in self._dirty:
            self._dirty.add(key)
        self._deadline.pop(key, None)

    # -- the changelog -----------------------------------------------------------------

    def write_changes(self, changes: Changes) -> None:
        """Commit step 2: each dirty key's latest value (or a tombstone) into ``changes``.

        The images so far become the transaction's; each written value is the image of its
        key for what follows (no second encoding when the key changes again)."""
        encode = self._codec.encode
        prefix = self.prefix
        following: Images = {}
        for key in self._dirty:
            value = self._values.get(key)
            encoded = None if value is None else encode(value)
            changes[prefix + key.encode()] = encoded
            following[key] = encoded
        if self._on_disk is not None:  # keys added minus keys deleted, from their images
            images = self._images
            self._on_disk.taken(sum(  # (a key only touched was there: no image, b"")
                (following[key] is not None) - (images.get(key, b"") is not None)
                for key in self._dirty))
        self._dirty.clear()
        if self._tracking:
            taken = self._images_taken
            for key, image in self._images.items():  # (none unless a commit failed to end)
                taken.setdefault(key, image)
            self._images = following

    # -- rolling back ------------------------------------------------------------------

    def track_uncommitted(self) -> None:
        """Keep before-images from now on (an engine task's stores), none kept so far."""
        self._tracking = True
        self._images = {}
        self._images_taken = {}

    def committed(self) -> None:
        """Commit step 8: the transaction's changes are the changelog's (and the database's,
        with values on disk); its images go."""
        self._images_taken = {}
        if self._on_disk is not None:
            self._on_disk.committed()

    def evict(self) -> int:
        """With values on disk, once the database holds the last commit: clean values out of
        the cache, if it holds more than its limit; how many."""
        if self._on_disk is None:
            return 0
        busy = self._dirty.__contains__ if not self._images else (
            lambda key: key in self._dirty or key in self._images)
        return self._on_disk.evict(busy)

    def roll_back(self) -> int:
        """Every key back to its value at the last commit; the keys put back.

        Deadlines are dropped: the processor's ``restored`` schedules them again, as after a
        restore. Raises when the store keeps no images (it could not know what to undo)."""
        if not self._tracking:
            raise RuntimeError(f"store {self.name!r} keeps no before-images")
        decode, values = self._codec.decode, self._values
        # The newest images first, so that each key ends at its oldest: the committed value.
        undone = {**self._images, **self._images_taken}
        if self._on_disk is not None:
            self._on_disk.rolled_back({key: None if image is None else decode(image)
                                       for key, image in undone.items()})
        else:
            for key, image in undone.items():
                if image is None:
                    values.pop(key, None)
                else:
                    values[key] = decode(image)
        self._images, self._images_taken = {}, {}
        self._dirty.clear()
        self._deadline.clear()
        self._heap.clear()
        return len(undone)

    @property
    def dirty(self) -> int:
        """Keys changed since the last commit."""
        return len(self._dirty)

    def owns(self, changelog_key: bytes) -> bool:
        return changelog_key.startswith(self.prefix)

    def restore(self, changelog_key: bytes, value: bytes | None) -> str:
        """Apply one changelog record of this store (``None``: a tombstone); its key."""
        key = changelog_key[len(self.prefix):].decode()
        if self._on_disk is not None:  # the record is the database's (restoring.py)
            self._on_disk.applied(key)
        elif value is None:
            self._values.pop(key, None)
        else:
            self._values[key] = self._codec.decode(value)
        return key

    # -- deadlines ---------------------------------------------------------------------

    def schedule(self, key: str, at: float) -> None:
        """``key`` is due at ``at`` (replacing any earlier deadline of it); beyond the
        horizon (:meth:`keep_deadlines_until`) the key is left with no deadline instead."""
        if self._horizon is not None and at > self._horizon:
            self._deadline.pop(key, None)  # (a heap entry of it goes stale)
            return
        if self._deadline.get(key) == at:
            return
        self._deadline[key] = at
        heapq.heappush(self._heap, (at, key))

    def keep_deadlines_until(self, horizon: float | None) -> None:
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


def write_changes(stores: Iterable[StateStore[Any]], changes: Changes) -> None:
    """Commit step 2 for every store of a task."""
    for store in stores:
        store.write_changes(changes)


def restore_record(stores: Iterable[StateStore[Any]], key: bytes, value: bytes | None) -> bool:
    """Hand one changelog record to the store whose prefix it carries; False if none."""
    for store in stores:
        if store.owns(key):
            store.restore(key, value)
            return True
    return False
