"""Files of the state directories: read as the shell's ``$(cat f)`` read them, written whole or
not at all, secrets readable by their owner only."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def read(path: Path) -> str:
    """The file's text without its trailing newlines."""
    return path.read_text().rstrip("\n")


def read_or_none(path: Path) -> str | None:
    """The file's text (:func:`read`), or None when it is missing, empty or unreadable."""
    try:
        text = read(path)
    except OSError:
        return None
    return text or None


@contextlib.contextmanager
def private() -> Iterator[None]:
    """Files and directories made meanwhile are their owner's only (umask 077)."""
    before = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(before)


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, mode 600, through a temporary file renamed over it."""
    temporary = path.with_name(path.name + ".tmp")
    with private():
        temporary.write_text(text)
    temporary.chmod(0o600)
    temporary.replace(path)
