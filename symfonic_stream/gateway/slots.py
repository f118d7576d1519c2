"""The gateway's client slots: how many requests it answers at once, per process and per
tenant.

A request holds a slot from before it waits for its run until its stream ends (or it is
refused), so a request waiting for a run that never comes costs a slot like a stream does;
a review console's requests hold one too, its stream as long as it is open, a claim or an
answer while it waits for the validator's verdict.
``SYMFONIC_GATEWAY_MAX_CLIENTS`` bounds the process, ``SYMFONIC_GATEWAY_MAX_CLIENTS_PER_
TENANT`` each tenant (the token's ``tenant`` claim; the tokens without one share a slot
count): one tenant's requests, waiting or streaming, cannot take every slot of a process
from the others. Without tokens (``SYMFONIC_GATEWAY_AUTH=none``) no tenant is known and
only the process's bound applies.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class NoSlot:
    """Why a request got no slot: the refusal's metric reason and its detail."""

    reason: str
    detail: str


@dataclass(slots=True)
class Slots:
    """The slots taken, in all and per tenant."""

    per_process: int
    #: None: tenants are not known (no tokens), only ``per_process`` applies.
    per_tenant: int | None
    taken: int = 0
    by_tenant: Counter[str | None] = field(default_factory=Counter)

    def take(self, tenant: str | None) -> NoSlot | None:
        """Take a slot for a request of ``tenant`` (None when refused: why)."""
        if self.taken >= self.per_process:
            return NoSlot("too_many_clients",
                          f"SYMFONIC_GATEWAY_MAX_CLIENTS={self.per_process} reached")
        if self.per_tenant is not None:
            if self.by_tenant[tenant] >= self.per_tenant:
                return NoSlot("too_many_tenant_clients",
                              f"SYMFONIC_GATEWAY_MAX_CLIENTS_PER_TENANT={self.per_tenant} "
                              "reached by this token's tenant")
            self.by_tenant[tenant] += 1
        self.taken += 1
        return None

    def give(self, tenant: str | None) -> None:
        """Give back a slot :meth:`take` gave for ``tenant``."""
        self.taken -= 1
        if self.per_tenant is not None:
            self.by_tenant[tenant] -= 1
            if not self.by_tenant[tenant]:
                del self.by_tenant[tenant]  # (held per tenant only while it has requests)
