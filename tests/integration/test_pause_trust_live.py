"""Resumes only from those who may answer (issue 17), on the real broker: a hostile review
tool with nothing but write access to resume-requests forges tickets, pre-empts a real
one, and answers tickets whose schemas reach for files, URLs and backtracking patterns."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.consumers.resumes import INTAKE

from .harness import ConsumerProcess, TopicReader, produce, unique_prefix
from .observe import (
    metric_value,
    quiesce,
    wait_consumed,
    wait_until,
)
from .test_pauses_live import pause, read_after_resumes, records, setup

pytestmark = pytest.mark.slow

TICKET = [("symfonic-record-type", b"ticket")]


def forged_ticket(ticket_id: str, run_id: str) -> bytes:
    """A registration as the router would write it, with the attacker's own token."""
    return orjson.dumps({
        "ticket_id": ticket_id, "queue": "acme-desk", "kind": "ask_user", "name": "ask_user",
        "questions": [], "payload": {}, "token": "forged", "run_id": run_id,
        "root_run_id": None, "session_id": None, "thread_id": None, "tool_call_id": None,
        "tenant": "acme", "principal": None, "expires_at": 4_102_444_800.0,
        "resumable": True, "routed_at": 1.0, "source": "x/0/0",
    })


def answer(ticket_id: str, token: str, value: Any, responder: str) -> bytes:
    return orjson.dumps({"ticket_id": ticket_id, "token": token, "answer": value,
                         "responder": responder})


async def test_forged_hijacking_and_hostile_schema_answers_yield_no_resume(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=False)
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "TOP-SECRET-4711"}')
    connections: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    trap = await asyncio.start_server(count, "127.0.0.1", 0)
    port = trap.sockets[0].getsockname()[1]
    router = ConsumerProcess("pauses", prefix, tmp_path, routing_rules=str(rules_path)).start()
    validator = ConsumerProcess("resumes", prefix, tmp_path).start()
    intake_group, group = names.group(INTAKE), names.group("resumes")
    try:
        await asyncio.gather(router.wait_ready(), validator.wait_ready())
        # 1. Forged registrations, the one for the victim's interrupt before the router's.
        await produce(names.resume_requests, [
            (b"victim-i0", forged_ticket("victim-i0", "victim"), TICKET),
            (b"ghost", forged_ticket("ghost", "victim"), TICKET),
        ])
        await wait_consumed(intake_group, names.resume_requests)
        await wait_consumed(group, names.pause_registrations)
        # 2. The kernel pauses: the real ticket, and three with hostile response schemas.
        await produce(names.agent_events, records([
            pause("victim", 0, interrupt_id="victim-i0"),
            pause("fileref", 0, payload={"response_schema": {"$ref": secret.as_uri()}}),
            pause("httpref", 0, payload={
                "response_schema": {"$ref": f"http://127.0.0.1:{port}/schema.json"}}),
            pause("slow", 0, payload={"response_schema": {"type": "string",
                                                          "pattern": "^(a+)+$"}}),
        ]))
        await quiesce(names.group("pauses"), names.agent_events, [router])
        # 3. The attacker answers with its own token, then the real reviewer with the real one.
        await produce(names.resume_requests, [
            (b"victim-i0", answer("victim-i0", "forged", "pwned", "attacker"), []),
            (None, answer("ghost", "forged", "pwned", "attacker-ghost"), TICKET),
            (b"victim-i0", answer("victim-i0", "token-of-victim-i0", "real", "reviewer"), []),
            (b"fileref-i0", answer("fileref-i0", "token-of-fileref", "x", "file"), []),
            (b"httpref-i0", answer("httpref-i0", "token-of-httpref", "x", "http"), []),
            (b"slow-i0", answer("slow-i0", "token-of-slow", "a" * 40 + "!", "slow"), []),
        ])
        resumes, rejections = await read_after_resumes(
            names, [validator], names.resumes, names.resume_rejections
        )
    finally:
        trap.close()
        router.stop()
        validator.stop()
    [resume] = [orjson.loads(r.value or b"") for r in resumes]
    assert (resume["run_id"], resume["answer"], resume["responder"]) == (
        "victim", "real", "reviewer"
    ), validator.log()
    refused = [orjson.loads(r.value or b"") for r in rejections]
    by_responder = {r["responder"]: r["reason"] for r in refused if r["responder"]}
    assert by_responder == {
        "attacker": "bad_token",
        "attacker-ghost": "unknown_ticket",
        "file": "invalid_answer",
        "http": "invalid_answer",
        "slow": "invalid_answer",
    }
    # The forged registrations were answers to the validator (malformed ones), nothing more.
    forged = sorted((r["ticket_id"], r["reason"]) for r in refused if r["responder"] is None)
    assert forged == [("ghost", "invalid_answer"), ("victim-i0", "invalid_answer")]
    assert not any("TOP-SECRET" in r["detail"] for r in refused)
    assert connections == [], "the validator fetched a schema over HTTP"


