"""One simulated inference call: what the model says (``Completion``) and how it goes on the
wire (OpenAI chat.completion JSON or SSE chunks). Everything is computed before the first byte
so a MoM router can put the complete usage receipt in its response headers."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from srbench.canonical import canonical_json, json_text
from srbench.simulator.agents import AgentTurn, agent_turn
from srbench.simulator.config import ModelSpec
from srbench.simulator.oracle import (
    AnswerKey,
    entry_domain,
    judge_reply,
    prompt_text_of,
    subject_answer,
    user_reply,
)
from srbench.simulator.tokens import (
    CACHED_TEXT_CHARS,
    CacheOutcome,
    PrefixCache,
    count_tokens,
    prompt_token_sequence,
    split_into_pieces,
    truncate_to_tokens,
)

U2028 = "\u2028"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    spec: ModelSpec
    reasoning: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    cache: CacheOutcome
    completion_tokens: int
    reasoning_tokens: int
    benchmark: str | None
    correct: bool | None
    # False under the ``no-cache-details`` fault: usage without its cached-token fields.
    cache_details: bool = True

    @property
    def model(self) -> str:
        return self.spec.name

    def wire_usage(self) -> dict[str, Any]:
        """The usage object in the model's configured provider style."""
        if self.spec.usage_style == "anthropic":
            # Anthropic counts cache reads and writes outside input_tokens.
            if not self.cache_details:
                return {
                    "input_tokens": self.cache.prompt_tokens,
                    "output_tokens": self.completion_tokens,
                }
            return {
                "input_tokens": self.cache.prompt_tokens
                - self.cache.cached_tokens
                - self.cache.written_tokens,
                "output_tokens": self.completion_tokens,
                "cache_creation_input_tokens": self.cache.written_tokens,
                "cache_read_input_tokens": self.cache.cached_tokens,
            }
        usage: dict[str, Any] = {
            "prompt_tokens": self.cache.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.cache.prompt_tokens + self.completion_tokens,
        }
        if self.cache_details:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cache.cached_tokens}
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return usage

    def receipt_usage(self) -> dict[str, int]:
        """Usage for the router's ``x-vsr-model-usage`` receipt; prompt_tokens is the total
        prompt, cached and written tokens are parts of it."""
        written = self.cache.written_tokens if self.spec.usage_style == "anthropic" else 0
        return {
            "prompt_tokens": self.cache.prompt_tokens,
            "cached_input_tokens": self.cache.cached_tokens,
            "cache_write_tokens": written,
            "completion_tokens": self.completion_tokens,
        }


def _example_value(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "sim"
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        required = schema.get("required") or list(props)
        return {name: _example_value(props.get(name)) for name in required}
    return {"integer": 1, "number": 1.0, "boolean": True, "array": [], "null": None}.get(
        str(kind), "sim"
    )


def _chosen_tool(spec: ModelSpec, body: dict[str, Any]) -> dict[str, Any] | None:
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and "function" in t]
    messages = body.get("messages") or []
    if not tools or (messages and messages[-1].get("role") == "tool"):
        # After a tool result the model answers in text, so agent loops terminate.
        return None
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return None
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        return next((t for t in tools if t["function"].get("name") == wanted), None)
    if choice == "required" or spec.use_tools:
        return tools[0]
    return None


def _call_id(seed: int, model: str, messages: list[dict[str, Any]]) -> str:
    # Derived from the request, like the response id, so a replayed request repeats it.
    return "call_" + hashlib.sha256(canonical_json([seed, model, messages])).hexdigest()[:24]


def _agent_turn(
    spec: ModelSpec, body: dict[str, Any], *, seed: int, key: AnswerKey
) -> AgentTurn | None:
    """A subject model offered tools on a known agent task plays it from the answer key
    (gold actions or solution commands, or a wrong variant) instead of the generic tool use.
    ``tool_choice: "none"`` or a named tool keeps the generic behaviour, which honours them."""
    tools = body.get("tools")
    if spec.role != "subject" or not isinstance(tools, list) or not tools:
        return None
    if body.get("tool_choice", "auto") not in ("auto", "required", None):
        return None
    return agent_turn(
        key,
        model=spec.name,
        seed=seed,
        messages=body.get("messages") or [],
        tools=tools,
        accuracy_for=spec.accuracy_for,
    )


def _within_budget(body: dict[str, Any], reasoning: str, content: str) -> tuple[str, str, bool]:
    """Reasoning and content cut to the request's max_tokens; True when anything was cut."""
    budget = body.get("max_completion_tokens") or body.get("max_tokens")
    if not isinstance(budget, int) or budget < 0:
        return reasoning, content, False
    reasoning, cut_r = truncate_to_tokens(reasoning, budget)
    content, cut_c = truncate_to_tokens(content, budget - count_tokens(reasoning))
    return reasoning, content, bool(cut_r or cut_c)


