"""The common chat stream read with fewer Python steps per event (issue 38 item 2).

Almost every event a chat server streams is one ``data: {json}`` line and a blank line, and
almost every chunk is a content (or reasoning) delta of choice 0. The general rules
(runs/engine/sse.py) read such an event in about a dozen Python calls; here

* :func:`plain_values` cuts a run of whole plain events out of a read with C-level ``split`` and
  ``count`` (one UTF-8 decode for the run), and
* :func:`apply_common` reads a chunk into typed structs in one msgspec call and applies it,

each answering "not mine" (None / False, nothing changed) for anything outside that common case,
which then takes the general path. So the general rules stay the one definition: this module
only takes the cases whose outcome it reproduces exactly (a differential test,
tests/runs/test_sse_fast.py, feeds the same streams through both).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import msgspec


class Accumulating(Protocol):
    """What apply_common writes: runs.engine.sse.ChatStreamAccumulator's state."""

    event_count: int
    models_list: list[str]
    usage: dict[str, Any] | None
    content_parts: list[str]
    content_chars: int
    reasoning_parts: list[str]
    reasoning_chars: int
    first_token_at: float | None
    finish_reason: str | None

    def mark_first_token(self) -> None: ...


def plain_values(chunk: bytes, limit: int) -> tuple[list[str], int] | None:
    """The data of every whole event in ``chunk`` and the bytes they took, when each of them is
    a plain event (``data: `` and one line, valid UTF-8) — or None: read them by the general
    rules. The caller guarantees ``chunk`` starts at an event boundary, holds no CR and that no
    ``id`` has been seen (SSEDecoder.feed_plain's fast case); ``limit`` is the longest run
    whose every line and event is under the decoder's caps."""
    done = chunk.rfind(b"\n\n") + 2
    if done < 2:
        return [], 0
    if done > limit:
        return None
    head = chunk if done == len(chunk) else chunk[:done]
    blocks = head.count(b"\n\n")
    # Every LF is part of a block's "\n\n" (no other line, no empty block), and every block
    # starts with "data: " (it follows a "\n\n" or opens the run).
    if head.count(b"\n") != 2 * blocks or not head.startswith(b"data: "):
        return None
    if head.count(b"\n\ndata: ") != blocks - 1:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    values = text.split("\n\n")
    values.pop()  # what follows the last blank line: nothing
    return [value[6:] for value in values], done


# What the common chunk holds, typed: a value of another type fails the decode and the chunk
# takes the general path (which decides what that type means). Unknown keys are ignored there
# as here; a repeated key's last value counts in both.
class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: Any = None


class _Choice(msgspec.Struct, gc=False):
    index: Any = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, gc=False):
    model: str | None = None
    usage: dict[str, Any] | None = None
    choices: list[_Choice] | None = None
    error: Any = None


_CHUNK = msgspec.json.Decoder(_Chunk).decode


def apply_common(acc: Accumulating, data: str) -> bool:
    """Apply one plain event's ``data`` to ``acc`` if it is a common chunk — valid JSON of the
    expected types, no error, no tool-call delta — exactly as ``acc.consume_data`` would; False
    (``acc`` untouched) otherwise. Only called while ``acc`` has seen no [DONE] and no error."""
    try:
        chunk = _CHUNK(data)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return False  # [DONE], malformed JSON, another type: the general path says what it is
    if chunk.error is not None:
        return False
    choices = chunk.choices
    if choices is not None:
        for choice in choices:
            delta = choice.delta
            if delta is not None and delta.tool_calls is not None and choice.index == 0:
                return False
    acc.event_count += 1
    model = chunk.model
    if model and model not in acc.models_list:
        acc.models_list.append(model)
    if chunk.usage is not None:
        acc.usage = chunk.usage
    if choices is None:
        return True
    for choice in choices:
        if choice.index != 0:
            continue
        delta = choice.delta
        if delta is not None:
            content = delta.content
            # reasoning_content and reasoning are aliases: one per delta (sse.py).
            reasoning = delta.reasoning_content or delta.reasoning
            if content:
                acc.content_parts.append(content)
                acc.content_chars += len(content)
            if reasoning:
                acc.reasoning_parts.append(reasoning)
                acc.reasoning_chars += len(reasoning)
            if (content or reasoning) and acc.first_token_at is None:
                acc.mark_first_token()
        if choice.finish_reason is not None:
            acc.finish_reason = choice.finish_reason
    return True


_DECODE = msgspec.json.Decoder().decode


def json_object(data: str) -> Any:
    """``json.loads(data)``, read by msgspec first (2-3x less CPU; exact big integers). Where
    msgspec reads a text its value is json.loads's, types included (a differential test in
    tests/runs/test_engine_hotpath.py); what it refuses goes through ``json.loads`` itself, so
    results and errors are exactly its own (docs/decisions.md)."""
    try:
        return _DECODE(data)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return json.loads(data)
