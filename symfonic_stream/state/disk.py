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
whole. Values live in memory while the partition is owned, as with the in-memory store:
what the disk saves is the restore, not the memory.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from symfonic_stream.state.store import StateStore, restore_record

log = logging.getLogger(__name__)

#: The checkpoint's key: no store key can be it (a store's keys carry ``<name>/``).
CHECKPOINT = b"\x00checkpoint"
#: A database older than this is not trusted (see the module's docstring).
MAX_AGE_S = 12 * 3600.0
#: Records buffered before they are written (without a checkpoint) during a long read.
WRITE_EVERY = 20_000


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


def check_state_dir(folder: Path) -> None:
    """At start, with ``SYMFONIC_STATE_DIR`` set: the binding is there, the folder writable."""
    _rocksdict()
    try:
        folder.mkdir(parents=True, exist_ok=True)
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
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
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
        if time.time() - float(saved["at"]) > MAX_AGE_S:
            log.info("persistent state is too old to trust; restoring from the changelog",
                     extra={"path": str(self.path), "age_s": round(time.time() - saved["at"])})
            return None
        return int(saved["offset"])

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
        """The stores hold everything before ``offset``: written with what is buffered."""
        self._batch.put(CHECKPOINT, orjson.dumps({"offset": offset, "at": time.time()}))
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