def _faulted_content(content: str, faults: frozenset[str]) -> str:
    """The answer with the characters its faults put in it."""
    if "u2028" in faults:
        # U+2028 is whitespace to the tokeniser, so counts do not change.
        head, sep, tail = content.partition(" ")
        content = f"{head}{U2028}{tail}" if sep else f"{content}{U2028}"
    if "unstorable" in faults:
        # U+0000 and a lone surrogate in the answer (JSON's \u0000 and \ud800 on the wire):
        # text PostgreSQL cannot store.
        head, sep, tail = content.partition(" ")
        content = f"{head}{sep}\x00\ud800{tail}"
    return content


def build_completion(
    spec: ModelSpec,
    body: dict[str, Any],
    *,
    seed: int,
    key: AnswerKey,
    cache: PrefixCache,
    faults: frozenset[str],
) -> Completion:
    messages: list[dict[str, Any]] = body.get("messages") or []
    prompt_text = prompt_text_of(messages)
    benchmark: str | None = None
    correct: bool | None = None
    reasoning = ""
    tool_calls: tuple[ToolCall, ...] = ()
    agent = _agent_turn(spec, body, seed=seed, key=key)
    tool = _chosen_tool(spec, body) if spec.role == "subject" and agent is None else None
    if spec.role == "judge":
        content = judge_reply(prompt_text)
    elif spec.role == "user":
        content = user_reply(messages, spec.stop_after_turns)
    elif agent is not None:
        content, benchmark, correct = agent.content, agent.benchmark, agent.correct
        if agent.tool_name is not None:
            call_id = _call_id(seed, spec.name, messages)
            tool_calls = (ToolCall(call_id, agent.tool_name, agent.arguments or "{}"),)
    elif tool is not None:
        content = ""
        function = tool["function"]
        arguments = json.dumps(_example_value(function.get("parameters")), sort_keys=True)
        call_id = _call_id(seed, spec.name, messages)
        tool_calls = (ToolCall(call_id, str(function.get("name")), arguments),)
    else:
        # The model's accuracy may depend on the question's domain (ModelSpec.domain_accuracy).
        domain = entry_domain(key.lookup(prompt_text))
        answer = subject_answer(
            key,
            model=spec.name,
            seed=seed,
            prompt_text=prompt_text,
            accuracy_for=lambda benchmark: spec.accuracy_for(benchmark, domain),
        )
        content, benchmark, correct = answer.content, answer.benchmark, answer.correct
    if spec.reasoning and spec.role == "subject":
        reasoning = spec.reasoning
    content = _faulted_content(content, faults)

    finish = "tool_calls" if tool_calls else "stop"
    reasoning, content, cut = _within_budget(body, reasoning, content)
    if cut:
        # ``length-as-stop``: a server that reports a max_tokens cut as a natural end.
        finish = "stop" if "length-as-stop" in faults else "length"
        tool_calls = ()
    reasoning_tokens = count_tokens(reasoning)
    completion_tokens = (
        reasoning_tokens
        + count_tokens(content)
        + sum(count_tokens(c.name) + count_tokens(c.arguments) for c in tool_calls)
    )
    sequence = prompt_token_sequence(messages, body.get("tools"))
    if spec.prefix_cache:
        outcome = cache.lookup_and_write(spec.name, sequence, spec.cache_block_tokens)
    else:
        outcome = CacheOutcome(len(sequence), 0, 0)
    return Completion(
        spec=spec,
        reasoning=reasoning,
        content=content,
        tool_calls=tool_calls,
        finish_reason=finish,
        cache=outcome,
        completion_tokens=completion_tokens,
        reasoning_tokens=reasoning_tokens,
        benchmark=benchmark,
        correct=correct,
        cache_details="no-cache-details" not in faults,
    )


@dataclass(frozen=True)
class ResponseIdentity:
    """``id``/``created``/fingerprint derived from the request, never from time or chance,
    so that the same request gives byte-identical output."""

    id: str
    created: int
    fingerprint: str

    @classmethod
    def of(cls, requested_model: str, body: dict[str, Any], seed: int) -> ResponseIdentity:
        digest = hashlib.sha256(canonical_json([requested_model, body, seed])).hexdigest()
        return cls(
            id=f"chatcmpl-sim{digest[:24]}",
            created=1_750_000_000 + int(digest[24:32], 16) % 10_000_000,
            fingerprint=f"fp_sim{digest[32:40]}",
        )


def completion_body(
    completion: Completion, ident: ResponseIdentity, *, include_usage: bool
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.content or None}
    if completion.reasoning:
        message["reasoning_content"] = completion.reasoning
    if completion.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls
        ]
    body: dict[str, Any] = {
        "id": ident.id,
        "object": "chat.completion",
        "created": ident.created,
        "model": completion.model,
        "system_fingerprint": ident.fingerprint,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": completion.finish_reason,
            }
        ],
    }
    if include_usage:
        body["usage"] = completion.wire_usage()
    return body


def total_generation_seconds(completion: Completion) -> float:
    spec = completion.spec
    if spec.tokens_per_second <= 0:
        return spec.ttft_s
    return spec.ttft_s + completion.completion_tokens / spec.tokens_per_second


