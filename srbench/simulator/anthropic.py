"""The simulator's Anthropic Messages API listener (issue 37 item 4): ``POST /v1/messages``,
the same models, answers, prefix cache and timings as ``/v1/chat/completions``, in Anthropic's
shape.

Request: ``model``, ``max_tokens``, ``system`` (a string or text blocks), ``messages`` whose
content is a string or blocks (``text``, ``tool_use``, ``tool_result``), ``tools`` (``name``,
``description``, ``input_schema``), ``tool_choice``, ``stream``. It is read into the chat
request the generator already understands, so a question gets the same answer by either route.

Stream (``stream: true``): ``message_start`` (the message with its usage: ``input_tokens``
fresh, ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` outside it,
``output_tokens`` 1), then per content block ``content_block_start``, its deltas
(``thinking_delta``, ``text_delta``, ``input_json_delta``) and ``content_block_stop``, then
``message_delta`` (``stop_reason`` and the cumulative ``output_tokens``) and ``message_stop``.
Every event carries its ``event:`` name. The prefix cache's writes are reported here whatever
the model's ``usage_style``: Anthropic reports them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from srbench.canonical import json_text
from srbench.simulator.arrival import arrival
from srbench.simulator.generation import (
    Completion,
    ResponseIdentity,
    SSEBody,
    total_generation_seconds,
)
from srbench.simulator.streaming import SSEResponse
from srbench.simulator.tokens import split_into_pieces

__all__ = [
    "STOP_REASONS",
    "anthropic_usage",
    "chat_body_of",
    "message_body",
    "message_sse",
    "messages_handler",
]

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _chat_messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as the chat messages it stands for: tool results become ``tool``
    messages, tool uses an assistant message's ``tool_calls``."""
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": _text_of(content)}]
    out: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _text_of(block.get("content")),
                }
            )
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": json_text(b.get("input") or {})},
        }
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    text = _text_of(content)
    if text or calls or not out:
        chat: dict[str, Any] = {"role": role, "content": text}
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return out


def chat_body_of(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request a Messages API request stands for."""
    messages: list[dict[str, Any]] = []
    system = _text_of(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            messages.extend(_chat_messages(message))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if isinstance(body.get("max_tokens"), int):
        chat["max_tokens"] = body["max_tokens"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {},
            },
        }
        for t in body.get("tools") or []
        if isinstance(t, dict)
    ]
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice") or {}
        kind = choice.get("type") if isinstance(choice, dict) else None
        chat["tool_choice"] = {"any": "required", "none": "none"}.get(str(kind), "auto")
        if kind == "tool":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    return chat


def anthropic_usage(completion: Completion) -> dict[str, int]:
    """Anthropic's four counters: ``input_tokens`` excludes both cache counters."""
    cache = completion.cache
    return {
        "input_tokens": cache.prompt_tokens - cache.cached_tokens - cache.written_tokens,
        "cache_creation_input_tokens": cache.written_tokens,
        "cache_read_input_tokens": cache.cached_tokens,
        "output_tokens": completion.completion_tokens,
    }


def _message_id(ident: ResponseIdentity) -> str:
    return "msg_" + ident.id.removeprefix("chatcmpl-")


def _blocks(completion: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.reasoning:
        blocks.append({"type": "thinking", "thinking": completion.reasoning, "signature": ""})
    if completion.content or not completion.tool_calls:
        blocks.append({"type": "text", "text": completion.content})
    for call in completion.tool_calls:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = {}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def message_body(completion: Completion, ident: ResponseIdentity) -> dict[str, Any]:
    """The non-streamed Messages API response."""
    return {
        "id": _message_id(ident),
        "type": "message",
        "role": "assistant",
        "model": completion.model,
        "content": _blocks(completion),
        "stop_reason": STOP_REASONS.get(completion.finish_reason, completion.finish_reason),
        "stop_sequence": None,
        "usage": anthropic_usage(completion),
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json_text(data)}\n\n".encode()


def _block_events(index: int, block: dict[str, Any], chunk_tokens: int) -> list[bytes]:
    kind = block["type"]
    start: dict[str, Any]
    if kind == "thinking":
        start, key, delta_type = {"type": "thinking", "thinking": ""}, "thinking", "thinking_delta"
        text = block["thinking"]
    elif kind == "text":
        start, key, delta_type = {"type": "text", "text": ""}, "text", "text_delta"
        text = block["text"]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        key, delta_type, text = "partial_json", "input_json_delta", json_text(block["input"])
    head = {"type": "content_block_start", "index": index, "content_block": start}
    events = [_event("content_block_start", head)]
    for piece in split_into_pieces(text, chunk_tokens):
        delta = {"type": delta_type, key: piece}
        data = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append(_event("content_block_delta", data))
    events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def message_sse(completion: Completion, ident: ResponseIdentity) -> SSEBody:
    """The streamed response on the chat route's schedule (``SSEBody``): ``message_start`` at
    once, the blocks' events after ``ttft_s``, then ``message_delta`` and ``message_stop``."""
    spec = completion.spec
    usage = anthropic_usage(completion)
    start_usage = usage | {"output_tokens": 1}
    message = message_body(completion, ident) | {
        "content": [],
        "stop_reason": None,
        "usage": start_usage,
    }
    deltas: list[bytes] = []
    for index, block in enumerate(_blocks(completion)):
        deltas.extend(_block_events(index, block, spec.chunk_tokens))
    tail = (
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message_body(completion, ident)["stop_reason"]},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        _event("message_stop", {"type": "message_stop"}),
    )
    return SSEBody(
        role=_event("message_start", {"type": "message_start", "message": message}),
        deltas=tuple(deltas),
        tail=tail,
        ttft_s=spec.ttft_s,
        interval=spec.chunk_tokens / spec.tokens_per_second if spec.tokens_per_second > 0 else 0.0,
        middle=len(deltas) // 2,
        stall_s=None,
        malformed=None,
        disconnect=False,
    )


def _error(status: int, kind: str, message: str) -> Response:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status)


