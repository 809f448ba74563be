"""A target that speaks Anthropic's Messages API (issue 37 item 4): the request the engine
builds (OpenAI chat shape, what the ledger stores and the budget reserves against) said in
Anthropic's words, and its event stream read into the same result a chat stream gives.

Request: ``POST {base_url}/messages`` with ``x-api-key`` and ``anthropic-version`` instead of a
bearer token; system messages become ``system``; an assistant's ``tool_calls`` become
``tool_use`` blocks and ``tool`` messages ``tool_result`` blocks (consecutive results in one
user message); tools become ``{name, description, input_schema}``; ``stop`` becomes
``stop_sequences``; parameters the Messages API does not take (``seed``, ``stream_options``,
``n``, penalties…) are left out.

Stream: ``message_start`` names the served model and carries the usage so far (``input_tokens``
fresh, ``cache_creation_input_tokens``, ``cache_read_input_tokens``, ``output_tokens``);
``message_delta`` carries ``stop_reason`` and cumulative counts, which replace the earlier ones
key by key; ``message_stop`` ends the message as ``[DONE]`` ends a chat stream. The usage is
Anthropic-shaped and :mod:`runs.ledger.usage` reads it as such (input excludes both cache buckets).
``stop_reason`` maps to the chat finish reasons: ``end_turn``/``stop_sequence`` → ``stop``,
``max_tokens`` → ``length`` (a cut answer), ``tool_use`` → ``tool_calls``; any other value is
kept, and an unknown finish reason leaves the call incomplete.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from runs.engine.chat_result import ChatStreamResult
from runs.engine.sse import ChatStreamAccumulator
from runs.models import WireApi

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicStreamAccumulator",
    "messages_request",
    "stream_reader",
    "wire_request",
]

ANTHROPIC_VERSION = "2023-06-01"
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
# What the Messages API takes besides model, messages, system, max_tokens, tools, stream.
PASSED = ("temperature", "top_p", "top_k", "metadata", "thinking", "service_tier")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (ValueError, RecursionError):
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": arguments,
    }


def _messages(chat: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in chat:
        role = message.get("role")
        if role == "system":
            system.append(_text(message.get("content")))
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id"),
                "content": _text(message.get("content")),
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
            continue
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            text = _text(message.get("content"))
            blocks = [{"type": "text", "text": text}] if text else []
            out.append({"role": "assistant", "content": blocks + [_tool_use(c) for c in calls]})
            continue
        out.append({"role": role, "content": _text(message.get("content"))})
    return "\n\n".join(s for s in system if s), out


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice in (None, "auto"):
        return None
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if isinstance(choice, dict):
        return {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    return None


def messages_request(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages API request for a chat request the engine built (always streamed)."""
    system, messages = _messages(body.get("messages") or [])
    out: dict[str, Any] = {"model": body["model"], "max_tokens": body.get("max_tokens")}
    if system:
        out["system"] = system
    out["messages"] = messages
    for key in PASSED:
        if key in body:
            out[key] = body[key]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    tools = body.get("tools") or []
    if tools:
        out["tools"] = [
            {
                "name": (t.get("function") or {}).get("name"),
                "description": (t.get("function") or {}).get("description", ""),
                "input_schema": (t.get("function") or {}).get("parameters")
                or {"type": "object", "properties": {}},
            }
            for t in tools
        ]
        if (choice := _tool_choice(body.get("tool_choice"))) is not None:
            out["tool_choice"] = choice
    out["stream"] = True
    return out


def wire_request(
    api: str, base_url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[str, dict[str, Any], dict[str, str], type[ChatStreamAccumulator]]:
    """(url, JSON body, headers, stream reader class) of a call to a target speaking ``api``."""
    base = base_url.rstrip("/")
    if api != WireApi.ANTHROPIC:
        return base + "/chat/completions", body, headers, stream_reader(api)
    wire_headers = {k: v for k, v in headers.items() if k != "authorization"}
    key = headers.get("authorization", "").removeprefix("Bearer ")
    if key:
        wire_headers["x-api-key"] = key
    wire_headers["anthropic-version"] = ANTHROPIC_VERSION
    return base + "/messages", messages_request(body), wire_headers, stream_reader(api)


def stream_reader(api: str) -> type[ChatStreamAccumulator]:
    """The reader of a stream from a target speaking ``api``."""
    return AnthropicStreamAccumulator if api == WireApi.ANTHROPIC else ChatStreamAccumulator


class AnthropicStreamAccumulator(ChatStreamAccumulator):
    """Consumes a Messages API stream into a :class:`ChatStreamResult`. ``message_stop`` counts
    as the chat stream's ``[DONE]`` (one, nothing after it), so completeness is the same rule."""

    COMMON_CHUNKS = False  # Messages API events are not chat chunks

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._block_tools: dict[int, int] = {}  # content block index → tool call index

    def _settled(self, data: str) -> bool:
        if self.done_count:
            self.events_after_done += 1
            return True
        return self.error is not None

    def _apply_chunk(self, event: dict[str, Any], number: int) -> None:
        """One Messages API event, parsed and checked by the chat accumulator's own
        ``consume_data`` (JSON, an object, nothing after the end or an error)."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self._usage(message.get("usage"), number)
            model = message.get("model")
            if isinstance(model, str) and model and model not in self.models_list:
                self.models_list.append(model)
        elif kind == "content_block_start":
            self._block_start(event, number)
        elif kind == "content_block_delta":
            self._block_delta(event, number)
        elif kind == "message_delta":
            self._usage(event.get("usage"), number)
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason is not None:
                self.finish_reason = STOP_REASONS.get(str(reason), str(reason))
        elif kind == "message_stop":
            self.done_count += 1
        elif kind == "error":
            self._fail(f"error object in event #{number}: {json.dumps(event.get('error'))[:200]}")
        # ping, content_block_stop and event types added later carry nothing we read.

    def _usage(self, usage: Any, number: int) -> None:
        if usage is None:
            return
        if not isinstance(usage, dict):
            self._fail(f"event #{number}: usage is not an object")
            return
        # Counts are cumulative: a later event's value replaces an earlier one, key by key.
        self.usage = {**(self.usage or {}), **{k: v for k, v in usage.items() if v is not None}}

    def _block_start(self, event: dict[str, Any], number: int) -> None:
        block = event.get("content_block") or {}
        index = event.get("index")
        if block.get("type") == "tool_use" and isinstance(index, int):
            position = len(self._block_tools)
            self._block_tools[index] = position
            head = {"index": position, "id": block.get("id"), "type": "function"}
            head["function"] = {"name": block.get("name") or ""}
            self._apply_delta({"tool_calls": [head]}, number)
        elif block.get("type") == "text" and block.get("text"):
            self._apply_delta({"content": block["text"]}, number)

    def _block_delta(self, event: dict[str, Any], number: int) -> None:
        delta = event.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            self._apply_delta({"content": delta.get("text")}, number)
        elif kind == "thinking_delta":
            self._apply_delta({"reasoning": delta.get("thinking")}, number)
        elif kind == "input_json_delta":
            position = self._block_tools.get(event.get("index"))  # type: ignore[arg-type]
            if position is None:
                self._fail(f"event #{number}: input_json_delta outside a tool_use block")
                return
            arguments = {"index": position, "function": {"arguments": delta.get("partial_json")}}
            self._apply_delta({"tool_calls": [arguments]}, number)

    def result(self) -> ChatStreamResult:
        result = super().result()
        reason = result.incomplete_reason
        if reason is not None:
            reason = reason.replace("[DONE]", "message_stop")
        return dataclasses.replace(result, incomplete_reason=reason)
