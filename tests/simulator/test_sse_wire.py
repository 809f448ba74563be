"""The simulator's streamed replies on the wire: every byte, its HTTP chunk framing, pacing on a
schedule, a client's disconnect, and the server's own TTFT counted from the request's arrival.

The expected bytes are rendered here by the rules the simulator has always followed (one
``json.dumps`` per chunk, the chunk's fields in a fixed order), not by the simulator's
renderer, so a faster renderer must produce exactly what the old one did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from srbench.simulator.config import load_config
from srbench.simulator.generation import (
    Completion,
    ResponseIdentity,
    SSEBody,
    build_completion,
    sse_body,
)
from srbench.simulator.server import CALL_ID_HEADER as CALL_ID
from srbench.simulator.streaming import SSEResponse
from srbench.simulator.testing import running_simulator
from srbench.simulator.tokens import PrefixCache, split_into_pieces
from tests.runs.async_support import run_on_own_loop
from tests.simulator.conftest import MCQ_PROMPT, answer_key

MODELS = {
    "wire": {
        "ttft_s": 0.01,
        "tokens_per_second": 2000.0,
        "chunk_tokens": 2,
        "reasoning": "Let me think it over — «carefully».",
        "prefix_cache": False,
    },
    "wire-anthropic": {"usage_style": "anthropic", "prefix_cache": False, "chunk_tokens": 3},
    "wire-tools": {"use_tools": True, "prefix_cache": False},
    "wire-slow": {"ttft_s": 0.5, "prefix_cache": False},
}
CONFIG = load_config(None, {"models": MODELS})
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
            },
        },
    }
]


@pytest.fixture(scope="module")
def wire_url() -> Iterator[str]:
    with running_simulator(CONFIG, answer_key=answer_key()) as url:
        yield url


@pytest.fixture
def wire(wire_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=wire_url, timeout=10) as client:
        client.post("/_sim/reset").raise_for_status()
        yield client


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def expected_events(
    completion: Completion, ident: ResponseIdentity, include_usage: bool, faults: frozenset[str]
) -> tuple[list[bytes], bool]:
    """(the body's events in order, whether the body is finished) as the simulator always sent
    them."""

    def chunk(choices: Any, **extra: Any) -> bytes:
        fields = {
            "id": ident.id,
            "object": "chat.completion.chunk",
            "created": ident.created,
            "model": completion.model,
            "system_fingerprint": ident.fingerprint,
            "choices": choices,
            **extra,
        }
        return f"data: {dumps(fields)}\n\n".encode()

    def delta(value: dict[str, Any], finish: str | None = None) -> bytes:
        return chunk([{"index": 0, "delta": value, "logprobs": None, "finish_reason": finish}])

    size = completion.spec.chunk_tokens
    deltas = [{"reasoning_content": p} for p in split_into_pieces(completion.reasoning, size)]
    deltas += [{"content": p} for p in split_into_pieces(completion.content, size)]
    for i, call in enumerate(completion.tool_calls):
        head = {"index": i, "id": call.id, "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": p}}]}
            for p in split_into_pieces(call.arguments, size)
        ]
    events = [delta({"role": "assistant", "content": ""})]
    for i, value in enumerate([*deltas, None]):
        if i == len(deltas) // 2:
            if "malformed-chunk" in faults:
                cut = chunk([])[: -len(',"choices":[]}\n\n')]
                events.append(cut + b',"choices":[{"index":0,"delta":{"cont\n\n')
            if "disconnect" in faults:
                return events, False
        if value is not None:
            events.append(delta(value))
    events.append(delta({}, completion.finish_reason))
    if include_usage and "no-usage" not in faults:
        events.append(chunk([], usage=completion.wire_usage()))
    if "no-done" not in faults:
        events.append(b"data: [DONE]\n\n")
    return events, True


def raw_exchange(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[bytes, bytes]:
    """POST over a plain socket with ``Connection: close``; (response head, raw body bytes)."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        f"host: {host}",
        "content-type: application/json",
        f"content-length: {len(payload)}",
        "connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + payload)
        received = b""
        while part := sock.recv(65536):
            received += part
    head, _, raw = received.partition(b"\r\n\r\n")
    return head, raw


def chat(model: str, *, include_usage: bool = True, **extra: Any) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": MCQ_PROMPT}],
        "stream": True,
        **extra,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


CASES = [
    ("wire", True, {}, ""),
    ("wire", False, {}, ""),
    ("wire", True, {}, "no-usage"),
    ("wire", True, {}, "no-done"),
    ("wire", True, {}, "malformed-chunk"),
    ("wire", True, {}, "disconnect"),
    ("wire", True, {}, "malformed-chunk,disconnect"),
    ("wire", True, {}, "stall-mid"),
    ("wire", True, {}, "u2028"),
    ("wire", True, {"max_tokens": 3}, ""),
    ("wire-anthropic", True, {}, "no-done"),
    ("wire-tools", True, {"tools": TOOLS}, ""),
    ("wire-tools", False, {"tools": TOOLS}, "malformed-chunk"),
]


@pytest.mark.parametrize(("model", "include_usage", "extra", "fault"), CASES)
def test_streamed_reply_is_byte_for_byte_the_old_wire_format(
    wire: httpx.Client,
    wire_url: str,
    model: str,
    include_usage: bool,
    extra: dict[str, Any],
    fault: str,
):
    body = chat(model, include_usage=include_usage, **extra)
    headers = {"x-sim-fault": fault, "x-sim-stall-seconds": "0.05"} if fault else {}
    head, raw = raw_exchange(wire_url, body, headers)

    faults = frozenset(f for f in fault.split(",") if f)
    spec = CONFIG.models[model]
    completion = build_completion(
        spec, body, seed=CONFIG.seed, key=answer_key(), cache=PrefixCache(), faults=faults
    )
    ident = ResponseIdentity.of(model, body, CONFIG.seed)
    events, finished = expected_events(completion, ident, include_usage, faults)
    # Every event is its own HTTP chunk, and a finished body ends with the terminator.
    framed = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    assert raw == framed + (b"0\r\n\r\n" if finished else b"")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    assert fields["content-type"] == "text/event-stream; charset=utf-8"
    assert fields["cache-control"] == "no-cache"
    assert fields["transfer-encoding"] == "chunked"
    assert "content-length" not in fields
    stats = wire.get("/_sim/stats").json()
    assert stats["open_streams"] == 0
    assert stats["max_open_streams"] == 1
    assert stats["stream_ttft_ms"]["count"] == 1


def wire_sse() -> SSEBody:
    """The SSE body the simulator renders for model `wire` (its events and schedule)."""
    body = chat("wire")
    completion = build_completion(
        CONFIG.models["wire"],
        body,
        seed=1,
        key=answer_key(),
        cache=PrefixCache(),
        faults=frozenset(),
    )
    return sse_body(
        completion,
        ResponseIdentity.of("wire", body, 1),
        include_usage=True,
        faults=frozenset(),
        stall_seconds=0,
    )


class Counters:
    """The counters a response updates, outside a server."""

    def __init__(self) -> None:
        self.open_streams = self.max_open_streams = 0
        self.stream_ttft_ms: list[float] = []
        self.stream_marks: list[tuple[str, float, float]] = []
        self.stream_late_ms: list[float] = []
        self.stream_ends: list[tuple[str, float, float]] = []


def test_pacing_follows_the_schedule_so_a_late_chunk_does_not_delay_the_next_ones():
    """Delta i is due at first_token_at + i * interval. After one slow send the deltas already
    due go out back to back, without a pause between them; with a fixed pause per chunk they
    would each wait another interval. Counted in event-loop turns, not wall time."""
    sse = wire_sse()
    assert len(sse.deltas) >= 6 and sse.interval == 0.001

    async def scenario() -> tuple[list[bytes], list[int]]:
        turns = 0
        sent: list[bytes] = []
        turns_at: list[int] = []

        async def ticker() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0)
                turns += 1

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message["body"]:
                sent.append(message["body"])
                turns_at.append(turns)
                if message["body"] == sse.deltas[1]:
                    await asyncio.sleep(5 * sse.interval)  # a slow write: deltas 2–5 fall due

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the client stays
            raise AssertionError("unreachable")

        ticking = asyncio.ensure_future(ticker())
        await SSEResponse(sse, Counters(), time.monotonic(), {})({}, receive, send)
        ticking.cancel()
        return sent, turns_at

    sent, turns_at = run_on_own_loop(scenario())
    assert sent == [sse.role, *sse.deltas, *sse.tail]
    # Deltas 2, 3 and 4 went out in the loop turn that delta 2 did: no pause between them.
    assert turns_at[3] == turns_at[4] == turns_at[5]
    # The role chunk and the first delta are a TTFT apart: the loop turned in between.
    assert turns_at[1] > turns_at[0]


