"""The official ``openai`` client can use the simulator like any OpenAI-compatible server."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.simulator.conftest import CODE_PROMPT, MCQ_PROMPT, chat_body

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}


@pytest.fixture
def client(sim_url: str, sim: httpx.Client) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim_url}/v1", api_key="sim", max_retries=0)


def long_prompt() -> str:
    return "Background. " + " ".join(f"fact{i} is true." for i in range(40)) + "\n" + MCQ_PROMPT


def test_openai_client_streams_content_and_reports_cached_tokens_on_a_repeat(client):
    def run() -> tuple[str, openai.types.CompletionUsage | None, set[str]]:
        stream = client.chat.completions.create(
            model="sim-strong",
            messages=[{"role": "user", "content": long_prompt()}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, usage, finishes = "", None, set()
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
                assert chunk.choices == []
            for choice in chunk.choices:
                text += choice.delta.content or ""
                if choice.finish_reason:
                    finishes.add(choice.finish_reason)
        return text, usage, finishes

    first_text, first, finishes = run()
    second_text, second, _ = run()
    assert first_text == second_text and first_text.strip()
    assert finishes == {"stop"}
    assert first is not None and second is not None
    assert first.prompt_tokens == second.prompt_tokens > 16
    assert first.prompt_tokens_details.cached_tokens == 0
    assert 0 < second.prompt_tokens_details.cached_tokens <= second.prompt_tokens
    assert first.completion_tokens > 0


def test_openai_client_streams_reasoning_before_content(client):
    stream = client.chat.completions.create(
        model="sim-strong",
        messages=[{"role": "user", "content": MCQ_PROMPT}],
        stream=True,
    )
    order = []
    for chunk in stream:
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if extra.get("reasoning_content"):
                order.append("reasoning")
            if choice.delta.content:
                order.append("content")
    assert "reasoning" in order and "content" in order
    assert order.index("content") > max(i for i, k in enumerate(order) if k == "reasoning")


def test_openai_client_accumulates_streamed_tool_call_deltas(client):
    stream = client.chat.completions.create(
        model="sim-strong",
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        stream=True,
        stream_options={"include_usage": True},
    )
    calls: dict[int, dict[str, str]] = {}
    finish, usage = None, None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    import json

    assert json.loads(calls[0]["arguments"]) == {"city": "sim", "days": 1}
    assert usage is not None and usage.completion_tokens > 0


def test_model_configured_for_tools_answers_in_text_after_a_tool_result(client):
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    reply = client.chat.completions.create(
        model="sim-tools", messages=messages, tools=[WEATHER_TOOL]
    )
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content


def test_non_streaming_returns_a_chat_completion_with_usage(client):
    reply = client.chat.completions.create(
        model="sim-strong", messages=[{"role": "user", "content": CODE_PROMPT}]
    )
    assert reply.object == "chat.completion"
    assert reply.model == "sim-strong"
    assert reply.choices[0].finish_reason == "stop"
    assert "```python" in (reply.choices[0].message.content or "")
    assert reply.usage is not None
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_max_tokens_truncates_the_reply_with_finish_reason_length(sim: httpx.Client):
    body = chat_body("sim-strong", MCQ_PROMPT, stream=False, max_tokens=5)
    reply = sim.post("/v1/chat/completions", json=body).json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 5
    # The reasoning alone exceeds the budget, so no visible answer survives.
    assert reply["choices"][0]["message"]["content"] is None


def test_models_endpoint_lists_physical_and_routed_models(client):
    ids = {m.id for m in client.models.list()}
    assert {"sim-strong", "sim-weak", "sim-judge", "sim-user", "auto", "vllm-sr/auto"} <= ids


def test_unknown_model_is_a_404_openai_error(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
