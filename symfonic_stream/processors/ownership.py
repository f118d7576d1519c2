"""A run id belongs to one tenant (contract §9): what the projectors' guard and the pause
router do with an event whose ``scope.tenant`` is not its run's owner.

Both remember each run's owner, the tenant of the first event of the run they accepted;
this module holds the one decision they share, taken when an event's tenant differs.
"""

from __future__ import annotations

from typing import Protocol

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.dead_letter import DeadLetterReason


class Owned(Protocol):
    """A run's state that names its owner: its tenant, and whether it is known (False: state
    of a version before owners)."""

    tenant: str | None
    owned: bool


def refuse_foreign(run: Owned, run_id: str, tenant: str | None, record: InputRecord,
                   out: Collector) -> bool:
    """For an event of ``tenant`` under ``run_id`` whose owner is another: True when it is
    refused (dead-lettered ``foreign_tenant``: never numbered, never closing the run, never
    a ticket); False when the run had no known owner and ``tenant`` now owns it (the caller
    writes the run's state again)."""
    if run.owned:
        out.dead_letter(record, DeadLetterReason.FOREIGN_TENANT,
                        f"run {run_id!r} belongs to another tenant than this event's "
                        "scope.tenant (contract §9)")
        return True
    run.tenant, run.owned = tenant, True
    return False
