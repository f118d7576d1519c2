"""The event loop a consumer process runs on: ``SYMFONIC_EVENT_LOOP`` (docs/engine.md,
"The event loop"). uvloop by default: the same asyncio interface on libuv, in C, so the
loop's own share of each record (selecting, callbacks, socket reads) costs less."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from symfonic_stream.config import EventLoop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], event_loop: EventLoop) -> T:
    """``asyncio.run(main)`` on the named loop (the settings checked uvloop is installed)."""
    if event_loop == "uvloop":
        import uvloop  # (imported only when chosen: an optional module on some platforms)

        return uvloop.run(main)
    return asyncio.run(main)
