"""The simulator on loopback with a tap on what it receives and sends (issue 37 item 4): the
simulator's own account of every call — request headers and body, and the response bytes —
before a gateway re-encodes it or the engine reads it. Shared by the LiteLLM gateway test and
the direct Messages API test."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from srbench.simulator.config import load_config
from srbench.simulator.server import create_app
from tests.conftest import wait_until
from tests.runs import engine_support as es

BENCHMARKS = ["mmlu-pro", "gpqa"]


@dataclass
class Exchange:
    request: dict[str, Any]
    raw: bytes
    response_id: str | None = None
    usage: dict[str, Any] | None = None
    events: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # the request's, as received


@dataclass
class Tap:
    """ASGI wrapper recording each chat request the simulator received and the bytes it sent
    back: the simulator's own account of every call, before the gateway re-encodes it."""

    app: Any
    exchanges: list[Exchange] = field(default_factory=list)
    path: str = "/v1/chat/completions"

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        request, response = bytearray(), bytearray()

        async def tapped_receive() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                request.extend(message.get("body", b""))
            return message

        async def tapped_send(message: dict) -> None:
            if message["type"] == "http.response.body":
                response.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, tapped_receive, tapped_send)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        exchange = Exchange(request=json.loads(request), raw=bytes(response), headers=headers)
        if self.path != "/v1/chat/completions":
            self.exchanges.append(exchange)
            return
        for chunk in sse_chunks(exchange.raw):
            exchange.events += 1
            exchange.response_id = chunk.get("id", exchange.response_id)
            if isinstance(chunk.get("usage"), dict):
                exchange.usage = chunk["usage"]
        self.exchanges.append(exchange)


def sse_chunks(raw: bytes) -> Iterator[dict[str, Any]]:
    for line in raw.decode("utf-8").splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            yield json.loads(line[5:])


@contextlib.contextmanager
def tapped_simulator(path: str = "/v1/chat/completions") -> Iterator[tuple[str, Tap]]:
    config = load_config(None, {"models": es.FAST_MODELS})
    tap = Tap(create_app(config, answer_key=es.answer_key(BENCHMARKS)), path=path)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(tap, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=30, interval=0.02)
    assert server.started, "simulator did not start"
    try:
        yield f"http://127.0.0.1:{port}", tap
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
