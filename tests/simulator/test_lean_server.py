"""The lean stream server (srbench.simulator.lean, issue 38 item 2) sends what the simulator
sends: for the same request the same raw body, chunk framing included; on its schedule; on a
kept-alive connection; with the counters a benchmark reads. What it does not serve it refuses.

Both servers run as the benchmark runs them: their own processes from one TOML config."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.simulator.conftest import MCQ_PROMPT, answer_key
from tests.simulator.test_sse_wire import raw_exchange

CONFIG = """seed = 7
[models.paced]
accuracy = 0.8
ttft_s = 0.2
tokens_per_second = 50.0
chunk_tokens = 1
prefix_cache = false
reasoning = "step step step step step step step step"
[models.fast]
ttft_s = 0.0
tokens_per_second = 0.0
chunk_tokens = 2
prefix_cache = false
reasoning = "Let me think it over — «carefully»."
[models.flaky]
faults = ["429"]
[answer_key]
file = "{key}"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(module: str, config: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", str(port), "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{module} did not start: {proc.stderr.read()!r}")  # type: ignore[union-attr]
        time.sleep(0.05)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    work = tmp_path_factory.mktemp("lean")
    key = work / "key.json"
    answer_key().save(key)
    config = work / "sim.toml"
    config.write_text(CONFIG.format(key=key))
    started = [
        _start("srbench.simulator", config),
        _start("srbench.simulator.lean", config),
    ]
    try:
        yield {"simulator": started[0][1], "lean": started[1][1]}
    finally:
        for proc, _ in started:
            proc.kill()
            proc.wait()


def _request(model: str, **extra: object) -> dict[str, object]:
    return {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": MCQ_PROMPT}],
        **extra,
    }


@pytest.mark.parametrize("model", ["paced", "fast"])
@pytest.mark.parametrize("seed", [None, 3])
def test_same_raw_body_as_the_simulator(
    servers: dict[str, str], model: str, seed: int | None
) -> None:
    body = _request(model, **({"seed": seed} if seed is not None else {}))
    head_sim, raw_sim = raw_exchange(servers["simulator"], body, {})
    head_lean, raw_lean = raw_exchange(servers["lean"], body, {})
    assert head_sim.startswith(b"HTTP/1.1 200") and head_lean.startswith(b"HTTP/1.1 200")
    for head in (head_sim, head_lean):
        lowered = head.lower()
        assert b"content-type: text/event-stream; charset=utf-8" in lowered
        assert b"transfer-encoding: chunked" in lowered
    assert raw_lean == raw_sim
    # Several events, each its own chunk, ending with [DONE] and the last chunk.
    assert raw_lean.count(b"\r\ndata: ") >= 5
    assert raw_lean.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def test_paced_and_kept_alive_with_counters(servers: dict[str, str]) -> None:
    url = servers["lean"]
    httpx.post(f"{url}/_sim/reset").raise_for_status()
    with httpx.Client(base_url=url, timeout=10) as client:
        spans = []
        for n in range(2):
            started = time.monotonic()
            with client.stream(
                "POST",
                "/v1/chat/completions",
                json=_request("paced"),
                headers={"x-srbench-call-id": f"call-{n}"},
            ) as response:
                assert response.status_code == 200
                # SSE lines end at CR/LF only (iter_lines would also split at U+2028).
                text = response.read().decode()
                events = [line for line in text.split("\n") if line.startswith("data: ")]
            spans.append(time.monotonic() - started)
            assert events[-1] == "data: [DONE]"
            usage = json.loads(events[-2][6:])["usage"]
            deltas = usage["completion_tokens"]
        stats = client.get("/_sim/stats").json()
        streams = client.get("/_sim/streams").json()["streams"]
    # TTFT 0.2 s, then one delta every 0.02 s: a lower bound only (it holds at any load).
    assert min(spans) >= 0.2 + (deltas - 1) * 0.02 - 0.01
    assert stats["chat_requests"] == 2 and stats["by_call_id"] == {"call-0": 1, "call-1": 1}
    assert stats["stream_ttft_ms"]["count"] == 2 and stats["stream_ttft_ms"]["p50"] >= 195
    assert stats["stream_late_ms"]["count"] == 2
    assert stats["max_open_streams"] == 1 and stats["open_streams"] == 0
    assert [s["call_id"] for s in streams] == ["call-0", "call-1"]
    for stream in streams:
        assert stream["first_delta_at"] - stream["arrived_at"] >= 0.195
        assert stream["last_delta_at"] >= stream["first_delta_at"]


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (_request("paced", stream=False), {}, 400, "not_supported"),
        (_request("flaky"), {}, 400, "not_supported"),
        (_request("paced"), {"x-sim-fault": "500"}, 400, "not_supported"),
        (_request("nope"), {}, 404, "model_not_found"),
        ({"model": "paced"}, {}, 400, "invalid_request"),
    ],
)
def test_refuses_what_it_does_not_serve(
    servers: dict[str, str], body: dict, headers: dict, status: int, code: str
) -> None:
    with httpx.Client(base_url=servers["lean"], timeout=10) as client:
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == status
        assert response.json()["error"]["code"] == code
        # The connection is still good for the next request.
        assert client.get("/health").json() == {"status": "ok"}