#: The ticket's lifetime and the grace after it, both short so that forgetting comes soon.
#: The lifetime starts when both consumers are ready; it only has to outlast routing,
#: registering and checking one answer (a second or two on a loaded machine).
LIFETIME_S, GRACE_S = 12.0, 1.0


async def test_an_answered_ticket_is_not_answered_again_after_everyone_forgot_it(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=False)
    short = {"closed_run_grace_s": str(GRACE_S), "ticket_max_lifetime_s": str(LIFETIME_S)}
    # (The router keeps a run as long as the projectors' guard would, which waits for a
    # pause at most 24 idle timeouts: a short idle timeout keeps that within the lifetime.)
    router = ConsumerProcess("pauses", prefix, tmp_path, routing_rules=str(rules_path),
                             run_idle_timeout_s="0.5", **short).start()
    validator = ConsumerProcess("resumes", prefix, tmp_path, **short).start()
    try:
        await asyncio.gather(router.wait_ready(), validator.wait_ready())
        # The pause happens now, both consumers ready: its ticket lives LIFETIME_S from here.
        event = {**pause("once", 0, interrupt_id="once-i0"), "timestamp": time.time()}
        event["interrupt"]["expires_at"] = 1.79e308  # the kernel's: never; capped
        await produce(names.agent_events, records([event]))

        async def held(process: ConsumerProcess, n: int) -> bool:
            return await metric_value(process, "symfonic_stream_active_runs") == n

        await wait_until(lambda: held(validator, 1), "the ticket is registered")
        await produce(names.resume_requests, [
            (b"once-i0", answer("once-i0", "token-of-once-i0", "first", "first"), [])])
        async with TopicReader(names.resumes) as accepted:
            [first] = await accepted.until(1, within=60)
        assert orjson.loads(first.value or b"")["answered_at"] < event["timestamp"] + LIFETIME_S
        # Past the capped expiry plus the grace, both forgot it ...
        await wait_until(lambda: held(validator, 0), "the validator forgets the ticket")
        await wait_until(lambda: held(router, 0), "the router forgets the run")
        # ... and the kernel sends the same event again, and the reviewer answers again.
        await produce(names.agent_events, records([event]))
        await wait_until(lambda: held(validator, 1), "the re-sent ticket is registered")
        await produce(names.resume_requests, [
            (b"once-i0", answer("once-i0", "token-of-once-i0", "second", "second"), [])])
        resumes, rejections = await read_after_resumes(
            names, [validator], names.resumes, names.resume_rejections
        )
    finally:
        router.stop()
        validator.stop()
    assert [orjson.loads(r.value or b"")["answer"] for r in resumes] == ["first"]
    assert [(orjson.loads(r.value or b"")["responder"], orjson.loads(r.value or b"")["reason"])
            for r in rejections] == [("second", "expired")]
