"""Running an asyncio exchange from a synchronous test: on a fresh event loop in a thread of its
own, as a worker's driver runs. The thread is needed because the suite's browser tests
(Playwright's sync API) may leave an event loop marked as running in the main thread, where
`asyncio.run` would then refuse to start."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine
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
