"""The engine's asyncio network backend behaves like httpx's own at the edges the engine
classifies: a clean stream, an idle read timeout, a connection cut mid-body, a refused connect,
and a keep-alive connection the server closed while it sat in the pool."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from runs.engine.client import engine_client
from tests.runs.async_support import crossing_server, serve


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split()[1]
            if path == b"/stream":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for i in range(5):
                    data = f"data: {i}\n\n".encode()
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                    await asyncio.sleep(0.005)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            elif path == b"/idle":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
                await writer.drain()
                await asyncio.sleep(2)
                return
            elif path == b"/cut":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
                await writer.drain()
                writer.close()
                return
            elif path == b"/once":
                # Keep-alive by HTTP/1.1 default, but the server closes right after answering.
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                writer.close()
                return
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        return


def _run(test) -> None:
    # Read timeout well below /idle's 2 s silence, well above a loaded host's pauses between
    # two chunks of /stream (load 10 on 2 cores, R15).
    serve(_serve, test, timeout=httpx.Timeout(5.0, read=1.0))


def test_a_stream_arrives_whole_and_the_connection_is_reused() -> None:
    async def test(client: httpx.AsyncClient, base: str) -> None:
        seen = set()
        for _ in range(3):
            async with client.stream("GET", f"{base}/stream") as response:
                body = b"".join([chunk async for chunk in response.aiter_raw()])
                seen.add(response.extensions["network_stream"])
            assert body == b"".join(f"data: {i}\n\n".encode() for i in range(5))
        assert len(seen) == 1

    _run(test)


def test_silence_is_a_read_timeout() -> None:
    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("GET", f"{base}/idle") as response:
                async for _ in response.aiter_raw():
                    pass

    _run(test)


def test_a_cut_body_is_a_protocol_error() -> None:
    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("GET", f"{base}/cut") as response:
                async for _ in response.aiter_raw():
                    pass

    _run(test)


def test_a_refused_connect_is_a_connect_error() -> None:
    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(httpx.ConnectError):
            await client.get("http://127.0.0.1:1/")

    _run(test)


def test_a_pooled_connection_the_server_closed_is_not_reused() -> None:
    async def test(client: httpx.AsyncClient, base: str) -> None:
        for _ in range(3):
            response = await client.get(f"{base}/once")
            assert response.text == "ok"
            await asyncio.sleep(0.05)  # the server's close reaches the idle pooled connection

    _run(test)


def test_the_pool_caps_connections_and_gets_them_back_after_failures() -> None:
    async def test(client: httpx.AsyncClient, base: str) -> None:
        async def one() -> bytes:
            async with client.stream("GET", f"{base}/stream") as response:
                return b"".join([chunk async for chunk in response.aiter_raw()])

        for _ in range(3):  # every slot is given back after a timeout or a cut body
            with pytest.raises(httpx.ReadTimeout):
                await client.get(f"{base}/idle")
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get(f"{base}/cut")
        bodies = await asyncio.gather(*(one() for _ in range(12)))
        assert len(set(bodies)) == 1 and bodies[0].startswith(b"data: 0")
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert len(pool._open) <= 4

    _run(test)


def test_the_client_is_built_from_public_interfaces_only() -> None:
    """Issue 25 point 4: the pool sits behind httpx's public `AsyncBaseTransport`, and the
    module never assigns an attribute of another object's private state (an upgrade of httpx
    or httpcore then fails loudly in their public API, not silently in ours)."""
    import ast
    import inspect

    import runs.engine.transport as transport

    client = engine_client(timeout=httpx.Timeout(1.0), limits=httpx.Limits(max_connections=2))
    assert isinstance(client._transport, httpx.AsyncBaseTransport)
    assert type(client._transport).__module__ == "runs.engine.transport"
    foreign_private = [
        ast.unparse(node)
        for node in ast.walk(ast.parse(inspect.getsource(transport)))
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and node.attr.startswith("_")
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]
    assert foreign_private == []


def test_a_closed_send_gate_holds_the_request_before_any_byte_leaves() -> None:
    """Fencing (issue 34): the driver's gate is asked just before the request is written; a
    closed gate raises RequestHeld and the server sees nothing, an open one sends as usual."""
    from runs.engine.transport import SEND_GATE, RequestHeld

    heads: list[bytes] = []

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                heads.append(await reader.readuntil(b"\r\n\r\n"))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return

    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(RequestHeld):
            await client.get(f"{base}/held", extensions={SEND_GATE: lambda: False})
        await asyncio.sleep(0.2)  # anything written would have arrived by now
        assert heads == []
        response = await client.get(f"{base}/sent", extensions={SEND_GATE: lambda: True})
        assert response.content == b"ok" and len(heads) == 1 and b"/sent" in heads[0]

    serve(counting, test, timeout=httpx.Timeout(5.0, read=1.0))


def test_the_send_gate_is_shut_for_a_cell_whose_claim_was_found_gone() -> None:
    """Fencing (issue 34): the leases' known life is one for all of a driver's cells, and a
    renewal that found one cell's claim gone still extends it for the others; the gate and the
    check before a request ask the cell too, so a cell found lost sends nothing even while the
    leases are fresh (a stall trial saw one request leave for a settled cell)."""
    import time
    from types import SimpleNamespace

    from runs.engine.leases import ClaimLost, LeaseHolder
    from runs.engine.transport import SEND_GATE

    holder = LeaseHolder()
    holder.lost, holder.held = set(), {}
    holder.lease_valid_until = time.monotonic() + 60
    lost_cell, kept_cell = holder.send_gate(7)[SEND_GATE], holder.send_gate(8)[SEND_GATE]
    assert lost_cell() and kept_cell()
    holder.lost.add(7)
    assert not lost_cell() and kept_cell()
    with pytest.raises(ClaimLost):
        asyncio.run(holder.lease_check(SimpleNamespace(cell_id=7)))  # type: ignore[arg-type]
    asyncio.run(holder.lease_check(SimpleNamespace(cell_id=8)))  # type: ignore[arg-type]
    holder.lease_valid_until = time.monotonic() - 1  # past the leases' life: shut for all
    assert not kept_cell()


def test_a_connection_is_not_reused_where_a_server_may_be_closing_it() -> None:
    """The demo's run failed in CI with "server disconnected without a response" (stop 53):
    the client reused connections for up to httpx's default 5 s, the very keep-alive of uvicorn
    (vLLM, SGLang, LiteLLM, the test simulator). Here a 5 s server whose close reaches a loaded
    client a second late drops a request on a connection idle for 4 s or more; a call after
    4.2 s idle must go on a new connection and be answered."""

    async def test(client: httpx.AsyncClient, base: str) -> None:
        assert (await client.get(f"{base}/n")).text == "1"
        await asyncio.sleep(0.3)
        assert (await client.get(f"{base}/n")).text == "1"  # reused when fresh
        await asyncio.sleep(4.2)
        assert (await client.get(f"{base}/n")).text == "2"

    serve(crossing_server(4.0), test, timeout=httpx.Timeout(5.0))

    async def gunicorn(client: httpx.AsyncClient, base: str) -> None:
        assert (await client.get(f"{base}/n")).text == "1"
        await asyncio.sleep(1.6)
        assert (await client.get(f"{base}/n")).text == "2"

    # gunicorn's 2 s keep-alive (also under its uvicorn workers), seen half a second late.
    serve(crossing_server(1.5), gunicorn, timeout=httpx.Timeout(5.0))


def test_a_servers_advertised_keep_alive_timeout_is_kept_with_a_margin() -> None:
    """`Keep-Alive: timeout=2` (Apache sends one by default; RFC 9112 leaves it advisory):
    a connection idle for 1.4 s is not reused, one idle for 0.1 s is; `timeout=1` or less is
    not reused at all."""

    async def test(client: httpx.AsyncClient, base: str) -> None:
        assert (await client.get(f"{base}/n")).text == "1"
        await asyncio.sleep(0.1)
        assert (await client.get(f"{base}/n")).text == "1"
        await asyncio.sleep(1.4)
        assert (await client.get(f"{base}/n")).text == "2"

    serve(
        crossing_server(1.2, b"Keep-Alive: timeout=2, max=100\r\n"),
        test,
        timeout=httpx.Timeout(5.0),
    )

    async def at_once(client: httpx.AsyncClient, base: str) -> None:
        assert [(await client.get(f"{base}/n")).text for _ in range(3)] == ["1", "2", "3"]

    serve(crossing_server(60, b"Keep-Alive: timeout=1\r\n"), at_once, timeout=httpx.Timeout(5.0))
