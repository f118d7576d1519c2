"""Tenants that do not trust each other, on the real broker (issue 43, contract §9).

acme's kernel runs ``acme-run-42``: it pauses (interrupt id ``call-9``), continues and ends.
Between its events, globex's kernel writes under the same run id: an event at an index
acme used, an interrupt with acme's interrupt id and globex's own token, a ``done``, and an
event ahead of a hole. Before issue 43 the router made a globex ticket whose answer wrote a
resume for acme's run, and globex's ``done`` closed acme's run.

The four consumers run as processes. What acme's run becomes, on both projections, is the
reference oracle's for acme's events alone (and for the whole stream, with contract §9);
each foreign record is a dead letter ``foreign_tenant`` of each consumer of the raw topic;
acme's reviewer answers its one ticket, globex's answers with its own token are refused,
and the one resume on the topic is acme's, the only one acme's kernel takes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.sdk import Reviewer, Unowned, resume_for
from tests.reference import oracle

from .harness import ConsumerProcess, Record, produce, settings_for, unique_prefix
from .observe import quiesce, read_to_committed_end
from .test_pauses_live import EVENTS_AT, read_after_resumes, read_tickets, records, setup

pytestmark = pytest.mark.slow

RUN = "acme-run-42"
ACME = {"tenant": "acme", "principal": "ana"}
GLOBEX = {"tenant": "globex", "principal": "mallory"}


def _event(index: int, kind: str, scope: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"run_id": RUN, "index": index, "kind": kind, "timestamp": EVENTS_AT + index,
            "session_id": "s", "scope": scope, **fields}


def _ask(index: int, scope: dict[str, Any], token: str) -> dict[str, Any]:
    return _event(index, "ask_user", scope, interrupt={
        "name": "ask_user", "kind": "ask_user", "payload": {"questions": ["Refund?"]},
        "token": token, "tool_call_id": "tool-1", "interrupt_id": "call-9", "run_id": RUN,
        "session_id": "s", "expires_at": 4_102_444_800.0, "resumable": True})


OWNERS = [_event(0, "text_delta", ACME, text="Checking"), _ask(1, ACME, "acme-token"),
          _event(2, "text_delta", ACME, text="Refunded"),
          _event(3, "done", ACME, result={"text": "ok", "duration_ms": 5.0})]
FOREIGN = [_event(1, "text_delta", GLOBEX, text="an index acme used"),
           _ask(2, GLOBEX, "globex-token"),
           _event(3, "done", GLOBEX, result={"text": "taken"}),
           _event(7, "text_delta", GLOBEX, text="ahead of a hole")]
STREAM = [OWNERS[0], OWNERS[1], *FOREIGN, OWNERS[2], OWNERS[3]]


def _lines(events: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(e) for e in events]


def _owner(run_id: str) -> str | Unowned | None:
    return "acme" if run_id == RUN else Unowned.NOT_MINE


async def test_another_tenants_kernel_under_an_owned_run_id_changes_nothing(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    names, rules_path = await setup(prefix, tmp_path, tenant_queues=False)
    rules = {"routing_rules": str(rules_path)}
    typed, chunks = (ConsumerProcess(n, prefix, tmp_path).start() for n in ("typed", "chunks"))
    router = ConsumerProcess("pauses", prefix, tmp_path, **rules).start()
    validator = ConsumerProcess("resumes", prefix, tmp_path, **rules).start()
    projectors = [typed, chunks, router]
    try:
        await asyncio.gather(*(p.wait_ready() for p in [*projectors, validator]))
        await produce(names.agent_events, records(STREAM))
        for name, process in (("typed", typed), ("chunks", chunks), ("pauses", router)):
            await quiesce(names.group(name), names.agent_events, [process])
        outputs = {topic: await read_to_committed_end(
            topic, group=names.group(name), source=names.agent_events, processes=projectors)
            for name, topic in (("typed", names.stream_events), ("chunks", names.stream_chunks))}
        letters = await read_to_committed_end(names.dead_letter, group=names.group("pauses"),
                                              source=names.agent_events, processes=projectors)
        [ticket] = await read_tickets(names.human_queue("acme-desk"), names, [router])
        assert await read_tickets(names.human_queue("globex-questions"), names, [router]) == []
        # acme's reviewer and globex's answer at once, through one SDK reviewer: each
        # verdict is matched to its own request, not to the ticket id they share.
        async with Reviewer("review-ui", settings_for(prefix)) as reviewer:
            globex_named = await reviewer.submit("call-9", "globex-token", {"approved": True},
                                                 "mallory", tenant="globex")
            globex_unnamed = await reviewer.submit("call-9", "globex-token",
                                                   {"approved": True}, "mallory")
            accepted = await reviewer.answer(ticket, {"approved": False}, responder="ana")
            refused = [await reviewer.outcome("call-9", request_id=r)
                       for r in (globex_named, globex_unnamed)]
        [resumes, rejections] = await read_after_resumes(
            names, [validator], names.resumes, names.resume_rejections)
    finally:
        for process in [*projectors, validator]:
            process.stop()

    # What acme's run became, on both projections: the oracle's for acme's events alone,
    # and for the whole stream under contract §9; every record carries acme.
    for projection, topic in (("typed", names.stream_events), ("chunks", names.stream_chunks)):
        got = [orjson.loads(r.value or b"") for r in outputs[topic]]
        alone, _ = oracle.project(_lines(OWNERS), projection)  # type: ignore[arg-type]
        guard = oracle.project_guard(_lines(STREAM), projection)  # type: ignore[arg-type]
        assert got == alone == guard.envelopes, projection
        assert guard.owner(RUN) == "acme"
        assert {_headers(r).get(TENANT_HEADER) for r in outputs[topic]} == {b"acme"}
        assert [line for reason, line in guard.dead_letters if reason == "foreign_tenant"] == [
            3, 4, 5, 6]

    # Each foreign record, whole, is a dead letter of each consumer of the raw topic.
    foreign = sorted((_headers(r)["symfonic-dlq-consumer"].decode(),
                      _headers(r)["symfonic-dlq-reason"].decode(), r.value) for r in letters)
    assert foreign == sorted((consumer, "foreign_tenant", value)
                             for consumer in ("typed", "chunks", "pauses")
                             for value in _lines(FOREIGN))

    # One ticket, acme's; one resume, acme's, the only one acme's kernel takes.
    assert (ticket.tenant, ticket.token) == ("acme", "acme-token")
    assert accepted.accepted and accepted.record["request_id"] is not None
    assert [str(o.reason) for o in refused] == ["unknown_ticket", "bad_token"]
    [resume] = resumes
    body = orjson.loads(resume.value or b"")
    assert (body["run_id"], body["tenant"], body["answer"]) == (RUN, "acme", {"approved": False})
    assert [resume_for(r.value, r.headers, _owner) is not None for r in resumes] == [True]
    assert {orjson.loads(r.value or b"")["tenant"] for r in rejections} == {None}


def _headers(record: Record) -> dict[str, bytes]:
    return {name: value or b"" for name, value in record.headers}
