"""Issue 37 item 4, the pure parts: reasoning tokens as their own count beside output, and the
Messages API request and stream as the engine says and reads them (the end-to-end runs are
tests/e2e/test_anthropic_direct.py and tests/e2e/test_litellm_gateway.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runs.engine.anthropic import AnthropicStreamAccumulator, messages_request, wire_request
from runs.engine.sse import ChatStreamAccumulator, SSEDecoder
from runs.ledger.usage import UsageBuckets, mom_call_buckets, usage_buckets, usage_buckets_explained

# --------------------------------------------------------------------------------------------
# Reasoning


def test_openai_reasoning_is_its_own_count_and_output_stays_the_billed_total():
    b = usage_buckets(
        {
            "prompt_tokens": 20,
            "completion_tokens": 50,
            "completion_tokens_details": {"reasoning_tokens": 30},
        }
    )
    assert b is not None and (b.output, b.reasoning) == (50, 30)


def test_responses_api_reasoning_is_read_from_output_tokens_details():
    b = usage_buckets(
        {
            "input_tokens": 20,
            "output_tokens": 40,
            "input_tokens_details": {"cached_tokens": 5},
            "output_tokens_details": {"reasoning_tokens": 12},
        }
    )
    assert b is not None and (b.input, b.cached_input, b.output, b.reasoning) == (15, 5, 40, 12)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 3, "completion_tokens": 4},
        {"prompt_tokens": 3, "completion_tokens": 4, "completion_tokens_details": {}},
        {"prompt_tokens": 3, "completion_tokens": 4, "completion_tokens_details": None},
        {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 0},
    ],
)
def test_reasoning_not_reported_is_unknown_never_zero(usage):
    b = usage_buckets(usage)
    assert b is not None and b.reasoning is None


@pytest.mark.parametrize(
    ("details", "words"),
    [
        ({"reasoning_tokens": 5}, "exceed the output count"),
        ({"reasoning_tokens": -1}, "not an integer from 0 to 2^63 - 1"),
        ({"reasoning_tokens": True}, "not an integer from 0 to 2^63 - 1"),
        ([1], "completion_tokens_details is not an object"),
    ],
)
def test_impossible_reasoning_makes_the_usage_invalid(details, words):
    outcome = usage_buckets_explained(
        {"prompt_tokens": 3, "completion_tokens": 4, "completion_tokens_details": details}
    )
    assert outcome.buckets is None and outcome.problem == "invalid"
    assert words in outcome.reason


def test_a_mom_receipt_sums_reasoning_only_when_every_call_reported_it():
    def receipt(*usages: dict[str, Any]) -> dict[str, str]:
        calls = [{"model": "m", "usage": u} for u in usages]
        body = {"version": 1, "complete": True, "calls": calls}
        return {
            "x-vsr-model-usage": json.dumps(body),
            "x-vsr-inference-call-count": str(len(calls)),
        }

    with_r = {"prompt_tokens": 2, "completion_tokens": 9}
    with_r["completion_tokens_details"] = {"reasoning_tokens": 4}  # type: ignore[assignment]
    without = {"prompt_tokens": 2, "completion_tokens": 9}
    both = mom_call_buckets(receipt(with_r, with_r), None)
    assert both is not None and (both.output, both.reasoning) == (18, 8)
    partial = mom_call_buckets(receipt(with_r, without), None)
    assert partial is not None and partial.output == 18 and partial.reasoning is None


def test_buckets_refuse_more_reasoning_than_output():
    with pytest.raises(ValueError, match="reasoning"):
        UsageBuckets(1, 0, 0, 2, False, False, "openai", reasoning=3)


# --------------------------------------------------------------------------------------------
# The Messages API request


CHAT = {
    "model": "claude-x",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Book it."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "book", "arguments": '{"flight": "AB1"}'},
                },
                {"id": "toolu_2", "type": "function", "function": {"name": "pay", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "booked"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "paid"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "book",
                "description": "Book a flight",
                "parameters": {"type": "object", "properties": {"flight": {"type": "string"}}},
            },
        }
    ],
    "tool_choice": "required",
    "temperature": 0,
    "seed": 7,
    "stop": "END",
    "max_tokens": 64,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def test_a_chat_request_in_the_messages_apis_words():
    body = messages_request(CHAT)
    assert body == {
        "model": "claude-x",
        "max_tokens": 64,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Book it."},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "book",
                        "input": {"flight": "AB1"},
                    },
                    {"type": "tool_use", "id": "toolu_2", "name": "pay", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "booked"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "paid"},
                ],
            },
        ],
        "temperature": 0,
        "stop_sequences": ["END"],
        "tools": [
            {
                "name": "book",
                "description": "Book a flight",
                "input_schema": {"type": "object", "properties": {"flight": {"type": "string"}}},
            }
        ],
        "tool_choice": {"type": "any"},
        "stream": True,
    }


def test_the_wire_request_of_each_api():
    headers = {"authorization": "Bearer sk-1", "x-srbench-call-id": "9"}
    url, body, sent, reader = wire_request("openai", "http://h/v1/", CHAT, headers)
    assert (url, body, sent, reader) == (
        "http://h/v1/chat/completions",
        CHAT,
        headers,
        ChatStreamAccumulator,
    )
    url, body, sent, reader = wire_request("anthropic", "http://h/v1", CHAT, headers)
    assert url == "http://h/v1/messages" and reader is AnthropicStreamAccumulator
    assert sent == {
        "x-srbench-call-id": "9",
        "x-api-key": "sk-1",
        "anthropic-version": "2023-06-01",
    }
    assert body == messages_request(CHAT)


# --------------------------------------------------------------------------------------------
# The Messages API stream


def sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


START = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 32,
                "cache_read_input_tokens": 64,
                "output_tokens": 1,
            },
        },
    },
)


def block(index: int, start: dict[str, Any], *deltas: dict[str, Any]) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    ]
    out += [
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    return [*out, ("content_block_stop", {"type": "content_block_stop", "index": index})]


def read(raw: bytes) -> Any:
    acc = AnthropicStreamAccumulator()
    decoder = SSEDecoder()
    acc.feed_events(decoder.feed_plain(raw))
    acc.feed_events(decoder.close())
    return acc.result()


def end(reason: str, output: int) -> list[tuple[str, dict]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason},
                "usage": {"output_tokens": output},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_a_stream_gives_text_thinking_tools_usage_and_the_served_model():
    raw = sse(
        START,
        ("ping", {"type": "ping"}),
        *block(
            0, {"type": "thinking", "thinking": ""}, {"type": "thinking_delta", "thinking": "Hm."}
        ),
        *block(
            1,
            {"type": "text", "text": ""},
            {"type": "text_delta", "text": "Ans"},
            {"type": "text_delta", "text": "wer"},
        ),
        *block(
            2,
            {"type": "tool_use", "id": "toolu_9", "name": "book", "input": {}},
            {"type": "input_json_delta", "partial_json": '{"flight"'},
            {"type": "input_json_delta", "partial_json": ': "AB1"}'},
        ),
        *end("tool_use", 42),
    )
    r = read(raw)
    assert r.complete and r.finish_reason == "tool_calls"
    assert (r.content, r.reasoning, r.served_model) == ("Answer", "Hm.", "claude-x")
    assert [(t.id, t.name, t.arguments) for t in r.tool_calls] == [
        ("toolu_9", "book", '{"flight": "AB1"}')
    ]
    assert r.usage == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 32,
        "cache_read_input_tokens": 64,
        "output_tokens": 42,
    }
    b = usage_buckets(r.usage)
    assert b is not None and (b.input, b.cached_input, b.cache_write, b.output) == (10, 64, 32, 42)


def test_max_tokens_is_a_cut_answer():
    r = read(
        sse(
            START,
            *block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Hal"}),
            *end("max_tokens", 3),
        )
    )
    assert r.complete and r.truncated and r.finish_reason == "length"


def test_a_stream_without_message_stop_is_incomplete_and_says_so():
    r = read(
        sse(
            START,
            *block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "x"}),
            end("end_turn", 2)[0],
        )
    )
    assert not r.complete and r.incomplete_reason == "stream ended without message_stop"


def test_an_error_event_fails_the_stream_and_nothing_after_message_stop_counts():
    error = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    r = read(sse(START, error))
    assert not r.complete and "overloaded_error" in (r.error or "")
    late = (
        "message_delta",
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 999}},
    )
    r = read(sse(START, *end("end_turn", 2), late))
    assert not r.complete and r.usage["output_tokens"] == 2
    assert r.incomplete_reason == "1 event(s) after message_stop"
