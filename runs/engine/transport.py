"""A lean asyncio network backend for httpx (through httpcore's backend interface).

httpx's default backend (anyio) re-arms the socket in the event loop's selector on every read
(resume_reading/pause_reading: two epoll_ctl calls), wraps every read in a cancel scope, and
checks each idle pooled connection with a select() call. With thousands of small SSE chunks a
second that is a large share of the worker's CPU. This backend keeps each socket registered
for reading, buffers what arrives in the protocol, hands the chunks out as they came (no copy),
and knows an idle connection was closed by its peer without a system call.

Semantics are those of httpcore's own backends: a read returns b"" at a clean end of stream,
raises ``ReadError`` when the connection broke and ``ReadTimeout`` after ``timeout`` seconds
without bytes; a write to a closed connection raises ``WriteError``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore
import httpx

# Stop reading a socket whose unread bytes exceed this (the reader is slower than the server).
HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.eof = False
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.paused_reading = False
        self.paused_writing = False
        self.drainer: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        if self.size > HIGH_WATER and not self.paused_reading and self.transport is not None:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        drainer = self.drainer
        if drainer is not None and not drainer.done():
            drainer.set_result(None)

    def pause_writing(self) -> None:
        self.paused_writing = True

    def resume_writing(self) -> None:
        self.paused_writing = False
        drainer = self.drainer
        if drainer is not None and not drainer.done():
            drainer.set_result(None)

    def _wake(self) -> None:
        reader = self.reader
        if reader is not None and not reader.done():
            reader.set_result(None)


def _expire(future: asyncio.Future[None], exc: type[Exception]) -> None:
    if not future.done():
        future.set_exception(exc())


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def _wait(self, future: asyncio.Future[None], timeout: float | None, exc: type) -> None:
        handle = (
            None
            if timeout is None
            else asyncio.get_running_loop().call_later(timeout, _expire, future, exc)
        )
        try:
            await future
        finally:
            if handle is not None:
                handle.cancel()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.chunks and not p.eof:
            p.reader = asyncio.get_running_loop().create_future()
            try:
                await self._wait(p.reader, timeout, httpcore.ReadTimeout)
            finally:
                p.reader = None
        if not p.chunks:
            if p.error is not None:
                raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
            return b""
        chunk = p.chunks.popleft()
        if len(chunk) > max_bytes:
            p.chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        p.size -= len(chunk)
        if p.paused_reading and p.size <= LOW_WATER and not self._transport.is_closing():
            p.paused_reading = False
            self._transport.resume_reading()
        return chunk

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if p.eof or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if p.paused_writing:
            p.drainer = asyncio.get_running_loop().create_future()
            try:
                await self._wait(p.drainer, timeout, httpcore.WriteTimeout)
            finally:
                p.drainer = None
            if p.error is not None or self._transport.is_closing():
                raise httpcore.WriteError("the connection closed while writing")

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        if transport is None:
            raise httpcore.ConnectError("TLS handshake did not complete")
        self._protocol.transport = transport  # type: ignore[assignment]
        return AsyncioStream(transport, self._protocol)  # type: ignore[arg-type]

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # Idle and readable means the peer closed (or broke) the connection.
            return self._protocol.eof or bool(self._protocol.chunks)
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol,
                    host,
                    port,
                    local_addr=None if local_address is None else (local_address, 0),
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not supported by this backend")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _PooledStream:
    """A response body that gives its connection back to the pool when closed."""

    def __init__(self, stream: Any, pool: LeanPool, origin: Any, conn: Any) -> None:
        self._stream = stream
        self._pool = pool
        self._origin = origin
        self._conn = conn

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # no extra generator layer per chunk

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            await self._pool._release(self._origin, conn)


def _key(origin: Any) -> tuple[bytes, bytes, int]:
    return (origin.scheme, origin.host, origin.port)  # httpcore's Origin is not hashable


class LeanPool:
    """A connection pool with O(1) work per request. httpcore's own pool re-scans every
    connection for every queued request (quadratic in the concurrency: at C = 256 that scan
    was most of the worker's CPU). Here idle connections wait in a stack per origin, and a
    semaphore caps the connections in use. A connection is handed out only idle and
    unexpired; a request that finds it unavailable (httpcore refuses before sending a byte)
    goes to a fresh connection."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int | None,
        max_keepalive_connections: int | None,
        keepalive_expiry: float | None,
        network_backend: httpcore.AsyncNetworkBackend,
    ) -> None:
        self._ssl_context = ssl_context
        self._max_keepalive = max_keepalive_connections
        self._keepalive_expiry = keepalive_expiry
        self._backend = network_backend
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._idle: dict[Any, list[Any]] = {}
        self._open: set[Any] = set()

    def _new(self, origin: Any) -> Any:
        conn = httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=self._backend,
        )
        self._open.add(conn)
        return conn

    async def _take(self, origin: Any) -> Any:
        idle = self._idle.get(_key(origin))
        while idle:
            conn = idle.pop()
            if conn.is_idle() and not conn.has_expired():
                return conn
            await self._discard(conn)
        return self._new(origin)

    async def _discard(self, conn: Any) -> None:
        self._open.discard(conn)
        await conn.aclose()

    async def _release(self, origin: Any, conn: Any) -> None:
        try:
            idle = self._idle.setdefault(_key(origin), [])
            keep = self._max_keepalive is None or sum(map(len, self._idle.values())) < (
                self._max_keepalive
            )
            if keep and conn.is_idle() and not conn.has_expired():
                idle.append(conn)
            else:
                await self._discard(conn)
        finally:
            if self._slots is not None:
                self._slots.release()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        origin = request.url.origin
        if self._slots is not None:
            await self._slots.acquire()
        conn = None
        try:
            while True:
                conn = await self._take(origin)
                try:
                    response = await conn.handle_async_request(request)
                    break
                except httpcore.ConnectionNotAvailable:
                    # Refused before any byte left: the request was not sent on it.
                    await self._discard(conn)
        except BaseException:
            if conn is not None:
                await self._discard(conn)
            if self._slots is not None:
                self._slots.release()
            raise
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_PooledStream(response.stream, self, origin, conn),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        conns, self._open, self._idle = list(self._open), set(), {}
        for conn in conns:
            await conn.aclose()

    async def __aenter__(self) -> LeanPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# httpcore's exceptions → httpx's, most specific first (an httpcore exception class is looked
