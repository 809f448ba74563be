"""Same model, request and seed → the same bytes; the seed is what changes them."""

from __future__ import annotations

import httpx

from tests.simulator.conftest import MCQ_PROMPT, chat_body
from tests.simulator.sse import sse_chunks, sse_data


def raw_stream(sim: httpx.Client, body: dict) -> bytes:
    with sim.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        return response.read()


def test_same_request_and_seed_stream_byte_identical_sse(sim: httpx.Client):
    body = chat_body("sim-nocache", MCQ_PROMPT, seed=7)
    first = raw_stream(sim, body)
    second = raw_stream(sim, body)
    assert first == second
    chunks = sse_chunks(first)
    assert len(chunks) > 3
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1


def test_same_request_is_byte_identical_across_a_cache_reset(sim: httpx.Client):
    body = chat_body("sim-strong", MCQ_PROMPT)
    first = raw_stream(sim, body)
    sim.post("/_sim/reset")
    assert raw_stream(sim, body) == first


def test_a_different_seed_gives_a_different_response_identity(sim: httpx.Client):
    one = sse_chunks(raw_stream(sim, chat_body("sim-nocache", MCQ_PROMPT, seed=1)))
    two = sse_chunks(raw_stream(sim, chat_body("sim-nocache", MCQ_PROMPT, seed=2)))
    assert one[0]["id"] != two[0]["id"]


def test_stream_ends_with_finish_then_usage_chunk_then_done(sim: httpx.Client):
    events = sse_data(raw_stream(sim, chat_body("sim-nocache", MCQ_PROMPT)))
    assert events[-1] == "[DONE]"
    chunks = sse_chunks(raw_stream(sim, chat_body("sim-nocache", MCQ_PROMPT)))
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])


def test_stream_without_include_usage_has_no_usage_chunk(sim: httpx.Client):
    body = chat_body("sim-nocache", MCQ_PROMPT)
    del body["stream_options"]
    chunks = sse_chunks(raw_stream(sim, body))
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
