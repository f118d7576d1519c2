"""The persistent store: one partition's changelog, as far as its stores applied it, on disk.

With ``SYMFONIC_STATE_DIR`` set, every changelog record a partition's stores apply (read by
a restore or a tail, or written by one of its own commits) is also written to a RocksDB
database of that partition (rocksdict, the binding Quix Streams uses), and after each
batch of them, in the same atomic write, the offset its stores now hold everything before:
the **checkpoint**. A process that restarts (a deploy, a crash) opens the database, loads it
into fresh stores and restores only the changelog after the checkpoint, as Kafka Streams
does with its local state and checkpoint file.

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

What it saves depends on ``SYMFONIC_STATE_CACHE_KEYS``. At 0, values live in memory while
the partition is owned, as with the in-memory store: the database is loaded into them at
start, and what it saves is the restore, not the memory. Above 0, the values live here and
each store keeps at most that many of them decoded in memory (:mod:`.cached`): state larger
than memory, and a start that loads nothing. The checkpoint then also keeps each store's
key count.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from symfonic_stream.state.cached import DiskValues
from symfonic_stream.state.store import StateStore, restore_record

log = logging.getLogger(__name__)

#: The checkpoint's key: no store key can be it (a store's keys carry ``<name>/``).
CHECKPOINT = b"\x00checkpoint"
#: A database older than this is not trusted (see the module's docstring).
MAX_AGE_S = 12 * 3600.0
#: Records buffered before they are written (without a checkpoint) during a long read.
WRITE_EVERY = 20_000


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


class DiskState:
    """One partition's database: its changelog as applied, and the checkpoint."""

    def __init__(self, path: Path) -> None:
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
        self._views: dict[str, DiskValues[Any]] = {}
        self._counts: dict[str, int] = {}  # each store's keys, as the checkpoint says
        self._write_options = rocksdict.WriteOptions()  # the WAL on: a SIGKILL loses nothing
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        self._pending = 0
        self._rocksdict = rocksdict

    @classmethod
    def open(cls, folder: Path, name: str) -> DiskState | None:
        """The partition's database, or None when it cannot be opened (another process of
        this node holds it, or it is damaged: the partition then restores from Kafka)."""
        try:
            return cls(folder / name)
        except StateDirError:
            raise
        except Exception as exc:  # rocksdict raises plain exceptions (a lock, corruption)
            log.warning("persistent state cannot be opened; restoring from the changelog",
                        extra={"path": str(folder / name), "error": repr(exc)})
            return None

    def checkpoint(self) -> int | None:
        """The offset the database holds everything before, when it may be trusted."""
        raw = self._db.get(CHECKPOINT)
        if raw is None:
            return None
        saved = orjson.loads(raw)
        self._counts = saved.get("counts", {})
        if time.time() - float(saved["at"]) > MAX_AGE_S:
            log.info("persistent state is too old to trust; restoring from the changelog",
                     extra={"path": str(self.path), "age_s": round(time.time() - saved["at"])})
            return None
        return int(saved["offset"])

    def attach(self, stores: Iterable[StateStore[Any]], limit: int) -> None:
        """Values on disk: each store reads its values from here, caching ``limit``."""
        for store in stores:
            store.back_with(self, limit, self._counts.get(store.name))
            assert store.on_disk is not None
            self._views[store.name] = store.on_disk

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every record whose key begins with ``prefix``, in key order."""
        for key, value in self._db.items(from_key=prefix):
            if not key.startswith(prefix):
                return
            yield key, value

    def keys(self, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]:
        """Every key beginning with ``prefix``, in key order (from ``start``, if given)."""
        for key in self._db.keys(from_key=prefix if start is None else start):
            if not key.startswith(prefix):
                return
            yield key

    def count(self, prefix: bytes) -> int:
        return sum(1 for _ in self.keys(prefix))

    def load(self, stores: Iterable[StateStore[Any]]) -> int:
        """Every record into ``stores``; how many."""
        stores = list(stores)
        loaded = 0
        for key, value in self._db.items():
            if key != CHECKPOINT and restore_record(stores, key, value):
                loaded += 1
        return loaded

    def record(self, key: bytes, value: bytes | None) -> None:
        """One changelog record the stores applied (a tombstone deletes)."""
        if value is None:
            self._batch.delete(key)
        else:
            self._batch.put(key, value)
        self._pending += 1
        if self._pending >= WRITE_EVERY:
            self._write()

    def records(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            self.record(key, value)

    def mark(self, offset: int) -> None:
        """The stores hold everything before ``offset``: written with what is buffered (and
        each store's key count, with values on disk)."""
        saved: dict[str, Any] = {"offset": offset, "at": time.time()}
        if self._views:
            if any(view.recount for view in self._views.values()):
                self._write()  # (counted from the database: a checkpoint after it is safe)
            saved["counts"] = {name: view.written() for name, view in self._views.items()}
        self._batch.put(CHECKPOINT, orjson.dumps(saved))
        self._write()

    def _write(self) -> None:
        self._db.write(self._batch, self._write_options)
        self._batch = self._rocksdict.WriteBatch(raw_mode=True)
        self._pending = 0

    def close(self) -> None:
        self._db.close()

    def destroy(self) -> None:
        """Close and delete it (its checkpoint can no longer be trusted)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