@dataclass(frozen=True)
class SSEBody:
    """A stream's SSE events, rendered before its first byte goes out, and when to send them.

    On the wire: ``role`` at once; after ``ttft_s`` the ``deltas``, delta ``i`` due at
    ``first_token_at + i * interval`` (a schedule, so that sleep overshoot under load does not
    accumulate into a slower tokens/s than configured); then ``tail`` (finish chunk, usage
    chunk, ``[DONE]``, as the faults leave them). Before delta ``middle`` (before the tail if
    there are no more deltas) the mid-stream faults fire, in this order: a pause of
    ``stall_s``, the ``malformed`` event, a simulated ``disconnect`` (the connection is closed
    without the chunked-encoding terminator and nothing more is sent)."""

    role: bytes
    deltas: tuple[bytes, ...]
    tail: tuple[bytes, ...]
    ttft_s: float
    interval: float
    middle: int
    stall_s: float | None
    malformed: bytes | None
    disconnect: bool


def _choice_tail(delta_json: str, finish: str = "null") -> bytes:
    """An SSE chunk after its head: the one choice with ``delta_json``, and the event's end."""
    choice = f'{{"index":0,"delta":{delta_json},"logprobs":null,"finish_reason":{finish}}}'
    return f"[{choice}]}}\n\n".encode()


@functools.lru_cache(maxsize=64)
def _cached_text_tails(key: str, text: str, chunk_tokens: int) -> tuple[bytes, ...]:
    return tuple(
        _choice_tail(f'{{"{key}":{json_text(piece)}}}')
        for piece in split_into_pieces(text, chunk_tokens)
    )


def _text_tails(key: str, text: str, chunk_tokens: int) -> tuple[bytes, ...]:
    """A text's delta chunks after the response's head, one per piece of ``chunk_tokens``.
    The texts repeat across responses (a model's configured reasoning, a benchmark's few
    answers), so theirs are rendered once: at C = 256 a burst of new requests spent most of the
    simulator's handler time rendering them, with every request arriving meanwhile waiting in
    its socket."""
    if len(text) <= CACHED_TEXT_CHARS:
        return _cached_text_tails(key, text, chunk_tokens)
    return _cached_text_tails.__wrapped__(key, text, chunk_tokens)


def _delta_tails(completion: Completion) -> list[bytes]:
    """Every delta chunk of the completion after the response's head: reasoning, content,
    then each tool call's head and its arguments."""
    chunk_tokens = completion.spec.chunk_tokens
    tails = [
        *_text_tails("reasoning_content", completion.reasoning, chunk_tokens),
        *_text_tails("content", completion.content, chunk_tokens),
    ]
    for index, call in enumerate(completion.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        tails.append(
            _choice_tail(
                json_text(
                    {"tool_calls": [head | {"function": {"name": call.name, "arguments": ""}}]}
                )
            )
        )
        for piece in split_into_pieces(call.arguments, chunk_tokens):
            delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            tails.append(_choice_tail(json_text(delta)))
    return tails


def sse_body(
    completion: Completion,
    ident: ResponseIdentity,
    *,
    include_usage: bool,
    faults: frozenset[str],
    stall_seconds: float,
) -> SSEBody:
    """The SSE body of a streamed completion. The role chunk goes out at once (headers and
    first byte are not the first token); TTFT is the pause before the first
    reasoning/content/tool delta."""
    spec = completion.spec
    head = (
        f'data: {{"id":"{ident.id}","object":"chat.completion.chunk",'
        f'"created":{ident.created},"model":{json_text(completion.model)},'
        f'"system_fingerprint":"{ident.fingerprint}","choices":'
    )
    head_bytes = head.encode()

    def chunk(delta_json: str, finish: str = "null") -> bytes:
        return head_bytes + _choice_tail(delta_json, finish)

    deltas = tuple(head_bytes + tail for tail in _delta_tails(completion))
    tail = [chunk("{}", json_text(completion.finish_reason))]
    if include_usage and "no-usage" not in faults:
        tail.append(f'{head}[],"usage":{json_text(completion.wire_usage())}}}\n\n'.encode())
    if "no-done" not in faults:
        tail.append(b"data: [DONE]\n\n")
    malformed = None
    if "malformed-chunk" in faults:
        malformed = (
            head[: -len(',"choices":')] + ',"choices":[{"index":0,"delta":{"cont\n\n'
        ).encode()
    return SSEBody(
        role=chunk('{"role":"assistant","content":""}'),
        deltas=deltas,
        tail=tuple(tail),
        ttft_s=spec.ttft_s,
        interval=spec.chunk_tokens / spec.tokens_per_second if spec.tokens_per_second > 0 else 0.0,
        # Mid-stream faults fire halfway through the deltas (before the final chunk if none).
        middle=len(deltas) // 2,
        stall_s=stall_seconds if "stall-mid" in faults else None,
        malformed=malformed,
        disconnect="disconnect" in faults,
    )
