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


def _anthropic_text(raw: bytes, stream: bool) -> str:
    """The answer's text of an Anthropic Messages reply, streamed or whole."""
    if not stream:
        return "".join(b.get("text", "") for b in json.loads(raw)["content"])
    events = [json.loads(e) for e in sse_data(raw)]
    return "".join(
        e["delta"].get("text", "") for e in events if e.get("type") == "content_block_delta"
    )


@pytest.mark.parametrize(
    ("path", "model", "stream"),
    [
        ("/v1/chat/completions", "sim-strong", True),
        ("/v1/chat/completions", "sim-strong", False),
        ("/v1/messages", "sim-anthropic", True),
        ("/v1/messages", "sim-anthropic", False),
    ],
)
def test_fault_unstorable_sends_nul_and_a_lone_surrogate_as_json_escapes_on_every_wire(
    sim: httpx.Client, path: str, model: str, stream: bool
):
    """R15: the `unstorable` fault is U+0000 and a lone surrogate in the answer. UTF-8 cannot
    carry a lone surrogate, so every wire sends JSON's escapes (`\\u0000`, `\\ud800`), as a
    server that escapes non-ASCII does; before, the Anthropic wire and the OpenAI non-streamed
    body failed to encode the reply (a 500 from the simulator, no answer)."""
    body = chat_body(model, MCQ_PROMPT, stream=stream)
    if path == "/v1/messages":
        body = {k: v for k, v in body.items() if k != "stream_options"} | {"max_tokens": 64}
    response = sim.post(path, json=body, headers={"x-sim-fault": "unstorable"})
    assert response.status_code == 200, response.text
    raw = response.content
    raw.decode("utf-8")  # strict: the bytes are UTF-8
    assert b"\\u0000" in raw and b"\\ud800" in raw
    if path == "/v1/messages":
        text = _anthropic_text(raw, stream)
    elif stream:
        text = streamed_content(sse_chunks(raw))
    else:
        text = response.json()["choices"][0]["message"]["content"]
    assert "\x00\ud800" in text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_request_carrying_a_lone_surrogate_and_nul_is_answered(sim: httpx.Client, path: str):
    """The other way round: a conversation that holds an earlier unstorable reply comes back
    with JSON's `\\ud800` and `\\u0000` in it; the simulator answers it (its prompt hash and
    prefix cache hashed the text's UTF-8 and raised before: a 500)."""
    model = "sim-anthropic" if path == "/v1/messages" else "sim-strong"
    messages = [
        {"role": "user", "content": MCQ_PROMPT},
        {"role": "assistant", "content": "The answer\u0000\ud800 is C"},
        {"role": "user", "content": "Are you sure?"},
    ]
    body = {"model": model, "messages": messages, "max_tokens": 64}
    raw = json.dumps(body).encode("ascii")  # the escapes as they came
    assert b"\\ud800" in raw
    response = sim.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