def test_a_stream_whose_last_delta_goes_out_late_is_counted_late_by_at_least_the_delay():
    """The server's own lateness (issue 38 item 2): the last delta is due at the request's
    arrival + ttft + (n - 1) intervals; a send of it held for five intervals makes the stream
    at least that late (a sleep never returns early), and a stream that named its call lists
    its hand-over after its due time. Without the stamp the bench could not tell a server too
    slow for its load from a slow engine."""
    sse = dataclasses.replace(wire_sse(), ttft_s=0.0)
    held = 5 * sse.interval

    async def scenario() -> Counters:
        counters = Counters()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message["body"] == sse.deltas[-1]:
                await asyncio.sleep(held)

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the client stays
            raise AssertionError("unreachable")

        response = SSEResponse(sse, counters, time.monotonic(), {}, call_id="call-9")
        await response({}, receive, send)
        return counters

    counters = run_on_own_loop(scenario())
    [late_ms] = counters.stream_late_ms
    assert late_ms >= held * 1000 - 1  # a timer may fire within the clock resolution early
    [(call_id, last, due)] = counters.stream_ends
    assert call_id == "call-9" and last - due >= held - 0.001


def test_the_pause_before_the_first_token_counts_from_the_role_chunk_sent_in_the_handlers_turn():
    """Requests read together (a wave of 256 at C = 256) have their handlers run one after the
    other. Each response's role chunk goes out in its handler's own turn of the loop, and the
    pause before the first token counts from it, even when the stream's own task runs only
    after the later handlers (here the last one holds the loop for a whole TTFT). Begun in that
    task, the pause came on top of every later handler, and the first wave's TTFT with it."""
    ttft = 0.5
    sse = dataclasses.replace(wire_sse(), ttft_s=ttft)

    async def scenario() -> tuple[list[str], dict[str, float]]:
        log: list[str] = []
        at: dict[str, float] = {}

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the clients stay
            raise AssertionError("unreachable")

        async def handler(i: int) -> None:
            async def send(message: dict[str, Any]) -> None:
                for name, event in (("role", sse.role), ("first delta", sse.deltas[0])):
                    if message.get("body") == event:
                        log.append(f"{name} {i}")
                        at[f"{name} {i}"] = time.monotonic()

            log.append(f"handler {i}")
            if i == 2:
                time.sleep(ttft)  # a slow handler holds the loop
            await SSEResponse(sse, Counters(), time.monotonic(), {})({}, receive, send)

        await asyncio.gather(*(handler(i) for i in range(3)))
        return log, at

    log, at = run_on_own_loop(scenario())
    assert log[:6] == ["handler 0", "role 0", "handler 1", "role 1", "handler 2", "role 2"]
    # Stream 0's pause was over when its task first ran: its first delta went out at once,
    # not a TTFT after the slow handler.
    assert at["first delta 0"] - at["role 0"] >= ttft
    assert at["first delta 0"] < at["role 2"] + ttft


