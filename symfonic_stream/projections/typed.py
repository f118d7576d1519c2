"""AgentEvent → StreamEvents (contract §3), after the kernel's own ``typed_stream``.

Translation, not interpretation: where the kernel reported nothing, nothing is written.
Terminal kinds project to nothing here except ``done``'s usage and response_complete;
how a run ended is the ordering guard's ``end`` record, not an event.
"""

from __future__ import annotations

from symfonic_stream.models.agent_event import AgentEvent, PendingInterrupt, RunResult
from symfonic_stream.projections import Body
from symfonic_stream.projections.encoding import compact_json


def project_typed(event: AgentEvent) -> list[Body]:
    """The typed events of one AgentEvent, in the order the contract fixes."""
    if event.interrupt is None:
        # The hot path: three quarters of a run are text and thinking deltas.
        kind = event.kind
        if kind == "text_delta":
            text = event.text
            return [{"type": "text_delta", "text": text}] if text else []
        if kind == "thinking":
            text = event.text
            return [{"type": "thinking_delta", "text": text}] if text else []
    bodies = _as_typed_events(event)
    if event.kind == "done":
        usage = _usage(event.result)
        if usage is not None:
            bodies.append(usage)
        result = event.result
        bodies.append(
            {
                "type": "response_complete",
                "text": (result.text or "") if result is not None else "",
                "duration_ms": round(result.duration_ms or 0.0, 1) if result is not None else 0.0,
            }
        )
    return bodies


def _as_typed_events(event: AgentEvent) -> list[Body]:
    # The interrupt is checked first, whatever the kind: a pause is what a reviewer must
    # act on, so it wins over the text or tool call the same event may carry.
    if event.interrupt is not None:
        return [_pause(event.kind, event.interrupt)]
    kind = event.kind
    if kind == "text_delta":
        return [{"type": "text_delta", "text": event.text}] if event.text else []
    if kind == "thinking":
        return [{"type": "thinking_delta", "text": event.text}] if event.text else []
    call = event.tool_call
    if call is None:
        return []
    if kind == "tool_call":
        started: list[Body] = [
            {
                "type": "tool_call_start",
                "tool_name": call.name,
                "tool_call_id": call.id,
                # `executing`: the kernel emits this when it dispatches the call.
                "phase": "executing",
            }
        ]
        if call.arguments:
            started.append(
                {
                    "type": "tool_call_delta",
                    "tool_call_id": call.id,
                    "args_delta": compact_json(call.arguments),
                }
            )
        return started
    if kind == "tool_result":
        return [
            {
                "type": "tool_result",
                "tool_call_id": call.id,
                "result": call.result if call.result is not None else (call.error or ""),
            },
            {
                "type": "extension",
                "name": "tool_timing",
                "event_id": call.id,
                "payload": {
                    "tool_call_id": call.id,
                    "tool_name": call.name,
                    "duration_ms": call.duration_ms,
                    "is_error": call.error is not None,
                },
            },
        ]
    return []


def _pause(kind: str, pending: PendingInterrupt) -> Body:
    # ask_user vs interrupt is decided by the AgentEvent's kind, not the interrupt's own.
    if kind == "ask_user":
        head: Body = {"type": "ask_user", "questions": pending.questions}
    else:
        head = {"type": "interrupt", "name": pending.name, "payload": pending.payload}
    return {
        **head,
        "token": pending.token,
        "tool_call_id": pending.tool_call_id,
        "interrupt_id": pending.interrupt_id,
        "run_id": pending.run_id,
        "session_id": pending.session_id,
        "expires_at": pending.expires_at,
        "resumable": pending.resumable,
    }


def _usage(result: RunResult | None) -> Body | None:
    # 0 means "unreported": an all-zero or total-only report is dropped, never published
    # as zeros that look measured.
    if result is None:
        return None
    usage = result.usage
    if not (usage.input_tokens or usage.output_tokens):
        return None
    return {
        "type": "usage",
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }
