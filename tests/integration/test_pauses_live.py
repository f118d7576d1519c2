"""The pause router and resume validator on the real broker (contract §7)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.app.topics import required_topics
from symfonic_stream.consumers.resumes import INTAKE
from symfonic_stream.kafka.admin import ensure_topics
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.sdk.reviewer import Reviewer

from .conftest import Record, list_topic_names
from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    produce,
    settings_for,
    unique_prefix,
)
from .observe import (
    metric_value,
    quiesce,
    read_consumed_to_end,
    read_to_committed_end,
    stop_gracefully,
    wait_consumed,
    wait_until,
)

pytestmark = pytest.mark.slow

#: The kernel's clock: now (a ticket lives at most a day after its event's timestamp).
EVENTS_AT = float(int(time.time()))

RULES = """
tenants: [acme, globex]
rules:
  - match: {name: approve_payment}
    queue: payments
  - match: {kind: ask_user, tenant: globex}
    queue: globex-questions
  - match: {tenant: acme}
    queue: acme-desk
"""


async def setup(prefix: str, tmp_path: Path, tenant_queues: bool) -> tuple[TopicNames, Path]:
    """The deployment's topics, queues from :data:`RULES` included; and the rules file."""
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(RULES)
    settings = settings_for(prefix, routing_rules=rules_path, tenant_queues=tenant_queues)
    report = await ensure_topics(settings, required_topics(settings))  # queues from the rules
    assert report.ok, report.mismatches
    return TopicNames(prefix), rules_path


async def read_after_resumes(
    names: TopicNames, validators: Sequence[ConsumerProcess], *topics: str
) -> list[list[Record]]:
    """Each of ``topics``, read to its committed end once both engines of the resumes
    process consumed every committed record of their inputs and ``validators`` stopped
    (their inputs end in commit markers: wait_consumed)."""
    group, source = names.group("resumes"), names.pause_registrations
    await wait_consumed(names.group(INTAKE), names.resume_requests)
    await wait_consumed(group, source)
    await stop_gracefully(*validators)
    return [await read_consumed_to_end(topic, group=group, source=source, processes=validators)
            for topic in topics]


def pause(
    run_id: str,
    index: int,
    *,
    kind: str = "ask_user",
    name: str = "ask_user",
    tenant: str | None = "acme",
    interrupt_id: str | None = None,
    expires_at: float = 4_102_444_800.0,  # 2100
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "index": index,
        "kind": kind,
        "timestamp": EVENTS_AT + index,
        "scope": {"tenant": tenant, "principal": "p"},
        "interrupt": {
            "name": name,
            "kind": kind,
            "payload": payload if payload is not None else {"questions": [{"q": "ok?"}]},
            "token": f"token-of-{interrupt_id or run_id}",
            "tool_call_id": f"call-{index}",
            "interrupt_id": interrupt_id or f"{run_id}-i{index}",
            "run_id": run_id,
            "session_id": "s",
            "expires_at": expires_at,
            "resumable": True,
        },
    }


def text(run_id: str, index: int, tenant: str | None = "acme") -> dict[str, Any]:
    """A text delta of ``tenant``'s run (:func:`pause`'s default tenant: a run's events are
    its owner's, contract §9)."""
    return {"run_id": run_id, "index": index, "kind": "text_delta", "timestamp": 1.0, "text": "x",
            "scope": {"tenant": tenant, "principal": "p"}}


def records(events: list[dict[str, Any]]) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(e["run_id"].encode(), orjson.dumps(e), []) for e in events]


ROUTED = "symfonic_stream_tickets_routed_total"


async def read_tickets(
    topic: str, names: TopicNames, routers: Sequence[ConsumerProcess]
) -> list[Ticket]:
    """Every ticket on ``topic``, read to its committed end once the pause router's group
    has committed all of the raw topic and ``routers`` are stopped or idle (call
    :func:`quiesce` first): a ticket written twice, however late, is read twice."""
    records = await read_to_committed_end(
        topic, group=names.group("pauses"), source=names.agent_events, processes=routers
    )
    return [Ticket.model_validate_json(r.value or b"") for r in records]