def test_client_disconnect_ends_the_stream_during_a_pause(wire: httpx.Client, wire_url: str):
    # A 30 s stall halfway: without the disconnect the stream would stay open for 30 s.
    headers = {"x-sim-fault": "stall-mid", "x-sim-stall-seconds": "30"}
    with (
        httpx.Client(base_url=wire_url, timeout=10) as client,
        client.stream("POST", "/v1/chat/completions", json=chat("wire"), headers=headers) as r,
    ):
        # Keep the iterator: a dropped one closes the response (and the connection).
        parts = r.iter_raw()
        assert next(parts).startswith(b"data: ")
        assert wire.get("/_sim/stats").json()["open_streams"] == 1
    # Leaving the block closes the unread response, and with it the connection.
    deadline = time.monotonic() + 10
    while (stats := wire.get("/_sim/stats").json())["open_streams"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats["open_streams"] == 0
    assert stats["max_open_streams"] == 1


def test_server_ttft_counts_from_the_requests_arrival_not_its_handler(wire_url: str):
    """Two requests pipelined on one connection: the second is read (and stamped) with the
    first, and its handler runs only after the first reply, which takes 0.5 s. Its TTFT counts
    that wait; a stamp taken when its handler started would not."""
    host, port = wire_url.removeprefix("http://").split(":")
    requests = b""
    for model, stream in (("wire-slow", False), ("wire", True)):
        payload = json.dumps(chat(model) | {"stream": stream}).encode()
        requests += (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        ) % (len(payload), payload)
    with httpx.Client(base_url=wire_url, timeout=10) as client:
        client.post("/_sim/reset").raise_for_status()
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(requests)
            received = b""
            while not received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                part = sock.recv(65536)
                assert part, received
                received += part
        ttft = client.get("/_sim/stats").json()["stream_ttft_ms"]
    assert received.count(b"HTTP/1.1 200 OK") == 2
    assert ttft["count"] == 1
    # wire-slow's 0.5 s (its TTFT, not streamed) came before the streamed reply's handler.
    assert ttft["max"] >= 500


def test_streams_lists_each_named_calls_arrival_and_first_delta_in_wall_clock_time(
    wire: httpx.Client, wire_url: str
):
    """GET /_sim/streams: per stream whose request named its call, the request's arrival and
    the first delta's hand-over, in wall-clock time, so that a benchmark can set the server's
    moments beside the engine's for the same call. Both lie between the client's send and its
    read of the first delta, and a TTFT apart at least; a request without the header is not
    listed."""
    with httpx.Client(base_url=wire_url, timeout=10) as client:
        before = time.time()
        with client.stream(
            "POST", "/v1/chat/completions", json=chat("wire"), headers={CALL_ID: "call-7"}
        ) as r:
            # SSE events end with a blank line (LF only here); bytes, never str.splitlines,
            # which would also split on U+2028.
            received = b""
            chunks = r.iter_raw()
            while received.count(b"\n\n") < 2:  # the role chunk, then the first delta
                received += next(chunks)
            read = time.time()
            role, first_delta = received.split(b"\n\n")[:2]
            assert role.startswith(b"data: ") and b'"role":"assistant"' in role
            assert b'"reasoning_content"' in first_delta
            for _ in chunks:
                pass
        client.post("/v1/chat/completions", json=chat("wire")).raise_for_status()
    streams = wire.get("/_sim/streams").json()["streams"]
    assert [s["call_id"] for s in streams] == ["call-7"]
    arrived, first = streams[0]["arrived_at"], streams[0]["first_delta_at"]
    assert before <= arrived <= first <= read
    # The pause runs on uvicorn's uvloop, whose timers count whole milliseconds from the loop's
    # cached time: a 10 ms pause may end up to 1 ms short of the monotonic clock (seen in CI:
    # 9.83 ms).
    assert first - arrived >= CONFIG.models["wire"].ttft_s - 0.001
    # The last delta's hand-over follows the first; its due time is the schedule's.
    assert first <= streams[0]["last_delta_at"] <= time.time()
    assert streams[0]["last_delta_due"] >= arrived
    wire.post("/_sim/reset").raise_for_status()
    assert wire.get("/_sim/streams").json() == {"streams": []}


def test_a_streamed_prompt_past_the_context_is_a_200_with_an_empty_chunked_body():
    """As llama.cpp's server answers it (tests/real/test_llama_long_prompts.py; by hand on
    llama-cpp-python 0.3: the headers, then ``0\\r\\n\\r\\n``): no role chunk, no event, the
    chunked body ended cleanly. The simulator sent a role chunk first."""
    small = {"sim-weak": {"ttft_s": 0.0, "context_tokens": 50}}
    with running_simulator(answer_key=answer_key(), models=small) as url:
        long = {"role": "user", "content": " ".join(["word"] * 400)}
        body = {"model": "sim-weak", "stream": True, "messages": [long]}
        head, raw = raw_exchange(url, body, {})
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding: chunked" in head.lower()
    assert raw == b"0\r\n\r\n"
