"""The target check's comparison of a stream's usage with the plain answer's to the same prompt
(runs/preflight/findings.py): measured against LiteLLM in front of llama.cpp in
tests/real/test_gateway_llama.py; here its edges, without a server."""

from __future__ import annotations

from runs.preflight.findings import stream_usage_disagreement
from runs.preflight.wire import WireResult


def answer(prompt_tokens: int, model: str = "gw", cached: int | None = None) -> WireResult:
    usage: dict = {"prompt_tokens": prompt_tokens, "completion_tokens": 1}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return WireResult(http_status=200, served_model=model, finish_reason="length", usage=usage)


def test_a_gateways_own_prompt_count_in_the_stream_is_named_with_both_counts():
    said = stream_usage_disagreement(answer(9), answer(32))
    assert said.startswith(
        "the stream's usage counts 9 prompt tokens where the plain answer to the same prompt "
        "counts 32"
    )


def test_the_same_prompt_count_cached_or_not_agrees():
    assert stream_usage_disagreement(answer(32), answer(32, cached=16)) == ""


def test_answers_of_two_served_models_are_not_compared():
    """A router may route the two calls to models with different tokenizers."""
    assert stream_usage_disagreement(answer(9, "small"), answer(32, "large")) == ""


def test_a_failed_plain_answer_says_nothing():
    failed = WireResult(http_status=500, error="HTTP 500")
    assert stream_usage_disagreement(answer(9), failed) == ""