async def test_routing_resends_and_a_router_crash_give_exactly_one_ticket_each(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=False)
    env = {"routing_rules": str(rules_path)}
    first = ConsumerProcess("pauses", prefix, tmp_path, name="-first", **env).start()
    second = ConsumerProcess("pauses", prefix, tmp_path, name="-second", **env)
    special = [
        pause("pay", 1, kind="interrupt", name="approve_payment", tenant="globex"),
        pause("gq", 1, tenant="globex"),
        pause("acme-int", 1, kind="interrupt", name="other", tenant="acme"),
        pause("nobody", 1, kind="interrupt", name="other", tenant=None),
        pause("late", 1, expires_at=1.0),
    ]
    bulk = [event for n in range(300) for event in (text(f"bulk-{n}", 0), pause(f"bulk-{n}", 1))]
    routers = [first, second]
    try:
        await first.wait_ready()
        await produce(names.agent_events, records(special))
        feeder = asyncio.create_task(produce(names.agent_events, records(bulk), rate=200))

        async def into_the_bulk() -> bool:
            # Committed tickets (counted at commit): the special ones and 20 of the bulk.
            return await metric_value(first, ROUTED) >= len(special) + 20

        # The crash falls mid-stream: the first router has committed part of the bulk,
        # and the rest is still being sent.
        await wait_until(into_the_bulk, "the first router routes part of the bulk")
        assert not feeder.done(), "the crash must come while the bulk still flows"
        first.kill()
        second.start()
        await feeder
        await produce(names.agent_events, records(special + bulk[:100]))  # a kernel re-send
        await second.wait_ready()
        await quiesce(names.group("pauses"), names.agent_events, [second])
        acme_desk = await read_tickets(names.human_queue("acme-desk"), names, routers)
        payments = await read_tickets(names.human_queue("payments"), names, routers)
        globex = await read_tickets(names.human_queue("globex-questions"), names, routers)
        default = await read_tickets(names.human_queue("default"), names, routers)
        expired = await read_tickets(names.expired_queue, names, routers)
    finally:
        first.stop()
        second.stop()
    logs = first.log() + second.log()
    assert [t.run_id for t in payments] == ["pay"], logs
    assert [t.run_id for t in globex] == ["gq"]
    assert [t.run_id for t in default] == ["nobody"]
    assert [(t.run_id, t.queue) for t in expired] == [("late", "acme-desk")]
    bulk_ids = sorted(t.ticket_id for t in acme_desk if t.run_id.startswith("bulk-"))
    assert bulk_ids == sorted(f"bulk-{n}-i1" for n in range(300)), logs  # none twice, none lost
    assert [t.run_id for t in acme_desk if not t.run_id.startswith("bulk-")] == ["acme-int"]


async def test_per_tenant_queues_and_unroutable(bootstrap_servers: str, tmp_path: Path) -> None:
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=True)
    env = {"routing_rules": str(rules_path), "tenant_queues": "true"}
    router = ConsumerProcess("pauses", prefix, tmp_path, **env).start()
    mixed = [
        pause(f"{tenant}-{n}", 0, tenant=tenant) for n in range(20) for tenant in ("acme", "globex")
    ]
    stranger = pause("initech-1", 0, tenant="initech")  # not in `tenants`: queue made on use
    nobody = pause("nobody-1", 0, tenant=None)  # no tenant: no per-tenant queue to go to
    # Tenants that are not one topic-name part (issue 17): `a.b` would share topics with
    # tenant `a`'s queue `b.<queue>`, `a\n` is no topic name at all.
    hostile = [pause("dotted-1", 0, tenant="a.b"), pause("newline-1", 0, tenant="a\n")]
    initech_queue = names.human_queue("default", "initech")
    assert initech_queue not in await list_topic_names(BOOTSTRAP)
    try:
        await router.wait_ready()
        await produce(names.agent_events, records([*mixed, stranger, nobody, *hostile]))
        # The group committed the whole input: so the transactions that created initech's
        # queue on use and wrote its ticket (and the dead letter) are committed too.
        await quiesce(names.group("pauses"), names.agent_events, [router])
        assert initech_queue in await list_topic_names(BOOTSTRAP), (
            f"{initech_queue} was not made on use\n{router.log()}"
        )
        acme = await read_tickets(names.human_queue("acme-desk", "acme"), names, [router])
        globex = await read_tickets(
            names.human_queue("globex-questions", "globex"), names, [router]
        )
        letters = await read_to_committed_end(
            names.dead_letter, group=names.group("pauses"), source=names.agent_events,
            processes=[router],
        )
        [initech] = await read_tickets(initech_queue, names, [router])
        topics = await list_topic_names(BOOTSTRAP)
    finally:
        router.stop()
    assert not [t for t in topics if t.startswith(names.tenant_queues_prefix("a"))], topics
    assert {t.tenant for t in acme} == {"acme"} and len(acme) == 20
    assert {t.tenant for t in globex} == {"globex"} and len(globex) == 20
    assert (initech.tenant, initech.run_id, initech.queue) == ("initech", "initech-1", "default")
    assert {dict(letter.headers)["symfonic-dlq-reason"] for letter in letters} == {b"unroutable"}
    assert sorted(orjson.loads(letter.value or b"")["run_id"] for letter in letters) == [
        "dotted-1", "newline-1", "nobody-1"
    ]


