"""The projectors carry an event's ``scope.tenant`` onto its output records as a header,
which the gateway checks a viewer's token against (docs/gateway.md, "Who may read")."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.tools.offline import project_lines


def _event(index: int, kind: str, scope: dict[str, Any] | None, **fields: Any) -> bytes:
    return orjson.dumps({"run_id": "r", "index": index, "kind": kind, "timestamp": 1.0,
                         "scope": scope, **fields})


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_each_output_of_an_event_with_a_tenant_carries_it(projection: str) -> None:
    lines = [
        _event(0, "text_delta", {"tenant": "acme", "principal": "p"}, text="hi"),
        _event(1, "text_delta", {"tenant": None, "principal": "p"}, text="yo"),
        _event(2, "done", {"tenant": "acmé"}, result=None),
    ]
    outputs = [o for released in project_lines(lines, projection)  # type: ignore[arg-type]
               for o in released.outputs]
    by_index = [(orjson.loads(o.value or b"")["source_index"], o.headers) for o in outputs]
    assert by_index[0] == (0, ((TENANT_HEADER, b"acme"),))
    assert by_index[1] == (1, ())
    # done: response_complete (typed only), then the end record; both carry the tenant.
    assert {h for i, h in by_index if i == 2} == {((TENANT_HEADER, "acmé".encode()),)}
