"""Pure projections: one AgentEvent in, zero or more output bodies out, in order.

A projection returns plain dicts shaped exactly like the pydantic models of
:mod:`symfonic_stream.models.stream_event` (tests validate every output against them): on
the hot path a dict serialises several times faster than a model instance, and the
models stay the single source of the wire format through schemas/ and those tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from symfonic_stream.models.agent_event import AgentEvent

Body = dict[str, Any]
Projection = Callable[[AgentEvent], list[Body]]