async def test_answers_are_checked_once_even_across_a_validator_crash(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=False)
    settings = settings_for(prefix)
    schema = {
        "type": "object",
        "required": ["approved"],
        "properties": {"approved": {"type": "boolean"}},
    }
    router = ConsumerProcess("pauses", prefix, tmp_path, routing_rules=str(rules_path)).start()
    validator = ConsumerProcess("resumes", prefix, tmp_path, name="-first").start()
    restarted = ConsumerProcess("resumes", prefix, tmp_path, name="-second")
    try:
        await asyncio.gather(router.wait_ready(), validator.wait_ready())
        await produce(
            names.agent_events,
            records(
                [
                    pause("a", 0, tenant="acme"),
                    pause("b", 0, tenant="acme"),
                    pause("old", 0, tenant="acme", expires_at=1.0),
                    pause(
                        "s",
                        0,
                        kind="interrupt",
                        name="approve_payment",
                        payload={"response_schema": schema},
                    ),
                    pause("twice", 0, tenant="acme"),
                ]
            ),
        )
        # Every ticket routed and registered, then the router stopped.
        await quiesce(names.group("pauses"), names.agent_events, [router])
        desk_tickets = await read_tickets(names.human_queue("acme-desk"), names, [router])
        desk = {t.run_id: t for t in desk_tickets}
        assert sorted(t.run_id for t in desk_tickets) == ["a", "b", "twice"]
        [strict] = await read_tickets(names.human_queue("payments"), names, [router])
        [old] = await read_tickets(names.expired_queue, names, [router])
        async with Reviewer("review-ui", settings) as reviewer:
            accepted = await reviewer.answer(desk["a"], {"ok": True}, responder="pat")
            second = await reviewer.answer(desk["a"], {"ok": False}, responder="sam")
            await reviewer.submit(desk["b"].ticket_id, "token-of-a-i0", "x")
            bad_token = await reviewer.outcome(desk["b"].ticket_id)
            await reviewer.submit("no-such-ticket", "t", "x")
            unknown = await reviewer.outcome("no-such-ticket")
            expired = await reviewer.answer(old, "late")
            invalid = await reviewer.answer(strict, {"approved": "yes"})
            valid = await reviewer.answer(strict, {"approved": True})
            # the validator dies between two answers to one ticket
            first_answer = await reviewer.answer(desk["twice"], "one")
            validator.kill()
            restarted.start()
            await restarted.wait_ready()
            second_answer = await reviewer.answer(desk["twice"], "two", timeout_s=60)
        # a tool that does not key its answer: the intake keys it by its ticket, accepted
        keyless = {"ticket_id": desk["b"].ticket_id, "token": desk["b"].token,
                   "answer": "any key", "responder": "kim"}
        await produce(names.resume_requests, [(None, orjson.dumps(keyless), [])])
        await produce(names.resume_requests, [(b"a-i0", b"{broken", [])])
        [letter], resumes = await read_after_resumes(
            names, [validator, restarted], names.dead_letter, names.resumes
        )
    finally:
        for proc in (router, validator, restarted):
            proc.stop()
    assert accepted.accepted and accepted.record["answer"] == {"ok": True}
    assert accepted.record["run_id"] == "a"
    assert [
        o.reason.value if o.reason else "accepted"
        for o in (second, bad_token, unknown, expired, invalid, valid, first_answer, second_answer)
    ] == [
        "already_answered",
        "bad_token",
        "unknown_ticket",
        "expired",
        "invalid_answer",
        "accepted",
        "accepted",
        "already_answered",
    ]
    assert dict(letter.headers)["symfonic-dlq-consumer"] == INTAKE.encode()
    accepted_runs = sorted(orjson.loads(r.value or b"")["run_id"] for r in resumes)
    assert accepted_runs == ["a", "b", "s", "twice"]
    [via_b] = [orjson.loads(r.value or b"") for r in resumes if r.key == b"b"]
    assert (via_b["answer"], via_b["responder"]) == ("any key", "kim")
    assert [r.key for r in resumes if orjson.loads(r.value or b"")["run_id"] == "a"] == [
        b"a"
    ]
