"""One JoinGroup per join, however many assignors a consumer lists (aio-libs/aiokafka#1168).

aiokafka 0.14's ``CoordinatorGroupRebalance.perform_group_join`` sends its JoinGroup
*inside* the loop that lists the assignors' protocols: a consumer with two assignors (a
stateful engine: the warm-up assignor, then round robin for members of older versions,
:mod:`symfonic_stream.engine.assignor`) sends two JoinGroups per join, the first with one
protocol, the second with both. The second changes the member's metadata while the group
completes the rebalance the first one joined, so the coordinator starts another ("Updating
metadata for member ... during CompletingRebalance"), and every member's next join begins
with one protocol again. Each scale event cost a second rebalance; two instances starting
together on a broker without ``group.initial.rebalance.delay.ms`` rebalanced each other for
ever (generation 537 a minute later, two typed instances on the 3-node cluster of
tests/integration/test_cluster.py).

:func:`join_once` wraps the method: while it joins, a JoinGroup that does not yet list
every assignor's protocol is not sent (the loop goes on to list the next one), so the only
JoinGroup sent is the last, with every protocol, as the pull request's fix does. Other
requests pass through unchanged, and an aiokafka that sends one JoinGroup already is not
changed by it. ``tests/unit/test_join_group.py`` counts the JoinGroups of one join through
aiokafka's own class.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance
from aiokafka.protocol.group import JoinGroupRequest

_MARK = "_symfonic_join_once"


class _NotSent:
    """What the loop reads of a JoinGroup response it does not act on: no error, so it goes
    on to list the next assignor's protocol (aiokafka reads nothing else of it)."""

    error_code = 0


_NOT_SENT = _NotSent()


def join_once() -> None:
    """Make every group consumer send one JoinGroup per join, listing every protocol."""
    original: Callable[[Any], Awaitable[Any]] = CoordinatorGroupRebalance.perform_group_join
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    async def perform_group_join(self: Any) -> Any:
        protocols = len(self._assignors)
        coordinator = self._coordinator
        send = coordinator._send_req

        async def send_complete(request: Any) -> Any:
            if isinstance(request, JoinGroupRequest) and (
                    len(request._group_protocols) < protocols):
                return _NOT_SENT
            return await send(request)

        coordinator._send_req = send_complete
        try:
            return await original(self)
        finally:
            del coordinator._send_req  # (the class's method again)

    setattr(perform_group_join, _MARK, True)
    CoordinatorGroupRebalance.perform_group_join = perform_group_join
