"""The persistent store: a partition's committed state in a RocksDB database, with the
changelog offset it holds everything before (its **checkpoint**).

With ``SYMFONIC_STATE_DIR`` set, a task's :class:`~symfonic_stream.state.store.StorePartition`
rests on a :class:`DiskBackend`: every changelog record its stores take (read by a restore
or a tail, or written by one of its own commits) goes to the partition's database
(rocksdict, the binding Quix Streams uses), and with each commit, or after a batch of
records read, in the same atomic write, the checkpoint. A process that restarts (a deploy,
a crash) opens the database and restores only the changelog after the checkpoint, as Kafka
Streams does with its local state and checkpoint file.

Why it is right whatever happened before: the database only ever receives changelog
records in offset order, committed ones (a commit's own records once it committed, others
read ``read_committed``), and the checkpoint is written with the batch that reaches it.
So after any crash it holds the changelog's view at its checkpoint, overwritten by some
later records in order; reading the changelog from the checkpoint again overwrites those
with what follows them, ending in the same state as a whole restore.

Why it may be thrown away: a database not written for longer than :data:`MAX_AGE_S`
might miss a tombstone the changelog's compaction has since removed (Kafka keeps them
``delete.retention.ms``, a day by default); one whose checkpoint lies before the
changelog's start offset misses records. Either is deleted and the partition restored
whole.

How much of it stays in memory is ``SYMFONIC_STATE_CACHE_KEYS``: at most that many encoded
values per store are kept in memory beside the database (the oldest go first), the rest
read from it when a transaction first needs them: state larger than memory, and a start
that loads nothing. ``0`` keeps every value in memory, loaded at start: the database then
saves the restore, not the memory. The checkpoint also keeps each store's key count, so a
start need not count.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from symfonic_stream.state.store import StoreChanges

log = logging.getLogger(__name__)

#: The checkpoint's key: no store key can be it (a store's keys carry ``<name>/``).
CHECKPOINT = b"\x00checkpoint"
#: A database older than this is not trusted (see the module's docstring).
MAX_AGE_S = 12 * 3600.0
#: Records buffered before they are written (without a checkpoint) during a long read.
WRITE_EVERY = 20_000
#: What a cache over its limit is trimmed down to, as a share of the limit.
TRIM_TO = 0.8

#: Each database's memtable (RocksDB flushes it to a file when full).
WRITE_BUFFER_BYTES = 4 * 2**20
#: The block cache every database of the process shares.
BLOCK_CACHE_BYTES = 32 * 2**20
_shared_cache: list[Any] = []


def _block_cache(rocksdict: Any) -> Any:
    if not _shared_cache:
        _shared_cache.append(rocksdict.Cache(BLOCK_CACHE_BYTES))
    return _shared_cache[0]


class StateDirError(Exception):
    """The persistent store cannot be used (rocksdict missing, the folder not writable)."""


def _rocksdict() -> Any:
    try:
        import rocksdict
    except ImportError as exc:
        raise StateDirError(
            "SYMFONIC_STATE_DIR needs the persistent store's binding: "
            "pip install 'symfonic-stream[rocksdb]'") from exc
    return rocksdict


def private_dir(folder: Path) -> None:
    """``folder``, made if missing, readable by this user alone (0700): the state holds
    ticket tokens and every tenant's runs (docs/security.md)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o077:
        folder.chmod(0o700)


def check_state_dir(folder: Path) -> None:
    """At start, with ``SYMFONIC_STATE_DIR`` set: the binding is there, the folder writable
    and private (0700)."""
    _rocksdict()
    try:
        private_dir(folder)
        probe = folder / ".writable"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StateDirError(f"SYMFONIC_STATE_DIR is not a writable folder ({exc.strerror})"
                            ) from None


