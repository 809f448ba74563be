"""The engine's HTTP/1.1 client: a public httpx transport (``httpx.AsyncBaseTransport``) over
asyncio protocols, with its own keep-alive pool and its own HTTP/1.1 framing.

Why not httpcore + h11 underneath: a model stream is thousands of small chunked-encoding
pieces a second, and every piece went through about ten Python layers (httpcore's connection,
its byte stream, h11's event machine and readers, anyio-style checkpoints) before the engine saw
its bytes — the largest share of the worker's CPU per chunk (docs/performance.md). Here one
socket read is one ``data_received``; the chunked decoder splits it with ``bytes.find`` and
hands out every complete piece of the read at once.

Semantics are those httpx documents for its own transports: a stream returns the body bytes;
``ReadTimeout`` after the read timeout without bytes; ``RemoteProtocolError`` for a body cut
short or a malformed response; ``ReadError``/``WriteError`` for a broken connection;
``ConnectError``/``ConnectTimeout`` when no connection could be made. A request is never sent
twice: a pooled connection is handed out only idle, unexpired and not closed by its peer.

Unexpired means idle for less than ``srbench.keepalive.KEEPALIVE_EXPIRY_S`` (why: that
module) and less than the server's own ``Keep-Alive: timeout`` less a second. TTFT counts from
the request's send, after any connect.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

# Stop reading a socket whose unread bytes exceed this (the reader is slower than the server).
HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024
MAX_HEAD_BYTES = 64 * 1024  # status line and headers of a response
MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
# A request's extension: a callable asked just before its bytes are written; False holds the
# request (RequestHeld), which has then not left (the driver's lease check, runs/engine/calls.py).
SEND_GATE = "srbench_send_gate"
# A server's advertised `Keep-Alive: timeout=N` is trusted for at most N less this margin.
ADVERTISED_MARGIN_S = 1.0


class RequestHeld(Exception):  # noqa: N818 - a state: nothing was sent
    """The send gate said no: not a byte of the request was written."""


_STATUS = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class _Protocol(asyncio.Protocol):
    """A socket's bytes as they arrive, a waiter for the next ones, and one idle timer per
    connection (re-armed lazily, not per read)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        # time.monotonic() when each chunk came off the socket, before any other work of the
        # event loop: what TTFT is measured at.
        self.stamps: deque[float] = deque()
        self.size = 0
        self.eof = False
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.paused_reading = False
        self.paused_writing = False
        self.drainer: asyncio.Future[None] | None = None
        # While a body is pumped (Connection.pump) its reads go to the pump, not the queue.
        self.pump: _Pump | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        pump = self.pump
        if pump is not None:
            pump.feed(data, time.monotonic())
            return
        self.chunks.append(data)
        self.stamps.append(time.monotonic())
        self.size += len(data)
        if self.size > HIGH_WATER and not self.paused_reading and self.transport is not None:
            self.paused_reading = True
            self.transport.pause_reading()
        reader = self.reader
        if reader is not None and not reader.done():
            reader.set_result(None)

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
        if self.pump is not None:
            self.pump.closed(self.error)
            return
        reader = self.reader
        if reader is not None and not reader.done():
            reader.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(httpx.ReadTimeout("no bytes within the read timeout"))


