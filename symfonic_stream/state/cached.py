"""A store's values when they live on disk: a bounded cache of decoded values over the
partition's database (``SYMFONIC_STATE_CACHE_KEYS``, with ``SYMFONIC_STATE_DIR``).

The in-memory store keeps every value decoded in a dict. With a persistent store it may
keep only some: :class:`DiskValues` stands in for that dict (``get``, ``pop``, item
assignment, ``items``, ``len``), reading what it does not hold from the partition's
RocksDB database (:mod:`.disk`), which holds exactly the committed changelog
(``disk.py`` says why). What it holds beyond the database is what is not committed yet:

* a value put or changed since the last commit is in the cache until that commit reached
  the database; a key deleted since is in ``deleted`` (so a read does not find the
  database's older value) until its tombstone reached it;
* so only **clean** values may leave the cache: not dirty, not read or written since the
  last commit step 2 (the store's before-images name those), and not one the codec's
  ``keep`` asks to hold (the ordering guard's runs with events buffered in memory). The
  store evicts after each commit reached the database (:meth:`evict`), oldest first, down
  to 80 % of the limit, so the scan is paid once per many commits, not per record.

The count (``len``, a processor's ``active_runs``) follows each commit's changes as the
before-images tell them (a key absent before and present after adds one); the database's
checkpoint keeps it, so a restart need not count. Records applied by a restore or a tail
are not counted one by one (that would read the database for each): the count is
recounted, keys only, when the checkpoint after them is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

V = TypeVar("V")

#: What is evicted down to, as a share of the limit.
EVICT_TO = 0.8


class Backing(Protocol):
    """The partition's database, as the cache reads it."""

    def get(self, key: bytes) -> bytes | None: ...

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...

    def keys(self, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]: ...

    def count(self, prefix: bytes) -> int: ...


class DiskValues(Generic[V]):
    """One store's values: a cache of decoded values over its keys in the database."""

    def __init__(self, backing: Backing, prefix: bytes, decode: Callable[[bytes], V],
                 limit: int, keep: Callable[[V], bool] | None, count: int | None) -> None:
        self._backing = backing
        self._prefix = prefix
        self._decode = decode
        self._limit = max(1, limit)
        self._keep = keep
        self._cache: dict[str, V] = {}
        #: Deleted here; the tombstone not in the database yet.
        self.deleted: set[str] = set()
        self._deleted_taken: set[str] = set()
        self._count = backing.count(prefix) if count is None else count
        self._delta_taken = 0
        self.recount = False

    # -- the dict the store reads and writes ----------------------------------------------

    def get(self, key: str) -> V | None:
        value = self._cache.get(key)
        if value is not None or key in self.deleted:
            return value
        raw = self._backing.get(self._prefix + key.encode())
        if raw is None:
            return None
        value = self._cache[key] = self._decode(raw)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, value: V) -> None:
        self._cache[key] = value
        self.deleted.discard(key)

    def pop(self, key: str, default: None = None) -> V | None:
        value = self.get(key)
        if value is not None:
            del self._cache[key]
            self.deleted.add(key)
        return value

    def __len__(self) -> int:
        return self._count + self._delta_taken

    def items(self, uncommitted: Iterable[str]) -> Iterator[tuple[str, V]]:
        """Every key and value, the database's in key order, then those only cached
        (``uncommitted``: every key that may be new since the database was written)."""
        cache, deleted, decode = self._cache, self.deleted, self._decode
        only_cached = {key for key in uncommitted if key in cache}
        start = len(self._prefix)
        for raw_key, raw in self._backing.scan(self._prefix):
            key = raw_key[start:].decode()
            only_cached.discard(key)
            value = cache.get(key)
            if value is not None:
                yield key, value
            elif key not in deleted:
                yield key, decode(raw)
        for key in only_cached:
            value = cache.get(key)
            if value is not None:
                yield key, value

    def keys_after(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` keys of the database after ``after``, those deleted here left out."""
        prefix, deleted, found = self._prefix, self.deleted, []
        start = None if after is None else prefix + after.encode() + b"\x00"  # (just after)
        for raw in self._backing.keys(prefix, start):
            key = raw[len(prefix):].decode()
            if key not in deleted:
                found.append(key)
                if len(found) >= limit:
                    break
        return found

    def peek(self, key: str) -> V | None:
        """The value now, not cached if it was not (a walk over every key reads each once)."""
        value = self._cache.get(key)
        if value is not None or key in self.deleted:
            return value
        raw = self._backing.get(self._prefix + key.encode())
        return None if raw is None else self._decode(raw)

    # -- the commit ------------------------------------------------------------------------

    def taken(self, delta: int) -> None:
        """Commit step 2: ``delta`` keys more (or fewer) once it commits; the deletes so far
        are its tombstones."""
        self._delta_taken += delta
        self._deleted_taken |= self.deleted

    def committed(self) -> None:
        """The transaction's changes reached the database."""
        self._count += self._delta_taken
        self._delta_taken = 0
        self.deleted -= self._deleted_taken
        self._deleted_taken = set()

    def rolled_back(self, undone: dict[str, V | None]) -> None:
        """Every key back to its committed value, which is the database's."""
        for key, value in undone.items():
            if value is None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = value
        self.deleted.clear()
        self._deleted_taken = set()
        self._delta_taken = 0

    def evict(self, busy: Callable[[str], bool]) -> int:
        """Drop clean values, oldest first, to below the limit; how many."""
        cache = self._cache
        if len(cache) <= self._limit:
            return 0
        target, keep, held = int(self._limit * EVICT_TO), self._keep, []
        dropped = 0
        for key in list(cache):
            if len(cache) <= target:
                break
            value = cache[key]
            if busy(key) or (keep is not None and keep(value)):
                held.append(key)
            else:
                del cache[key]
                dropped += 1
        for key in held:  # to the end: the next eviction does not scan them first again
            cache[key] = cache.pop(key)
        return dropped

    # -- records a restore or a tail applied ------------------------------------------------

    def applied(self, key: str) -> None:
        """A changelog record of ``key`` went to the database (not yet written)."""
        self._cache.pop(key, None)
        self.deleted.discard(key)
        self.recount = True

    def written(self) -> int:
        """The database was written up to a checkpoint: the count there (recounted after
        records a restore applied)."""
        if self.recount:
            self._count, self.recount = self._backing.count(self._prefix), False
        return self._count + self._delta_taken

    @property
    def cached(self) -> int:
        return len(self._cache)
