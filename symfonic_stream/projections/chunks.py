"""AgentEvent → StreamChunk (contract §4): the lossy, text-first vocabulary.

No tool call ids, no usage. As in the typed projection, an interrupt is checked first.
"""

from __future__ import annotations

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.projections import Body
from symfonic_stream.projections.encoding import compact_json


def project_chunks(event: AgentEvent) -> list[Body]:
    """At most one chunk for one AgentEvent."""
    if event.interrupt is not None:
        pending = event.interrupt
        return [
            {"type": "interrupt", "content": compact_json(pending.payload), "name": pending.name}
        ]
    kind = event.kind
    if kind == "text_delta":
        return [{"type": "text", "content": event.text, "name": None}] if event.text else []
    if kind == "thinking":
        return [{"type": "thinking", "content": event.text, "name": None}] if event.text else []
    if kind == "done":
        result = event.result
        text = (result.text or "") if result is not None else ""
        return [{"type": "final", "content": text, "name": None}]
    call = event.tool_call
    if call is None:
        return []
    if kind == "tool_call":
        content = compact_json(call.arguments) if call.arguments else ""
        return [{"type": "tool_call", "content": content, "name": call.name}]
    if kind == "tool_result":
        if call.result is not None:
            result = call.result
            content = result if isinstance(result, str) else compact_json(result)
        else:
            content = call.error or ""
        return [{"type": "tool_result", "content": content, "name": call.name}]
    return []