class Connection:
    """One HTTP/1.1 connection: write a request, read a response head, then its body."""

    def __init__(
        self, key: tuple[str, str, int], transport: asyncio.Transport, protocol: _Protocol
    ):
        self.key = key
        self.transport = transport
        self.protocol = protocol
        self.buffer = b""  # bytes read from the socket and not consumed yet
        self.read_at: float | None = None  # when the bytes of the last recv() arrived
        self.sent_at: float | None = None  # when the last request was handed to the socket
        self.body_done = True
        self.framing: int | None = None  # of the body being read (see body())
        self.body_timeout: float | None = None
        self.idle_since = 0.0
        self.reusable = True
        # The server's `Keep-Alive: timeout` less ADVERTISED_MARGIN_S (None: not advertised).
        self.expiry: float | None = None
        # One idle-timeout timer per connection, re-armed when it fires early, instead of a
        # timer created and cancelled for every read.
        self.timer: asyncio.TimerHandle | None = None
        self.wait_started = 0.0
        self.timeout: float | None = None

    # --- bytes in and out -----------------------------------------------------------------

    async def recv(self, timeout: float | None) -> bytes:
        """The next bytes from the socket (b"" at end of stream)."""
        p = self.protocol
        if not p.chunks and not p.eof:
            loop = asyncio.get_running_loop()
            p.reader = reader = loop.create_future()
            self.wait_started = loop.time()
            self._arm(timeout)
            try:
                await reader
            finally:
                p.reader = None
        if not p.chunks:
            if p.error is not None:
                raise httpx.ReadError(str(p.error) or type(p.error).__name__)
            return b""
        chunk = p.chunks.popleft()
        self.read_at = p.stamps.popleft()
        p.size -= len(chunk)
        if p.paused_reading and p.size <= LOW_WATER and not self.transport.is_closing():
            p.paused_reading = False
            self.transport.resume_reading()
        return chunk

    def _arm(self, timeout: float | None) -> None:
        """Make sure the idle timer runs for a read waiting since ``wait_started``."""
        if timeout is not None and (self.timer is None or timeout != self.timeout):
            if self.timer is not None:
                self.timer.cancel()
            self.timeout = timeout
            self.timer = asyncio.get_running_loop().call_at(
                self.wait_started + timeout, self._check
            )

    def _check(self) -> None:
        """The idle timer: expire a read that has waited the whole timeout, else re-arm for
        the read waiting now (or disarm while nobody reads)."""
        self.timer = None
        reader, timeout = self.protocol.reader, self.timeout
        if reader is None or reader.done() or timeout is None:
            return
        loop = asyncio.get_running_loop()
        due = self.wait_started + timeout
        if loop.time() >= due:
            _expire(reader)
        else:
            self.timer = loop.call_at(due, self._check)

    async def send(self, data: bytes, timeout: float | None) -> None:
        p = self.protocol
        if p.eof or self.transport.is_closing():
            raise httpx.WriteError("the connection is closed")
        self.transport.write(data)
        self.sent_at = time.monotonic()
        if p.paused_writing:
            p.drainer = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await p.drainer
            except TimeoutError as exc:
                raise httpx.WriteTimeout("write timed out") from exc
            finally:
                p.drainer = None
            if p.error is not None or self.transport.is_closing():
                raise httpx.WriteError("the connection closed while writing")

    def idle_ok(self, now: float, expiry: float | None) -> bool:
        """Idle, unexpired, and neither closed nor sending anything unasked by its peer."""
        p = self.protocol
        if p.eof or p.chunks or self.buffer or self.transport.is_closing():
            return False
        if self.expiry is not None:
            expiry = self.expiry if expiry is None else min(expiry, self.expiry)
        return expiry is None or now - self.idle_since < expiry

    def close(self) -> None:
        self.reusable = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.transport.close()

    # --- a response ------------------------------------------------------------------------

    async def read_head(self, timeout: float | None) -> tuple[int, bytes, list, bool]:
        """(status, reason, headers, HTTP/1.1) of the next final response head."""
        while True:
            buf = self.buffer
            end = buf.find(b"\r\n\r\n")
            while end == -1:
                if len(buf) > MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError("response head too large")
                more = await self.recv(timeout)
                if not more:
                    raise httpx.RemoteProtocolError("server disconnected without a response")
                buf += more
                end = buf.find(b"\r\n\r\n", max(0, len(buf) - len(more) - 3))
            self.buffer = buf[end + 4 :]
            lines = buf[:end].split(b"\r\n")
            match = _STATUS.fullmatch(lines[0])
            if match is None:
                raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:100]!r}")
            headers = []
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if not sep or _TOKEN.fullmatch(name) is None or b"\n" in value or b"\r" in value:
                    raise httpx.RemoteProtocolError(f"malformed header line {line[:100]!r}")
                headers.append((name, value.strip(b" \t")))
            status = int(match.group(2))
            if 100 <= status < 200 and status != 101:
                continue  # an interim response: the final one follows
            return status, match.group(3) or b"", headers, match.group(1) == b"1"

    def body(self, framing: int | None, timeout: float | None) -> AsyncIterator[bytes]:
        """The body: ``framing`` is -1 for chunked, a length, or None (until the peer closes).
        ``body_done`` turns true only when it was read to its end. A chunked body may be
        read with :meth:`pump` instead of this iterator."""
        self.body_done = False
        self.framing, self.body_timeout = framing, timeout
        return self._chunked(timeout) if framing == -1 else self._sized(framing, timeout)

    async def pump(self, sink: Callable[[bytes, float], bool]) -> None:
        """Read a chunked body (the response's, unread so far) by handing the complete pieces
        of every read to ``sink(data, read_at)`` from the protocol's own callback, as the read
        comes off the socket: no task wake-up and no generator step per chunk. ``read_at`` is
        the read's ``time.monotonic()``. ``sink`` returns True to stop: the rest of the body is
        left unread (the connection is then not reused). Framing errors, the read timeout, a
        peer that closes or breaks, and whatever ``sink`` raises, are raised here, as the
        iterator from :meth:`body` raises them."""
        if self.framing != -1:
            raise RuntimeError("pump() reads chunked bodies only")
        p = self.protocol
        pump = _Pump(self, sink, asyncio.get_running_loop().create_future())
        if self.buffer:  # the head's read brought the first bytes of the body
            data, self.buffer = self.buffer, b""
            pump.feed(data, self.read_at or time.monotonic())
        while p.chunks and not pump.future.done():  # reads queued before the pump started
            data = p.chunks.popleft()
            p.size -= len(data)
            pump.feed(data, p.stamps.popleft())
        if p.paused_reading and not self.transport.is_closing():
            p.paused_reading = False
            self.transport.resume_reading()
        if p.eof and not pump.future.done():
            pump.closed(p.error)
        if not pump.future.done():
            p.pump, p.reader = pump, pump.future
            self.wait_started = asyncio.get_running_loop().time()
            self._arm(self.body_timeout)
        try:
            rest = await pump.future
        finally:
            p.pump = p.reader = None
        if rest is not None:  # the last chunk came: its trailers follow
            await self._trailers(rest, self.body_timeout)
            self.body_done = True

    async def _sized(self, framing: int | None, timeout: float | None) -> AsyncIterator[bytes]:
        left = framing
        while left is None or left > 0:
            data, self.buffer = (
                (self.buffer, b"") if self.buffer else (await self.recv(timeout), b"")
            )
            if not data:
                if left is None:
                    self.reusable = False
                    self.body_done = True
                    return
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            if left is not None:
                if len(data) > left:
                    data, self.buffer = data[:left], data[left:]
                left -= len(data)
            yield data
        self.body_done = True

    async def _more(self, buf: bytes, timeout: float | None) -> bytes:
        more = await self.recv(timeout)
        if not more:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        return buf + more if buf else more

    async def _chunked(self, timeout: float | None) -> AsyncIterator[bytes]:
        """Chunked transfer coding: every complete piece a read brought is handed out at once
        (joined), so a read carrying several pieces costs one iteration of the reader. The
        read is walked by position (no copy of what is left after each piece), and the next
        read is awaited here directly (no helper coroutine per chunk)."""
        buf, self.buffer = self.buffer, b""
        state = [0, False]  # bytes of the current chunk still to come; its CRLF still due
        while True:
            out: list[bytes] = []
            pos = _chunk_pieces(buf, state, out)
            if pos < 0:  # the last chunk: trailers follow from -pos - 1
                if out:
                    yield b"".join(out)
                await self._trailers(buf[-pos - 1 :], timeout)
                self.body_done = True
                return
            if out:
                yield out[0] if len(out) == 1 else b"".join(out)
            more = await self.recv(timeout)
            if not more:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            buf = buf[pos:] + more if pos < len(buf) else more

    async def _trailers(self, buf: bytes, timeout: float | None) -> None:
        while True:
            if buf.startswith(b"\r\n"):
                self.buffer = buf[2:]
                return
            end = buf.find(b"\r\n\r\n")
            if end != -1:
                self.buffer = buf[end + 4 :]
                return
            if len(buf) > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("trailers too large")
            buf = await self._more(buf, timeout)