# up along its MRO, so a subclass httpcore adds later still maps to its nearest known parent).
_EXCEPTIONS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.ProtocolError: httpx.ProtocolError,
}


def _httpx_error(exc: Exception, request: httpx.Request) -> Exception:
    for cls in type(exc).__mro__:
        mapped = _EXCEPTIONS.get(cls)
        if mapped is not None:
            return mapped(str(exc), request=request)
    return exc


class _ResponseStream(httpx.AsyncByteStream):
    """The response body as httpx sees it: httpcore's chunks as they come, errors mapped to
    httpx's once around the loop (not a context manager per chunk)."""

    def __init__(self, stream: _PooledStream, request: httpx.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except Exception as exc:
            mapped = _httpx_error(exc, self._request)
            if mapped is exc:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


class EngineTransport(httpx.AsyncBaseTransport):
    """httpx's public transport interface over the lean pool: httpx keeps its request/response
    API, h11 its HTTP/1.1 parsing, and nothing reaches into a dependency's private state."""

    def __init__(self, pool: LeanPool) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,  # type: ignore[arg-type]
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            mapped = _httpx_error(exc, request)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream, request),  # type: ignore[arg-type]
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def engine_client(*, timeout: httpx.Timeout, limits: httpx.Limits) -> httpx.AsyncClient:
    """The engine's HTTP client: httpx's API and HTTP/1.1 handling on the lean backend. No
    proxies from the environment, no retries (a request that left is never sent again)."""
    pool = LeanPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=AsyncioBackend(),
    )
    return httpx.AsyncClient(timeout=timeout, transport=EngineTransport(pool), trust_env=False)
