"""Fencing by transactional id, without a producer: one InitProducerId per id.

A process writes through one transactional producer (``kafka/producer.py``), whose id is
that of one of its input partitions (``Topology.transactional_id``; the lowest in the first
transaction the producer writes). A process that dies
mid-transaction leaves that transaction open, and every partition it wrote to is held back
from ``read_committed`` readers until the transaction times out (a minute by default) or
somebody bumps the id's epoch. So whoever is assigned a partition bumps the epoch of the
partition's id first: InitProducerId aborts what that id left open, and answers only once
it is aborted. The dead process's id is one of its partitions', which somebody is
assigned next; a live process's producer is never fenced this way, since only the owner of a
partition fences its id, and a process closes its producer when its partitions are revoked.

A full producer per id (what the engine did before) costs a connection, a metadata round and
a sender task each: 256 of them took 4.4 s (docs/benchmarks.md). Here one client sends
every request, and the ids are fenced concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka.client import CoordinationType
from aiokafka.errors import (
    ConcurrentTransactions,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NoError,
    NotCoordinatorError,
    for_code,
)
from aiokafka.protocol.transaction import InitProducerIdRequest

log = logging.getLogger(__name__)

#: Between two InitProducerId of one id while its coordinator is busy (aborting what the id
#: left open, or loading its partition of ``__transaction_state``).
RETRY_S = 0.02
_BUSY = (ConcurrentTransactions, CoordinatorLoadInProgressError)
_MOVED = (NotCoordinatorError, CoordinatorNotAvailableError)


async def fence_ids(client: Any, ids: Iterable[str], *, transaction_timeout_ms: int,
                    timeout_s: float) -> None:
    """Bump the epoch of every id in ``ids`` (an aiokafka client sends the requests), each
    transaction it left open aborted before this returns; raises the first error, or
    :class:`TimeoutError` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    await asyncio.gather(*(_fence(client, tid, transaction_timeout_ms, deadline)
                           for tid in dict.fromkeys(ids)))


async def _fence(client: Any, transactional_id: str, timeout_ms: int, deadline: float) -> None:
    while True:
        node = await asyncio.wait_for(
            client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id),
            max(0.0, deadline - time.monotonic()))
        response = await asyncio.wait_for(
            client.send(node, InitProducerIdRequest(transactional_id, timeout_ms)),
            max(0.0, deadline - time.monotonic()))
        error = for_code(response.error_code)
        if error is NoError:
            return
        if error in _MOVED:
            await client.force_metadata_update()
        elif error not in _BUSY:
            raise error(f"InitProducerId of {transactional_id!r}")
        if time.monotonic() + RETRY_S > deadline:
            raise TimeoutError(f"fencing {transactional_id!r}: still {error.__name__}")
        await asyncio.sleep(RETRY_S)