class _Pump:
    """A chunked body fed to a sink from the protocol's callback (Connection.pump). Its
    future's result is the bytes after the last chunk's size line (the trailers), or None if
    the sink stopped the read."""

    def __init__(
        self, conn: Connection, sink: Callable[[bytes, float], bool], future: asyncio.Future
    ) -> None:
        self.conn = conn
        self.sink = sink
        self.future = future
        self.buf = b""
        self.state = [0, False]

    def feed(self, data: bytes, read_at: float) -> None:
        future = self.future
        if future.done():
            return
        conn = self.conn
        # A read arrived: it is the last arrival, and the idle timeout counts from it (the
        # event loop's clock is time.monotonic(), as the stamp).
        conn.read_at = conn.wait_started = read_at
        buf = self.buf + data if self.buf else data
        out: list[bytes] = []
        try:
            pos = _chunk_pieces(buf, self.state, out)
            stop = bool(out) and self.sink(out[0] if len(out) == 1 else b"".join(out), read_at)
        except Exception as exc:  # the sink's own errors too: the reader gets them
            self._end(error=exc)
            return
        if stop:
            self._end()
        elif pos < 0:
            self._end(rest=buf[-pos - 1 :])
        else:
            self.buf = buf[pos:] if pos < len(buf) else b""

    def closed(self, error: BaseException | None) -> None:
        """The peer closed (or broke) the connection before the body ended."""
        if self.future.done():
            return
        if error is not None:
            self._end(error=httpx.ReadError(str(error) or type(error).__name__))
        else:
            self._end(
                error=httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            )

    def _end(self, *, rest: bytes | None = None, error: Exception | None = None) -> None:
        # Detached at once: reads that come before the reader runs again (the trailers) queue
        # for recv() as usual.
        protocol = self.conn.protocol
        if protocol.pump is self:
            protocol.pump = protocol.reader = None
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(rest)


