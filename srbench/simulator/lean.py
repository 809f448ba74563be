"""The simulator's streams on a lean HTTP/1.1 server, for load benchmarks only.

At C = 1,024 the simulator needs 1.2–1.4 cores for the events a run of the engine reads
(docs/performance.md, issue 38 item 2): each event goes through an asyncio task's sleep, an
ASGI message and uvicorn's flow control. On a 2-core machine that left the engine's worker less
than a core, so the fake server was a bottleneck of the measurement. This server sends the same
events — the simulator's own ``generate`` and ``sse_body``, so the same bytes per event, one
chunked-encoding chunk per event, on the same schedule (role at once, delta ``i`` due at
``first token + i * interval``, the tail after the last delta) — from one timer callback per
event on the protocol, with no task, no ASGI and no middleware.

What it serves: ``POST /v1/chat/completions`` with ``"stream": true`` for the config's plain
models (no routers, no faults, no context limit: those stay the simulator's — a request for
them is refused with 400 naming this), ``GET /health``, and the counters a benchmark reads —
``GET /_sim/stats``, ``GET /_sim/streams``, ``POST /_sim/reset`` — kept as the simulator keeps
them (``Counters``): the server's own TTFT from the request's first bytes read to the first
delta written, and its lateness at each stream's last delta.

``python -m srbench.simulator.lean --config PATH [--port P]``; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from srbench.canonical import json_text
from srbench.simulator.config import ModelSpec, SimConfig, load_config
from srbench.simulator.generation import ResponseIdentity, SSEBody, sse_body
from srbench.simulator.server import (
    CALL_ID_HEADER,
    Counters,
    SimState,
    configured_answer_key,
    generate,
)

# The fake servers a load benchmark may run (`--server`), by name: the module to run with
# `python -m`. Both answer from the same config with the same bytes per stream.
FAKE_SERVERS = {"simulator": "srbench.simulator", "lean": "srbench.simulator.lean"}
MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
_CALL_ID = CALL_ID_HEADER.encode()
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
_LAST_CHUNK = b"0\r\n\r\n"


def _framed(event: bytes) -> bytes:
    """One event as one chunked-encoding chunk."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def _json_response(status: int, payload: Any) -> bytes:
    body = json_text(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        reason.encode(),
        len(body),
        body,
    )


