"""runtime/loop.py: a consumer's coroutine runs on the loop SYMFONIC_EVENT_LOOP names."""

from __future__ import annotations

import asyncio

import pytest

from symfonic_stream.config import EventLoop
from symfonic_stream.runtime import loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.parametrize(("event_loop", "module"), [("uvloop", "uvloop"),
                                                    ("asyncio", "asyncio.unix_events")])
def test_run_drives_the_coroutine_on_the_named_loop(event_loop: EventLoop, module: str) -> None:
    assert loop.run(_loop_module(), event_loop) == module
