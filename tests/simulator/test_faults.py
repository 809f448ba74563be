"""Every fault, observed the way a raw HTTP client (the engine's transport) would see it."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.simulator.conftest import MCQ_PROMPT, chat_body
from tests.simulator.sse import sse_chunks, sse_data, streamed_content


def post_stream(sim: httpx.Client, fault: str, model: str = "sim-strong", **headers: str):
    body = chat_body(model, MCQ_PROMPT)
    return sim.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-sim-fault": fault, **headers}
    )


def test_fault_429_returns_rate_limit_error_with_retry_after(sim: httpx.Client):
    with post_stream(sim, "429") as response:
        response.read()
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


def test_fault_500_returns_server_error(sim: httpx.Client):
    with post_stream(sim, "500") as response:
        response.read()
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"


def test_fault_configured_on_a_model_applies_without_a_header(sim: httpx.Client):
    response = sim.post("/v1/chat/completions", json=chat_body("sim-flaky", MCQ_PROMPT))
    assert response.status_code == 429


def test_fault_stall_first_byte_delays_the_response_headers(sim: httpx.Client):
    started = time.monotonic()
    with post_stream(sim, "stall-first-byte", **{"x-sim-stall-seconds": "0.4"}) as response:
        headers_after = time.monotonic() - started
        raw = response.read()
    assert headers_after >= 0.4
    assert sse_data(raw)[-1] == "[DONE]"


def test_fault_stall_mid_pauses_between_two_chunks(sim: httpx.Client):
    gaps = []
    with post_stream(sim, "stall-mid", **{"x-sim-stall-seconds": "2.0"}) as response:
        last = time.monotonic()
        for _ in response.iter_raw():
            now = time.monotonic()
            gaps.append(now - last)
            last = now
    assert response.status_code == 200
    # The client's clock starts a little after the server's, so allow some slack.
    assert max(gaps[1:], default=0) >= 1.9, gaps
    # The stall came after the stream had begun, not before the headers: the first chunk came
    # sooner than the stall lasts (a stall long enough that load 10 cannot blur the two, R15).
    assert gaps[0] < 1.0, gaps


def test_fault_disconnect_drops_the_connection_before_done(sim: httpx.Client):
    received = b""
    with pytest.raises(httpx.RemoteProtocolError), post_stream(sim, "disconnect") as response:
        for part in response.iter_raw():
            received += part
    assert received.startswith(b"data: ")
    assert b"[DONE]" not in received


def test_fault_no_usage_omits_the_usage_chunk_but_ends_with_done(sim: httpx.Client):
    with post_stream(sim, "no-usage") as response:
        raw = response.read()
    assert sse_data(raw)[-1] == "[DONE]"
    assert all("usage" not in c for c in sse_chunks(raw))


def test_fault_no_done_ends_the_stream_cleanly_without_done(sim: httpx.Client):
    with post_stream(sim, "no-done") as response:
        raw = response.read()
    events = sse_data(raw)
    assert "[DONE]" not in events
    assert json.loads(events[-1])["usage"]["completion_tokens"] > 0


def test_fault_malformed_chunk_sends_one_undecodable_event(sim: httpx.Client):
    with post_stream(sim, "malformed-chunk") as response:
        raw = response.read()
    bad = []
    for event in sse_data(raw):
        if event == "[DONE]":
            continue
        try:
            json.loads(event)
        except json.JSONDecodeError:
            bad.append(event)
    assert len(bad) == 1


def test_fault_u2028_puts_a_line_separator_inside_content(sim: httpx.Client):
    with post_stream(sim, "u2028") as response:
        raw = response.read()
    assert "\u2028".encode() in raw
    chunks = sse_chunks(raw)  # decodes on CR/LF only, so every event stays whole
    assert "\u2028" in streamed_content(chunks)
    assert sse_data(raw)[-1] == "[DONE]"
    # A client splitting on Unicode line breaks would tear that event apart.
    torn = [
        line
        for line in raw.decode().splitlines()
        if line.startswith("data: {") and not line.endswith("}")
    ]
    assert len(torn) == 1


def test_fault_wrong_config_hash_acknowledges_another_hash(sim: httpx.Client):
    active = sim.get("/api/v1/config/hash").json()["active_runtime_hash"]
    headers = {"x-sr-bench-expected-config-hash": active}
    with post_stream(sim, "wrong-config-hash", model="auto", **headers) as response:
        response.read()
    assert response.status_code == 200
    ack = response.headers["x-vsr-config-hash"]
    assert len(ack) == 64 and ack != active


def test_fault_no_receipt_omits_the_usage_receipt(sim: httpx.Client):
    with post_stream(sim, "no-receipt", model="auto") as response:
        response.read()
    assert response.status_code == 200
    assert "x-vsr-model-usage" not in response.headers
    assert response.headers["x-vsr-inference-call-count"] == "1"


def test_unknown_fault_name_is_rejected(sim: httpx.Client):
    with post_stream(sim, "explode") as response:
        response.read()
    assert response.status_code == 400
