"""Running an asyncio exchange from a synchronous test: on a fresh event loop in a thread of its
own, as a worker's driver runs. The thread is needed because the suite's browser tests
(Playwright's sync API) may leave an event loop marked as running in the main thread, where
`asyncio.run` would then refuse to start."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import httpx

from runs.engine.client import engine_client

type Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
type Exchange = Callable[[httpx.AsyncClient, str], Awaitable[None]]


def run_on_own_loop[T](coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
    """`asyncio.run(coro)` on a thread of its own; its result is returned and its exception
    raised in the calling thread. `timeout` bounds the wait for the result (None: no bound)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=timeout)


def serve(handler: Handler, test: Exchange, *, timeout: httpx.Timeout) -> None:
    """Run `test(client, base_url)` with the engine's HTTP client (`timeout`, at most four
    connections) against an asyncio server on 127.0.0.1 answering with `handler`, on a loop of
    its own."""

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = engine_client(
            timeout=timeout,
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=4),
        )
        try:
            async with client:
                await test(client, f"http://127.0.0.1:{port}")
        finally:
            server.close()

    run_on_own_loop(main())


def crossing_server(close_after_s: float, advertise: bytes = b"") -> Handler:
    """A keep-alive server whose idle close crosses the client's next request: a request read
    on a connection idle for `close_after_s` or longer is dropped unanswered, as when the
    server's close and the request pass each other on the wire. It answers any request with
    the number of connections it has accepted."""
    accepted = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        loop = asyncio.get_running_loop()
        answered = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                for line in head.lower().split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        await reader.readexactly(int(line.split(b":")[1]))
                if answered is not None and loop.time() - answered >= close_after_s:
                    writer.close()
                    return
                body = str(accepted).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s"
                    % (advertise, len(body), body)
                )
                await writer.drain()
                answered = loop.time()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return

    return handler


@contextlib.contextmanager
def serving_in_thread(handler: Handler) -> Iterator[str]:
    """An asyncio server answering with `handler` on 127.0.0.1, on a loop of its own in a
    thread, for a synchronous client; yields its base URL."""
    loop = asyncio.new_event_loop()
    started: concurrent.futures.Future[asyncio.Server] = concurrent.futures.Future()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            started.set_result(await asyncio.start_server(handler, "127.0.0.1", 0))

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    server = started.result(timeout=30)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
