"""What one streamed chat completion said (runs/engine/sse.py's ChatStreamAccumulator reads a
stream into it; the Messages API reader, runs/engine/anthropic.py, too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ChatStreamResult", "ToolCall"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    index: int
    id: str | None
    type: str | None
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatStreamResult:
    """What one streamed chat completion said, and whether the stream proves it finished.

    ``complete`` needs exactly one ``[DONE]``, nothing after it, a finish_reason from
    :data:`runs.engine.sse.KNOWN_FINISH_REASONS` and no error. ``truncated`` (finish_reason ``length``) is a
    complete call whose answer was cut off: a wrong answer, not a failed call.
    """

    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    served_model: str | None
    models_seen: tuple[str, ...]
    usage: dict[str, Any] | None
    done_count: int
    events_after_done: int
    event_count: int
    first_token_at: float | None
    ttft_s: float | None
    error: str | None
    complete: bool
    truncated: bool
    incomplete_reason: str | None