def _error(status: int, message: str, code: str) -> bytes:
    return _json_response(
        status, {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    )


class LeanServer:
    """The state every connection shares: the simulator's config, answer key and counters."""

    def __init__(self, config: SimConfig) -> None:
        self.state = SimState(config, configured_answer_key(config))

    def chat(self, body: Any, call_id: str | None) -> bytes | SSEBody:
        """The stream's events for a chat request, or a whole error response."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "messages must be a list", "invalid_request")
        requested = str(body.get("model", ""))
        spec = self.state.active.resolve(requested)
        if not isinstance(spec, ModelSpec):
            return _error(404, f"model {requested!r} is not a plain model here", "model_not_found")
        if not body.get("stream") or spec.faults or spec.context_tokens or spec.max_whole_streams:
            return _error(
                400,
                "the lean server sends plain streams only; a non-streamed request, faults and "
                "context limits are the simulator's (python -m srbench.simulator)",
                "not_supported",
            )
        seed = body["seed"] if isinstance(body.get("seed"), int) else self.state.active.seed
        final = generate(self.state, [spec], body, seed, frozenset())[-1]
        options = body.get("stream_options") or {}
        return sse_body(
            final,
            ResponseIdentity.of(requested, body, seed),
            include_usage=bool(options.get("include_usage")),
            faults=frozenset(),
            stall_seconds=0.0,
        )


class _Stream:
    """One response's events on their schedule, each written by a timer callback."""

    __slots__ = (
        "call_id",
        "conn",
        "deltas",
        "first_at",
        "i",
        "interval",
        "received",
        "tail",
        "ttft_s",
    )

    def __init__(self, conn: _Connection, sse: SSEBody, received: float, call_id: str | None):
        self.conn = conn
        self.deltas = [_framed(d) for d in sse.deltas]
        self.tail = b"".join(_framed(t) for t in sse.tail) + _LAST_CHUNK
        self.interval = sse.interval
        self.ttft_s = sse.ttft_s
        self.received = received
        self.call_id = call_id
        self.i = 0
        self.first_at = 0.0
        loop = conn.loop
        conn.write(_STREAM_HEAD + (_framed(sse.role) if sse.role else b""))
        # As the simulator: the pause before the first token counts from the role chunk, and
        # delta i is due i intervals after the first delta actually went out.
        loop.call_at(loop.time() + sse.ttft_s, self.step)

    def step(self) -> None:
        conn = self.conn
        if conn.closed:
            return
        counters = conn.server.state.counters
        i = self.i
        deltas = self.deltas
        if i < len(deltas):
            conn.write(deltas[i])
            if i == 0:
                self.first_at = conn.loop.time()
                now = time.monotonic()
                counters.stream_ttft_ms.append((now - self.received) * 1000)
                if self.call_id is not None:
                    wall = time.time()
                    counters.stream_marks.append((self.call_id, wall - (now - self.received), wall))
            self.i = i = i + 1
            if i < len(deltas):
                conn.loop.call_at(self.first_at + i * self.interval, self.step)
                return
            # The last delta was due ttft + (n - 1) intervals after the request's arrival:
            # how late it went out is the server's own lateness (as the simulator counts it).
            early = self.received + self.ttft_s + (i - 1) * self.interval - time.monotonic()
            counters.stream_late_ms.append(max(0.0, -early) * 1000)
            if self.call_id is not None:
                wall = time.time()
                counters.stream_ends.append((self.call_id, wall, wall + early))
        conn.write(self.tail)
        counters.open_streams -= 1
        conn.stream = None
        conn.done()


class _Connection(asyncio.Protocol):
    """One keep-alive connection: requests one after the other, each answered in full before
    the next is read (HTTP/1.1 without pipelining)."""

    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.arrived: float | None = None
        self.stream: _Stream | None = None
        self.closed = False
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.stream is not None:
            self.server.state.counters.open_streams -= 1
            self.stream = None

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def done(self) -> None:
        """A response has been written whole: close if the request asked to, else go on."""
        if self.close_after:
            self._close(b"")
        else:
            self.next_request()

    def data_received(self, data: bytes) -> None:
        if self.arrived is None:
            self.arrived = time.monotonic()  # the request's first bytes read
        self.buf += data
        if self.stream is None:
            self.next_request()

    def next_request(self) -> None:
        """Answer the request buffered, if it is whole."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._close(_error(400, "request head too large", "invalid_request"))
            return
        lines = buf[:end].split(b"\r\n")
        parts = lines[0].split(b" ")
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            length = -1
        if len(parts) != 3 or length < 0 or length > MAX_BODY:
            self._close(_error(400, "malformed request", "invalid_request"))
            return
        if len(buf) < end + 4 + length:
            return
        body, self.buf = buf[end + 4 : end + 4 + length], buf[end + 4 + length :]
        arrived = self.arrived if self.arrived is not None else time.monotonic()
        self.arrived = time.monotonic() if self.buf else None
        self._answer(parts[0], parts[1], headers, body, arrived)

    def _answer(
        self, method: bytes, path: bytes, headers: dict[bytes, bytes], body: bytes, at: float
    ) -> None:
        counters = self.server.state.counters
        call_id = headers.get(_CALL_ID)
        self.close_after = headers.get(b"connection", b"").lower() == b"close"
        if not path.startswith(b"/_sim"):
            counters.total_requests += 1
            if call_id is not None:
                cid = call_id.decode("latin-1")
                counters.by_call_id[cid] = counters.by_call_id.get(cid, 0) + 1
                counters.call_arrivals.append((cid, time.time()))
        route = (method, path.split(b"?")[0])
        if route == (b"POST", b"/v1/chat/completions"):
            counters.chat_requests += 1
            if b"x-sim-fault" in headers:
                self.write(
                    _error(
                        400, "faults are the simulator's, not the lean server's", "not_supported"
                    )
                )
                return self.done()
            try:
                payload = json.loads(body)
            except ValueError:
                self.write(_error(400, "request body is not JSON", "invalid_json"))
                return self.done()
            answer = self.server.chat(payload, call_id.decode("latin-1") if call_id else None)
            if isinstance(answer, bytes):
                self.write(answer)
                return self.done()
            counters.open_streams += 1
            counters.max_open_streams = max(counters.max_open_streams, counters.open_streams)
            self.stream = _Stream(self, answer, at, call_id.decode("latin-1") if call_id else None)
            return None
        if route == (b"GET", b"/health"):
            self.write(_json_response(200, {"status": "ok"}))
        elif route == (b"GET", b"/_sim/stats"):
            self.write(_json_response(200, counters.as_json()))
        elif route == (b"GET", b"/_sim/streams"):
            self.write(_json_response(200, counters.streams_json()))
        elif route == (b"POST", b"/_sim/reset"):
            self.server.state.counters = Counters()
            self.server.state.cache.clear()
            self.write(_json_response(200, {"reset": True}))
        else:
            self.write(_error(404, f"no route {route[0]!r} {route[1]!r} here", "not_found"))
        return self.done()

    def _close(self, response: bytes) -> None:
        self.write(response)
        self.closed = True
        if self.transport is not None:
            self.transport.close()


async def _serve(config: SimConfig, host: str, port: int) -> None:
    server = LeanServer(config)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: _Connection(server), host, port, backlog=4096, reuse_address=True
    )
    async with listener:
        await listener.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m srbench.simulator.lean")
    parser.add_argument("--config", required=True, help="the simulator's TOML config")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    args = parser.parse_args()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency of the simulator's uvicorn
        runner = asyncio.run
    runner(_serve(load_config(args.config), args.host, args.port))


if __name__ == "__main__":
    main()
