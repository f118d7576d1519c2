"""The kernel's resume reader takes a resume only when it is its run's owner's (contract §9,
issue 43: a resume record carried no tenant, so a kernel could not tell another tenant's
answer under its run id from its own reviewer's). No broker: the check itself; the reader
on the real broker is tests/integration/test_tenants_live.py."""

from __future__ import annotations

from typing import Any

import orjson

from symfonic_stream.models.headers import OUTCOME_HEADER, TENANT_HEADER
from symfonic_stream.models.pauses import Resume
from symfonic_stream.sdk import Unowned, resume_for

RESUME = {"ticket_id": "call-9", "run_id": "acme-run-42", "tool_call_id": None,
          "interrupt_id": "call-9", "answer": {"approved": True}, "responder": "ana",
          "answered_at": 5.0, "tenant": "acme", "request_id": "r1"}
OWNERS = {"acme-run-42": "acme", "plain-run": None}


def owner(run_id: str) -> str | Unowned | None:
    return OWNERS.get(run_id, Unowned.NOT_MINE)


def _check(resume: dict[str, Any], tenant_header: bytes | None) -> Resume | None:
    headers = [(OUTCOME_HEADER, b"accepted")]
    if tenant_header is not None:
        headers.append((TENANT_HEADER, tenant_header))
    return resume_for(orjson.dumps(resume), headers, owner)


def test_the_owners_resume_is_taken() -> None:
    taken = _check(RESUME, b"acme")
    assert taken is not None and taken.model_dump() == RESUME
    plain = {**RESUME, "run_id": "plain-run", "tenant": None}
    assert _check(plain, None) is not None


def test_another_tenants_resume_under_the_run_id_is_not() -> None:
    assert _check({**RESUME, "tenant": "globex"}, b"globex") is None


def test_a_resume_whose_field_and_header_differ_or_lack_the_tenant_is_not() -> None:
    assert _check(RESUME, b"globex") is None
    assert _check(RESUME, None) is None
    assert _check({**RESUME, "tenant": None}, b"acme") is None
    legacy = {k: v for k, v in RESUME.items() if k not in ("tenant", "request_id")}
    assert _check(legacy, None) is None  # a validator before tenants: no tenant said
    headers = [(TENANT_HEADER, b"acme"), (TENANT_HEADER, b"acme")]
    assert resume_for(orjson.dumps(RESUME), headers, owner) is None


def test_a_run_the_kernel_does_not_know_and_a_record_that_is_no_resume_are_not() -> None:
    assert _check({**RESUME, "run_id": "someone-else"}, b"acme") is None
    assert resume_for(b"not json", [(TENANT_HEADER, b"acme")], owner) is None
    assert resume_for(None, None, owner) is None
