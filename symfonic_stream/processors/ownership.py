"""A run id belongs to one tenant (contract §9): what the projectors' guard and the pause
router do with an event whose ``scope.tenant`` is not its run's owner.

Both remember each run's owner, the tenant of the first event of the run they accepted;
this module holds the one decision they share, taken when an event's tenant differs.
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.dead_letter import DeadLetterReason

#: The owner of a run read from state written before runs had owners: not known yet, its
#: next event's tenant becomes it (``false`` in a state record, where a tenant is a string,
#: or null for an owner that named none).
UNKNOWN_OWNER: Final = False
#: A run's owner: a tenant, None (its first event named none), or :data:`UNKNOWN_OWNER`.
Owner = str | None | Literal[False]


class Owned(Protocol):
    """A run's state that names its owner."""

    tenant: Owner


def refuse_foreign(run: Owned, run_id: str, tenant: str | None, record: InputRecord,
                   out: Collector) -> bool:
    """For an event of ``tenant`` under ``run_id`` whose owner is another: True when it is
    refused (dead-lettered ``foreign_tenant``: never numbered, never closing the run, never
    a ticket); False when the run had no known owner and ``tenant`` now owns it (the run's
    state changed: the caller keeps it)."""
    if run.tenant is not UNKNOWN_OWNER:
        out.dead_letter(record, DeadLetterReason.FOREIGN_TENANT,
                        f"run {run_id!r} belongs to another tenant than this event's "
                        "scope.tenant (contract §9)")
        return True
    run.tenant = tenant
    return False
