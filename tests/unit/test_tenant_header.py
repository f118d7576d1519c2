"""A run id is its first event's tenant's (contract §9): every record the projectors write
for the run, events, gaps and ends alike, carries that tenant as the ``symfonic-tenant``
header, and another tenant's events under the id are dead-lettered ``foreign_tenant``,
never numbered into the run and never closing it. The gateway checks a viewer's token
against the header (docs/gateway.md, "Who may read")."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.processors.projector import (
    RUN_CODEC,
    GuardLimits,
    ProjectorProcessor,
    decode_run,
)
from symfonic_stream.projections.declared import projection
from symfonic_stream.tools.offline import project_lines
from tests.unit.helpers import restore_from, write_changes

ACME = ((TENANT_HEADER, b"acme"),)


def _event(index: int, kind: str, scope: dict[str, Any] | None, **fields: Any) -> bytes:
    return orjson.dumps({"run_id": "r", "index": index, "kind": kind, "timestamp": 1.0 + index,
                         "scope": scope, **fields})


def _project(lines: list[bytes], projection: str) -> Collector:
    out = Collector()
    for released in project_lines(lines, projection):  # type: ignore[arg-type]
        out.outputs.extend(released.outputs)
        out.dead_letters.extend(released.dead_letters)
    return out


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_every_output_of_a_run_carries_its_owners_tenant(projection: str) -> None:
    lines = [
        _event(0, "text_delta", {"tenant": "acme", "principal": "p"}, text="hi"),
        _event(2, "done", {"tenant": "acme"}, result=None),  # index 1 never comes: a gap
    ]
    out = _project(lines, projection)
    shapes = [next(k for k in ("event", "gap", "end") if k in orjson.loads(o.value or b""))
              for o in out.outputs]
    assert "gap" in shapes and shapes[-1] == "end"
    assert [o.headers for o in out.outputs] == [ACME] * len(out.outputs)


@pytest.mark.parametrize("projection", ["typed", "chunks"])
@pytest.mark.parametrize("foreign", [{"tenant": "globex"}, {"tenant": None}, None])
def test_another_tenants_events_under_an_owned_run_id_are_dead_lettered(
        projection: str, foreign: dict[str, Any] | None) -> None:
    owner = {"tenant": "acme", "principal": "ana"}
    alone = [_event(0, "text_delta", owner, text="hi"), _event(1, "text_delta", owner, text="yo"),
             _event(2, "done", owner, result={"text": "ok"})]
    mixed = [alone[0],
             _event(1, "done", foreign, result={"text": "taken"}),  # would close the run
             _event(5, "text_delta", foreign, text="x"),  # would wait behind a hole
             alone[1],
             _event(1, "text_delta", foreign, text="dup"),  # a duplicate's index: still foreign
             alone[2]]
    expected, got = _project(alone, projection), _project(mixed, projection)
    assert [(o.value, o.headers) for o in got.outputs] == [
        (o.value, o.headers) for o in expected.outputs]
    assert [(d.reason.value, d.record.offset) for d in got.dead_letters] == [
        ("foreign_tenant", 2), ("foreign_tenant", 3), ("foreign_tenant", 5)]


def test_a_run_whose_first_event_names_no_tenant_is_owned_by_no_tenant() -> None:
    lines = [_event(0, "text_delta", None, text="hi"),
             _event(1, "text_delta", {"tenant": "acme"}, text="mine?"),
             _event(1, "text_delta", {"principal": "p"}, text="yo")]
    out = _project(lines, "typed")
    assert [o.headers for o in out.outputs] == [(), ()]
    assert [d.reason.value for d in out.dead_letters] == ["foreign_tenant"]


def test_the_owner_survives_a_restore_and_a_run_of_the_previous_format_adopts_one() -> None:
    def record(offset: int, value: bytes) -> InputRecord:
        return InputRecord("in", 0, offset, b"r", value)

    first = ProjectorProcessor(projection("typed").project, "out", GuardLimits())
    out = Collector()
    first.process(record(0, _event(0, "text_delta", {"tenant": "acme"}, text="a")), 1.0, out)
    write_changes(first, out)
    state = dict(out.changelog)
    assert decode_run(state[b"run/r"]).tenant == "acme"

    again = ProjectorProcessor(projection("typed").project, "out", GuardLimits())
    restore_from(again, state)
    out = Collector()
    again.process(record(1, _event(1, "text_delta", {"tenant": "globex"}, text="b")), 2.0, out)
    again.process(record(2, _event(1, "text_delta", {"tenant": "acme"}, text="b")), 2.0, out)
    assert [d.reason.value for d in out.dead_letters] == ["foreign_tenant"]
    assert [o.headers for o in out.outputs] == [ACME]

    # A 7-element run record (before owners): its next event's tenant becomes the owner.
    old = orjson.loads(RUN_CODEC.encode(decode_run(state[b"run/r"])))[:7]
    legacy = ProjectorProcessor(projection("typed").project, "out", GuardLimits())
    restore_from(legacy, {b"run/r": orjson.dumps(old)})
    out = Collector()
    legacy.process(record(3, _event(1, "text_delta", {"tenant": "globex"}, text="b")), 2.0, out)
    legacy.process(record(4, _event(2, "text_delta", {"tenant": "acme"}, text="c")), 2.0, out)
    assert [o.headers for o in out.outputs] == [((TENANT_HEADER, b"globex"),)]
    assert [d.reason.value for d in out.dead_letters] == ["foreign_tenant"]
    write_changes(legacy, out)
    assert decode_run(dict(out.changelog)[b"run/r"]).tenant == "globex"