def messages_handler(
    generate: Callable[..., list[Completion]],
    request_faults: Callable[..., frozenset[str]],
    call_id_header: str,
) -> Callable[[Request], Awaitable[Response]]:
    """The ``POST /v1/messages`` handler, given the chat route's own helpers (server.py passes
    them: this module does not import the server)."""

    async def messages(request: Request) -> Response:
        return await _messages(request, generate, request_faults, call_id_header)

    return messages


async def _messages(
    request: Request,
    generate: Callable[..., list[Completion]],
    request_faults: Callable[..., frozenset[str]],
    call_id_header: str,
) -> Response:
    """One model (a router name is refused: the MoM router speaks the chat route only), the
    chat route's faults for 429 and 500, the answer the chat route would give."""
    received = arrival(request.scope)
    state = request.app.state.sim
    config = state.active
    state.counters.chat_requests += 1
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "invalid_request_error", "request body is not JSON")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _error(400, "invalid_request_error", "messages: must be a list")
    if not isinstance(body.get("max_tokens"), int):
        return _error(400, "invalid_request_error", "max_tokens: Field required")
    requested = str(body.get("model", ""))
    spec = config.models.get(requested)
    if spec is None:
        return _error(404, "not_found_error", f"model: {requested}")
    faults = request_faults(request, spec)
    if "429" in faults:
        return _error(429, "rate_limit_error", "simulated rate limit")
    if "500" in faults:
        return _error(500, "api_error", "simulated server error")
    chat = chat_body_of(body)
    seed = config.seed
    (completion,) = generate(
        state, [spec], chat, seed, faults & {"u2028", "unstorable", "length-as-stop"}
    )
    ident = ResponseIdentity.of(requested, body, seed)
    call_id = request.headers.get(call_id_header)
    if body.get("stream"):
        headers = {"cache-control": "no-cache"}
        events = message_sse(completion, ident)
        return SSEResponse(events, state.counters, received, headers, call_id=call_id)
    await asyncio.sleep(total_generation_seconds(completion))
    return Response(json_text(message_body(completion, ident)), media_type="application/json")