def _chunk_pieces(buf: bytes, state: list, out: list[bytes]) -> int:
    """Cut the chunked-coding pieces of ``buf`` into ``out``; ``state`` is [bytes of the
    current chunk still to come, whether its CRLF is still due], updated in place. Returns how
    many bytes of ``buf`` were used, or -(that + 1) when the last (zero-size) chunk's size line
    ended: its trailers start there."""
    size, need_crlf = state
    pos, end = 0, len(buf)
    while True:
        if size:
            if end - pos < size:
                if end > pos:
                    out.append(buf[pos:] if pos else buf)
                    size -= end - pos
                    pos = end
                break
            out.append(buf[pos : pos + size])
            pos += size
            size = 0
            need_crlf = True
        if need_crlf:
            if end - pos < 2:
                if end > pos and buf[pos] != 13:
                    raise httpx.RemoteProtocolError("chunk data not followed by CRLF")
                break
            if buf[pos] != 13 or buf[pos + 1] != 10:
                raise httpx.RemoteProtocolError("chunk data not followed by CRLF")
            pos += 2
            need_crlf = False
        line_end = buf.find(b"\r\n", pos)
        if line_end == -1:
            if end - pos > MAX_CHUNK_LINE:
                raise httpx.RemoteProtocolError("chunk size line too long")
            break
        field = buf[pos:line_end]
        if b";" in field:
            field = field.split(b";", 1)[0]
        field = field.strip(b" \t")
        if _HEX.fullmatch(field) is None:
            raise httpx.RemoteProtocolError(f"malformed chunk size {field[:40]!r}")
        pos = line_end + 2
        size = int(field, 16)
        if size == 0:
            return -pos - 1
    state[0], state[1] = size, need_crlf
    return pos


def _framing(method: bytes, status: int, headers: list[tuple[bytes, bytes]]) -> int | None:
    """-1 chunked, a Content-Length, or None (read until close), per RFC 9112 §6.3."""
    if method == b"HEAD" or status in (204, 304):
        return 0
    coding = [v for n, v in headers if n.lower() == b"transfer-encoding"]
    if coding:
        if b",".join(coding).split(b",")[-1].strip().lower() != b"chunked":
            raise httpx.RemoteProtocolError("unsupported transfer-encoding")
        return -1
    lengths = {v.strip() for n, v in headers if n.lower() == b"content-length"}
    if not lengths:
        return None
    if len(lengths) > 1 or not next(iter(lengths)).isdigit():
        raise httpx.RemoteProtocolError("malformed Content-Length")
    return int(next(iter(lengths)))


def _keeps_alive(http11: bool, headers: list[tuple[bytes, bytes]]) -> bool:
    tokens = {
        t.strip().lower() for n, v in headers if n.lower() == b"connection" for t in v.split(b",")
    }
    return b"keep-alive" in tokens if not http11 else b"close" not in tokens


_KEEP_ALIVE_TIMEOUT = re.compile(rb"(?:^|[,;\s])timeout\s*=\s*\"?([0-9]{1,9})", re.IGNORECASE)


def _advertised_expiry(headers: list[tuple[bytes, bytes]]) -> float | None:
    """How long the server's `Keep-Alive: timeout=N` lets a connection idle, with a margin
    (0: not at all); None when the server does not say (RFC 9112 leaves the header advisory)."""
    found = [
        int(m.group(1))
        for n, v in headers
        if n.lower() == b"keep-alive"
        for m in [_KEEP_ALIVE_TIMEOUT.search(v)]
        if m is not None
    ]
    return max(0.0, min(found) - ADVERTISED_MARGIN_S) if found else None