class DiskBackend:
    """One partition's database: its committed values, encoded, and the checkpoint; some
    of the values cached in memory (``cache_keys`` per store; 0: all of them)."""

    on_disk = True

    def __init__(self, path: Path, cache_keys: int = 0) -> None:
        rocksdict = _rocksdict()
        self.path = path
        private_dir(path.parent)
        options = rocksdict.Options(raw_mode=True)
        # What RocksDB itself holds in memory, bounded per process, not per partition: its
        # defaults (a 64 MiB memtable, two of them, and an 8 MiB block cache per database)
        # would make 12 partitions up to 1.6 GiB. A commit writes kilobytes.
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)  # a new run's first read misses without a block read
        table.set_block_cache(_block_cache(rocksdict))
        options.set_block_based_table_factory(table)
        self._db = rocksdict.Rdict(str(path), options)
        self._write_options = rocksdict.WriteOptions()  # the WAL on: a SIGKILL loses nothing
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        self._pending = 0
        self._rocksdict = rocksdict
        self._limit = cache_keys
        #: Per store prefix: encoded values in memory (all of them when ``_limit`` is 0).
        self._cache: dict[bytes, dict[str, bytes]] = {}
        self._counts: dict[str, int] = {}  # each store's keys, as the checkpoint says
        self._offset: int | None = None

    @classmethod
    def open(cls, folder: Path, name: str, cache_keys: int) -> DiskBackend | None:
        """The partition's database, or None when it cannot be opened (another process of
        this node holds it, or it is damaged: the partition then restores from Kafka)."""
        try:
            return cls(folder / name, cache_keys)
        except StateDirError:
            raise
        except Exception as exc:  # rocksdict raises plain exceptions (a lock, corruption)
            log.warning("persistent state cannot be opened; restoring from the changelog",
                        extra={"path": str(folder / name), "error": repr(exc)})
            return None

    def checkpoint(self) -> int | None:
        """The offset the database holds everything before, when it may be trusted (then
        also the backend's :attr:`offset`, and every value loaded when all stay in memory)."""
        raw = self._db.get(CHECKPOINT)
        if raw is None:
            return None
        saved = orjson.loads(raw)
        if time.time() - float(saved["at"]) > MAX_AGE_S:
            log.info("persistent state is too old to trust; restoring from the changelog",
                     extra={"path": str(self.path), "age_s": round(time.time() - saved["at"])})
            return None
        self._counts = saved.get("counts", {})
        self._offset = int(saved["offset"])
        if self._limit == 0:
            for key, value in self._db.items():
                if key != CHECKPOINT:
                    head, _, rest = key.partition(b"/")
                    self._cached(head + b"/")[rest.decode()] = value
        return self._offset

    # -- the backend -------------------------------------------------------------------

    @property
    def offset(self) -> int | None:
        return self._offset

    def _cached(self, prefix: bytes) -> dict[str, bytes]:
        found = self._cache.get(prefix)
        if found is None:
            found = self._cache[prefix] = {}
        return found

    def get(self, prefix: bytes, key: str) -> bytes | None:
        cache = self._cached(prefix)
        value = cache.get(key)
        if value is not None or self._limit == 0:
            return value
        if self._pending:  # (records read back are in the batch, not the database yet)
            self._write()
        found: bytes | None = self._db.get(prefix + key.encode())
        if found is not None:
            cache[key] = found
            self._trim(cache)
        return found

    def scan(self, prefix: bytes) -> Iterator[tuple[str, bytes]]:
        """Every committed key and value of the store, in key order."""
        if self._pending:
            self._write()
        start = len(prefix)
        for key, value in self._db.items(from_key=prefix):
            if not key.startswith(prefix):
                return
            yield key[start:].decode(), value

    def keys_after(self, prefix: bytes, after: str | None, limit: int) -> list[str]:
        if self._pending:
            self._write()
        start = prefix if after is None else prefix + after.encode() + b"\x00"  # (just after)
        found: list[str] = []
        for raw in self._db.keys(from_key=start):
            if not raw.startswith(prefix) or len(found) >= limit:
                break
            found.append(raw[len(prefix):].decode())
        return found

    def count(self, prefix: bytes, fresh: bool = False) -> int:
        """The store's keys: as the checkpoint says, else (or ``fresh``) counted, keys only."""
        saved = None if fresh else self._counts.get(prefix.decode()[:-1])
        if saved is not None:
            return int(saved)
        if self._pending:
            self._write()
        counted = 0
        for raw in self._db.keys(from_key=prefix):
            if not raw.startswith(prefix):
                break
            counted += 1
        return counted

    def write(self, changes: Mapping[bytes, StoreChanges], offset: int | None,
              counts: Mapping[bytes, int]) -> None:
        """A committed transaction's changes, with the checkpoint, in one write."""
        for prefix, changed in changes.items():
            cache = self._cached(prefix)
            for key, raw in changed.items():
                if raw is None:
                    self._batch.delete(prefix + key.encode())
                    cache.pop(key, None)
                else:
                    self._batch.put(prefix + key.encode(), raw)
                    cache[key] = raw
            self._trim(cache)
        if offset is None:
            self._write()
        else:
            self.mark(offset, counts)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One changelog record read back (a tombstone deletes)."""
        head, _, rest = key.partition(b"/")
        cache = self._cached(head + b"/")
        if value is None:
            self._batch.delete(key)
            cache.pop(rest.decode(), None)
        else:
            self._batch.put(key, value)
            if self._limit == 0:
                cache[rest.decode()] = value
            else:  # (read from the database when needed: a restore reads millions)
                cache.pop(rest.decode(), None)
        self._pending += 1
        if self._pending >= WRITE_EVERY:
            self._write()

    def mark(self, offset: int, counts: Mapping[bytes, int]) -> None:
        """The records written reach ``offset``: the checkpoint (with each store's key
        count), written with what is buffered."""
        self._offset = offset
        self._counts = {prefix.decode()[:-1]: n for prefix, n in counts.items()}
        saved = {"offset": offset, "at": time.time(), "counts": self._counts}
        self._batch.put(CHECKPOINT, orjson.dumps(saved))
        self._write()

    def _write(self) -> None:
        self._db.write(self._batch, self._write_options)
        self._batch = self._rocksdict.WriteBatch(raw_mode=True)
        self._pending = 0

    def _trim(self, cache: dict[str, bytes]) -> None:
        """Down to :data:`TRIM_TO` of the limit when over it, the oldest first (every value
        here is the database's: nothing is lost)."""
        limit = self._limit
        if limit and len(cache) > limit:
            for key in list(cache)[:len(cache) - int(limit * TRIM_TO)]:
                del cache[key]

    def close(self) -> None:
        if self._pending:
            self._write()
        self._db.close()

    def destroy(self) -> None:
        """Close and delete it (its checkpoint can no longer be trusted)."""
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
