"""The AI SDK's chat requests: ``POST {SYMFONIC_GATEWAY_CHAT_API}`` (``/api/chat``, where
``useChat``'s ``DefaultChatTransport`` sends) answers the run's pause (docs/gateway.md,
"AI SDK").

The body is what the transport sends: ``{"id": <the chat id: the run id>, "messages": [...],
"trigger", "messageId"}`` (or ``"message"``, the last one alone), plus ``"answers"``, the
request's own ``body`` option. What it answers, in the last message (an assistant's): each
tool part whose approval the client gave (``addToolApprovalResponse``: state
``approval-responded``), as ``{"approved": <bool>}`` and its ``reason`` when given; and each
``{"interruptId", "answer"}`` of ``answers`` (a pause that is no tool approval, shown as a
``data-pause`` part), as it is. They answer the run's latest pause they name, every
interrupt of it; approvals of earlier pauses in the message are its history. Each answer goes
through the validator like every other (:func:`.resume.answer_all`, the AG-UI resume's path,
with its rights): the response is ``start``, one transient ``data-verdict`` per interrupt,
then the run's continuation to where it next waits or ends; a refusal is one ``error`` chunk
whose ``errorText`` begins with the code (the validator's reason), and nothing is written
when a check of the gateway's fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from symfonic_stream.gateway import aisdk
from symfonic_stream.gateway.answers import ReviewSender
from symfonic_stream.gateway.auth import Grant
from symfonic_stream.gateway.resume import (
    MAX_INPUT_BYTES,
    Pause,
    ResumeError,
    answer_all,
    pauses_of,
)
from symfonic_stream.gateway.reviews import ReviewStore
from symfonic_stream.gateway.runs import Run
from symfonic_stream.gateway.sse import BadRequest
from symfonic_stream.gateway.tail import TopicTail
from symfonic_stream.gateway.viewer import Viewing, aisdk_messages, records
from symfonic_stream.models.event_types import (
    DUPLICATE_INTERRUPT,
    NOTHING_TO_ANSWER,
    RESUME_INCOMPLETE,
    UNKNOWN_INTERRUPT,
    VERDICT,
)
from symfonic_stream.models.pauses import MAX_TICKET_ID


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Approval(_Loose):
    """A tool part's approval, as the client answered it."""

    id: str = Field(min_length=1, max_length=MAX_TICKET_ID)
    approved: StrictBool
    reason: str | None = None


class UIMessage(_Loose):
    role: str
    parts: list[dict[str, Any]]


class Answer(_Loose):
    """An answer to a pause that is no tool approval (``answers`` in the body)."""

    interrupt_id: str = Field(alias="interruptId", min_length=1, max_length=MAX_TICKET_ID)
    answer: Any


class ChatRequest(_Loose):
    id: str = Field(min_length=1)
    messages: list[UIMessage] | None = None
    message: UIMessage | None = None
    answers: list[Answer] = []

    def approvals(self) -> list[Approval]:
        """The approvals the client gave in its last message (an assistant's)."""
        last = self.message or (self.messages[-1] if self.messages else None)
        if last is None or last.role != "assistant":
            return []
        found = []
        for index, part in enumerate(last.parts):
            kind = part.get("type")
            if not (type(kind) is str and (kind.startswith("tool-") or kind == "dynamic-tool")
                    and part.get("state") == "approval-responded"):
                continue
            try:
                found.append(Approval.model_validate(part.get("approval")))
            except ValidationError as exc:
                raise BadRequest(f"not an AI SDK chat request: the last message's part {index}"
                                 f": approval: {_first(exc)}") from None
        return found


def _first(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"


def parse_request(body: bytes) -> ChatRequest:
    """The body as an AI SDK chat request (its approvals checked too), or BadRequest."""
    if len(body) > MAX_INPUT_BYTES:
        raise BadRequest(f"a chat request is at most {MAX_INPUT_BYTES} bytes")
    try:
        request = ChatRequest.model_validate_json(body)
    except ValidationError as exc:
        raise BadRequest(f"not an AI SDK chat request: {_first(exc)}") from None
    request.approvals()
    return request


def approval_answer(approval: Approval) -> dict[str, Any]:
    """What a tool approval answers: ``{"approved"}``, and the client's ``reason``."""
    return {"approved": approval.approved,
            **({"reason": approval.reason} if approval.reason is not None else {})}


def chat_answers(pauses: list[Pause], request: ChatRequest) -> tuple[Pause, dict[str, Any]]:
    """The pause ``request`` answers and each of its interrupts' answer, or ResumeError."""
    given: dict[str, Any] = {}
    for entry in request.answers:
        if entry.interrupt_id in given:
            raise ResumeError(DUPLICATE_INTERRUPT.name, "an interrupt is answered twice")
        given[entry.interrupt_id] = entry.answer
    approvals = {a.id: approval_answer(a) for a in request.approvals()}
    if set(given) & set(approvals):
        raise ResumeError(DUPLICATE_INTERRUPT.name, "an interrupt is answered twice (an "
                          "approval and an answer)")
    ids = set(given) | set(approvals)
    if not ids:
        raise ResumeError(NOTHING_TO_ANSWER.name, NOTHING_TO_ANSWER.means)
    pause = next((p for p in reversed(pauses) if ids & set(p.interrupt_ids)), None)
    unknown = sorted(set(given) - set(pause.interrupt_ids if pause else ()))
    if pause is None or unknown:
        raise ResumeError(UNKNOWN_INTERRUPT.name,
                          f"no open interrupt {(unknown or sorted(ids))[0]!r} in this run")
    answers = {i: a for i, a in (approvals | given).items() if i in pause.interrupt_ids}
    missing = sorted(set(pause.interrupt_ids) - set(answers))
    if missing:
        raise ResumeError(RESUME_INCOMPLETE.name,
                          f"a request answers every open interrupt: {missing[0]!r} is missing")
    return pause, answers


async def answered(tail: TopicTail, run: Run, request: ChatRequest, answerer: Grant,
                   reviews: ReviewStore, sender: ReviewSender, wait_s: float,
                   viewing: Viewing) -> AsyncIterator[bytes]:
    """The response to a chat request: its verdicts, then the continuation of the client's
    message (or an ``error``). ``answerer``: the token's grant, with ``reviews:answer`` and
    a subject."""
    try:
        pause, answers = chat_answers(await pauses_of(tail, run), request)
        verdicts = await answer_all(run, pause, answers, answerer, reviews, sender, wait_s)
    except ResumeError as refused:
        viewing.run_ended = True
        yield aisdk.sse([aisdk.start(None), aisdk.error(refused.code, refused.message)],
                        None) + aisdk.DONE
        return
    told = [{"type": VERDICT.ai_sdk, "transient": True,
             "data": {"interruptId": i, "outcome": v.outcome, "replayed": v.replayed}}
            for i, v in verdicts.items()]
    continuation = aisdk_messages(records(tail, run, -1, viewing), run, pause.seq, viewing,
                                  message_id=None, told=told)
    async with contextlib.aclosing(continuation):
        async for part in continuation:
            yield part