def _request_bytes(request: httpx.Request, body: bytes) -> bytes:
    """The request on the wire (a body of unknown length goes as one chunk)."""
    method = request.method.encode("ascii")
    lines = [method + b" " + request.url.raw_path + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        if not _TOKEN.fullmatch(name) or any(c in value for c in (b"\r", b"\n", b"\x00")):
            raise httpx.LocalProtocolError(f"illegal header {name!r}")
        lines.append(name + b": " + value)
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    if request.headers.get("transfer-encoding", "").lower() == "chunked":
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    return head + body


class _ResponseStream(httpx.AsyncByteStream):
    """The response body; its close gives the connection back to the pool (or closes it)."""

    def __init__(self, pool: EnginePool, conn: Connection, framing: int | None, timeout: Any):
        self._pool = pool
        self._conn: Connection | None = conn
        self._body = conn.body(framing, timeout)

    def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[override]
        return self._body  # the body's own generator: no extra layer per chunk

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        await self._body.aclose()  # type: ignore[attr-defined]
        if not conn.body_done:
            conn.reusable = False  # unread body bytes would be the next response's head
        self._pool.release(conn)


class EnginePool:
    """Keep-alive connections per origin with O(1) work per request: idle connections wait on
    a stack per origin, a semaphore caps the connections in use."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int | None,
        max_keepalive_connections: int | None,
        keepalive_expiry: float | None,
    ) -> None:
        # None: the system trust store, loaded at the first https connection (loading it costs
        # about 0.1 s of CPU, which a run of loopback or plain-HTTP targets need not pay).
        self.ssl_context = ssl_context
        self.max_keepalive = max_keepalive_connections
        self.keepalive_expiry = keepalive_expiry
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._idle_count = 0

    async def connect(self, key: tuple[str, str, int], timeout: float | None) -> Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls = scheme == "https"
        if tls and self.ssl_context is None:
            self.ssl_context = httpx.create_ssl_context(trust_env=False)
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol,
                    host,
                    port,
                    ssl=self.ssl_context if tls else None,
                    server_hostname=host if tls else None,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        conn = Connection(key, transport, protocol)  # type: ignore[arg-type]
        self._open.add(conn)
        return conn

    def take_idle(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if conn.idle_ok(now, self.keepalive_expiry):
                return conn
            self.discard(conn)
        return None

    def discard(self, conn: Connection) -> None:
        self._open.discard(conn)
        conn.close()

    def release(self, conn: Connection) -> None:
        try:
            keep = self.max_keepalive is None or self._idle_count < self.max_keepalive
            if keep and conn.reusable and not conn.protocol.eof:
                conn.idle_since = asyncio.get_running_loop().time()
                self._idle.setdefault(conn.key, []).append(conn)
                self._idle_count += 1
            else:
                self.discard(conn)
        finally:
            if self._slots is not None:
                self._slots.release()

    async def request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        wire = _request_bytes(request, body)
        if self._slots is not None:
            await self._slots.acquire()
        conn = None
        try:
            conn = self.take_idle(key) or await self.connect(key, timeouts.get("connect"))
            gate = request.extensions.get(SEND_GATE)
            if gate is not None and not gate():
                # Checked as late as it can be: from here to the socket's write nothing else
                # runs (no await), so a worker frozen before it sends nothing (issue 34).
                raise RequestHeld("the request did not leave: its claim must be renewed first")
            await conn.send(wire, timeouts.get("write"))
            status, reason, headers, http11 = await conn.read_head(timeouts.get("read"))
            framing = _framing(request.method.encode("ascii"), status, headers)
            conn.reusable = _keeps_alive(http11, headers) and framing is not None
            conn.expiry = _advertised_expiry(headers)
        except BaseException:
            if conn is not None:
                self.discard(conn)
            if self._slots is not None:
                self._slots.release()
            raise
        return httpx.Response(
            status_code=status,
            headers=headers,
            stream=_ResponseStream(self, conn, framing, timeouts.get("read")),
            extensions={
                "http_version": b"HTTP/1.1" if http11 else b"HTTP/1.0",
                "reason_phrase": reason,
                "network_stream": conn,
            },
        )

    async def aclose(self) -> None:
        conns, self._open, self._idle, self._idle_count = list(self._open), set(), {}, 0
        for conn in conns:
            conn.close()


class EngineTransport(httpx.AsyncBaseTransport):
    """httpx's public transport interface over the engine's pool: httpx keeps its
    request/response API; nothing reaches into a dependency's private state."""

    def __init__(self, pool: EnginePool) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._pool.request(request)

    async def aclose(self) -> None:
        await self._pool.aclose()
