"""The raw AgentEvent a kernel publishes to ``<prefix>.agent-events`` (contract §2).

Validation is strict (JSON types, no coercion: ``"3"``, ``3.5`` or ``true`` is not an
index) except that an integer is accepted where a float is due. Unknown fields are ignored
so kernels can add fields before this project knows them; an unknown ``kind`` is valid and
projects to nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

KNOWN_KINDS = frozenset(
    {
        "thinking",
        "text_delta",
        "tool_call",
        "tool_result",
        "done",
        "error",
        "cancelled",
        "ask_user",
        "interrupt",
    }
)
#: Kinds that close a run for good (contract §5). A pause is not here: a paused run continues.
CLOSING_KINDS = frozenset({"done", "error", "cancelled"})
#: The ``type`` label of records in: an event's kind, or one of these (labels stay bounded
#: although kernels may send any kind).
UNKNOWN_KIND_LABEL = "unknown"
INVALID_INPUT_LABEL = "invalid"


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Scope(_Strict):
    tenant: str | None = None
    principal: str | None = None


class ToolCall(_Strict):
    id: str
    name: str
    arguments: dict[str, Any] | None = None
    result: Any = None
    error: str | None = None
    duration_ms: float | None = None


class PendingInterrupt(_Strict):
    """A pause the kernel is waiting on; ``token`` is what the answer must carry."""

    name: str
    kind: Literal["ask_user", "interrupt"]
    payload: dict[str, Any] = Field(default_factory=dict)
    token: str
    tool_call_id: str | None = None
    interrupt_id: str = Field(min_length=1, max_length=256)  # a ticket id: a Kafka key
    run_id: str | None = None
    session_id: str | None = None
    expires_at: float
    resumable: bool = False

    @property
    def questions(self) -> list[Any]:
        """``payload["questions"]``, ``[]`` when absent (AgentEvent checks it is a list)."""
        questions = self.payload.get("questions")
        return questions if questions is not None else []


class TokenUsage(_Strict):
    """Token counts; 0 means *unreported*, never *measured as zero*."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class RunResult(_Strict):
    text: str | None = None
    duration_ms: float | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)


class RunError(_Strict):
    type: str
    message: str


class AgentEvent(_Strict):
    """One kernel event. ``index`` is dense per run: 0, 1, 2, …"""

    run_id: str = Field(min_length=1, max_length=256)
    #: Below 2**63: the guard's next index (index + 1) must still fit a 64-bit integer.
    index: int = Field(ge=0, lt=2**63)
    kind: str
    timestamp: float
    root_run_id: str | None = None
    session_id: str | None = None
    thread_id: str | None = None
    scope: Scope | None = None
    text: str | None = None
    tool_call: ToolCall | None = None
    interrupt: PendingInterrupt | None = None
    result: RunResult | None = None
    error: RunError | None = None

    @field_validator("interrupt")
    @classmethod
    def _questions_are_a_list(
        cls, interrupt: PendingInterrupt | None, info: ValidationInfo
    ) -> PendingInterrupt | None:
        # The typed ask_user event promises `questions` is a list; a payload that says
        # otherwise is a malformed event, not something to silently replace with [].
        # (A field validator, not a model one: it runs only for events with an interrupt.)
        if interrupt is not None and info.data.get("kind") == "ask_user":
            questions = interrupt.payload.get("questions")
            if questions is not None and not isinstance(questions, list):
                raise ValueError("payload.questions must be a list")
        return interrupt

    @property
    def tenant(self) -> str | None:
        return self.scope.tenant if self.scope is not None else None
