"""A repeated prompt prefix comes back as cached tokens, in OpenAI or Anthropic shape."""

from __future__ import annotations

import httpx

from tests.simulator.conftest import MCQ_PROMPT, chat_body

SYSTEM = "You are a careful examiner. " + " ".join(f"Rule {i}: be exact." for i in range(30))


def usage(sim: httpx.Client, model: str, question: str) -> dict:
    body = chat_body(model, question, stream=False)
    body["messages"].insert(0, {"role": "system", "content": SYSTEM})
    response = sim.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    return response.json()["usage"]


def test_second_identical_request_reports_cached_tokens_and_first_reports_none(sim):
    first = usage(sim, "sim-weak", MCQ_PROMPT)
    second = usage(sim, "sim-weak", MCQ_PROMPT)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert 0 < second["prompt_tokens_details"]["cached_tokens"] <= second["prompt_tokens"]
    assert second["prompt_tokens"] == first["prompt_tokens"]


def test_a_shared_system_prompt_is_cached_for_a_different_question(sim):
    usage(sim, "sim-weak", MCQ_PROMPT)
    other = usage(sim, "sim-weak", "A completely different question about rivers?")
    cached = other["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached < other["prompt_tokens"]


def test_prefix_cache_is_per_model(sim):
    usage(sim, "sim-weak", MCQ_PROMPT)
    assert usage(sim, "sim-strong", MCQ_PROMPT)["prompt_tokens_details"]["cached_tokens"] == 0


def test_reset_clears_the_prefix_cache(sim):
    usage(sim, "sim-weak", MCQ_PROMPT)
    sim.post("/_sim/reset")
    assert usage(sim, "sim-weak", MCQ_PROMPT)["prompt_tokens_details"]["cached_tokens"] == 0


def test_anthropic_style_usage_reports_cache_write_then_cache_read(sim):
    first = usage(sim, "sim-anthropic", MCQ_PROMPT)
    second = usage(sim, "sim-anthropic", MCQ_PROMPT)
    assert set(first) == {
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    }
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    # input_tokens excludes both cache fields, so the prompt total is the same both times.
    total = [
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
        for u in (first, second)
    ]
    assert total[0] == total[1]
