"""What a viewer that falls behind gets: its pending messages coalesced, never dropped
unsaid (pure: no I/O). docs/gateway.md ("A viewer that falls behind") has the policy.

The agent runtime buffers a run's events under a policy its plan declares (the seeds'
``EventAdapter``: a per-run ``capacity``, the ``coalescible`` and ``sheddable`` event types,
terminals always kept); the gateway applies the same one to each viewer. A viewer is **under
pressure** when more than :data:`CAPACITY` live records of its run came while it took its
last write (its client is slower than the run; a burst of the run to a viewer that had
caught up is no pressure). Then, in what waits for it:

* consecutive **coalescible** deltas of one part (text, thinking, a tool call's arguments)
  become one message: the text of each, in order, under the last one's envelope, whose seq
  is the SSE ``id``, so a resume with ``Last-Event-ID`` goes on exactly after what it covers;
* **sheddable** events (a ``usage`` report, which the run's end sums up) are dropped for that
  viewer and counted;
* everything else is sent as it is: terminals (``end``, pauses, ``response_complete``), gaps,
  tool calls and results, what the gateway says of its own (``truncated``).

A message is a unit of one envelope (its seq) and its events: the envelope itself for the
envelope format, its AG-UI events or AI SDK chunks for those. Each format's table below says
which of its events merge (by their type; the part they belong to by ``part``; the text they
add by ``text``) and which are shed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from symfonic_stream.models.event_types import Format

Event = dict[str, Any]

#: Live records waiting for one viewer past which it is under pressure: the agent runtime's
#: default per-run event buffer (its plan's ``max_event_buffer``).
CAPACITY = 256


@dataclass(frozen=True, slots=True)
class Merge:
    """A coalescible event type: the field holding its text, and the field naming the part
    it belongs to (only deltas of one part merge; None: the type alone says it)."""

    text: str
    part: str | None


@dataclass(frozen=True, slots=True)
class Policy:
    """One wire format's policy: what merges, what is shed. ``envelope``: the events are
    envelopes, and what is judged is their ``event`` body (the typed or chunk event)."""

    merges: dict[str, Merge]
    sheddable: frozenset[str]
    envelope: bool = False

    def body(self, event: Event) -> Event | None:
        """The dict the tables judge: the envelope's event (None: an end, a gap), or the
        event itself."""
        if not self.envelope:
            return event
        body = event.get("event")
        return body if type(body) is dict else None

    def name(self, event: Event) -> str | None:
        body = self.body(event)
        if body is None:
            return None
        kind = body.get("type")
        if kind == "CUSTOM" and not self.envelope:  # (AG-UI: a custom event by its name)
            return f"CUSTOM:{body.get('name')}"
        return kind if type(kind) is str else None


_TEXT = Merge("text", None)
#: The policy of each stream's formats: (stream, format) -> policy.
POLICIES: dict[tuple[str, Format], Policy] = {
    ("events", Format.ENVELOPE): Policy(
        {"text_delta": _TEXT, "thinking_delta": _TEXT,
         "tool_call_delta": Merge("args_delta", "tool_call_id")},
        frozenset({"usage"}), envelope=True),
    ("chunks", Format.ENVELOPE): Policy(
        {"text": Merge("content", "name"), "thinking": Merge("content", "name")},
        frozenset(), envelope=True),
    ("events", Format.AG_UI): Policy(
        {"TEXT_MESSAGE_CONTENT": Merge("delta", "messageId"),
         "REASONING_MESSAGE_CONTENT": Merge("delta", "messageId"),
         "TOOL_CALL_ARGS": Merge("delta", "toolCallId")},
        frozenset({"CUSTOM:usage"})),
    ("events", Format.AI_SDK): Policy(
        {"text-delta": Merge("delta", "id"), "reasoning-delta": Merge("delta", "id"),
         "tool-input-delta": Merge("inputTextDelta", "toolCallId")},
        frozenset({"message-metadata"})),
}

#: What no policy may shed: a run's terminals and pauses, in every format (checked at import
#: and by the tests).
NEVER_SHED = frozenset({
    "ask_user", "interrupt", "response_complete", "final",  # typed and chunk pauses, ends
    "RUN_FINISHED", "RUN_ERROR", "CUSTOM:gap", "CUSTOM:truncated",  # AG-UI
    "finish", "finish-step", "error", "tool-approval-request", "data-pause", "data-gap",
    "data-truncated",  # the AI SDK's
})
assert not any(p.sheddable & NEVER_SHED for p in POLICIES.values())


@dataclass(slots=True)
class Unit:
    """One message: the seq of its envelope (its SSE ``id``; None: a message of the
    gateway's own, never merged nor shed), its events, and its encoded bytes (None once
    merged: the format encodes it again)."""

    seq: int | None
    events: list[Event]
    frame: bytes | None = None


@dataclass(slots=True)
class Squeezed:
    units: list[Unit]
    #: Events dropped (sheddable), and messages merged into the one after them.
    shed: int = 0
    merged: int = 0


def squeeze(units: list[Unit], policy: Policy) -> Squeezed:
    """``units`` as a viewer under pressure gets them, in order: sheddable events dropped,
    consecutive deltas of one part merged into the last one's message."""
    out = Squeezed([])
    for unit in units:
        if unit.seq is None:
            out.units.append(unit)
            continue
        events = [e for e in unit.events if policy.name(e) not in policy.sheddable]
        out.shed += len(unit.events) - len(events)
        if not events:
            continue  # (its id is covered by the next message's, or resent on a resume)
        previous = out.units[-1] if out.units else None
        if (previous is not None and previous.seq is not None and len(events) == 1
                and _merges(policy, previous.events[-1], events[0])):
            previous.events[-1] = _merged(policy, previous.events[-1], events[0])
            previous.seq, previous.frame = unit.seq, None
            out.merged += 1
            continue
        if len(events) != len(unit.events):
            unit = Unit(unit.seq, events)
        out.units.append(Unit(unit.seq, list(unit.events), unit.frame))
    return out


def _merges(policy: Policy, earlier: Event, later: Event) -> bool:
    kind = policy.name(later)
    merge = policy.merges.get(kind) if kind is not None else None
    if merge is None or policy.name(earlier) != kind:
        return False
    first, second = policy.body(earlier), policy.body(later)
    assert first is not None and second is not None
    return (type(first.get(merge.text)) is str and type(second.get(merge.text)) is str
            and (merge.part is None or first.get(merge.part) == second.get(merge.part)))


def _merged(policy: Policy, earlier: Event, later: Event) -> Event:
    """``later`` (its seq, its timestamp, its part) with ``earlier``'s text before its own."""
    kind = policy.name(later)
    assert kind is not None
    field = policy.merges[kind].text
    first, second = policy.body(earlier), policy.body(later)
    assert first is not None and second is not None
    body = {**second, field: first[field] + second[field]}
    return {**later, "event": body} if policy.envelope else body

