"""The gateway's client slots (symfonic_stream/gateway/slots.py), per process and per tenant."""

from __future__ import annotations

from symfonic_stream.gateway.slots import Slots


def test_slots_per_process_and_per_tenant() -> None:
    slots = Slots(per_process=3, per_tenant=2)
    assert [slots.take("a"), slots.take("a")] == [None, None]
    refused = slots.take("a")
    assert refused is not None and refused.reason == "too_many_tenant_clients"
    assert slots.take(None) is None  # tokens without a tenant share a count of their own
    refused = slots.take("b")
    assert refused is not None and refused.reason == "too_many_clients"
    slots.give("a")
    assert slots.take("b") is None
    for tenant in ("a", None, "b"):
        slots.give(tenant)
    assert (slots.taken, dict(slots.by_tenant)) == (0, {})
    anyone = Slots(per_process=2, per_tenant=None)  # no tokens: the process's bound only
    assert [anyone.take(None), anyone.take(None)] == [None, None]
    refused = anyone.take(None)
    assert refused is not None and refused.reason == "too_many_clients"
