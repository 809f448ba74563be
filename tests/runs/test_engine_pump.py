"""The engine's pumped body read (runs/engine/transport.py `Connection.pump`, used by
`Caller._read_sse`): each read's chunked pieces go to a sink from the protocol callback instead
of waking the reading task per chunk (issue 25, CPU per chunk). It must read exactly what the
iterating reader reads, fail the same ways, and stamp TTFT at the read.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.engine import sse, sse_fast, transport
from runs.engine.call_record import Stream
from runs.engine.calls import Activity, Caller, chunk_sink, transport_error
from runs.engine.sse import ChatStreamAccumulator, SSEDecoder, SSEError, SSEEvent
from tests.runs import async_support

HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def serve(handler: Any, test: Any, read: float = 5.0) -> None:
    async_support.serve(handler, test, timeout=httpx.Timeout(10.0, read=read))


def chunked(body: bytes, sizes: list[int], trailer: bytes = b"") -> bytes:
    out, pos, i = [], 0, 0
    while pos < len(body):
        size = max(1, sizes[i % len(sizes)]) if sizes else len(body)
        piece = body[pos : pos + size]
        ext = b";name=value" if i % 3 == 1 else b""  # extensions are legal and ignored
        out.append(b"%X%s\r\n%s\r\n" % (len(piece), ext, piece))
        pos += size
        i += 1
    return b"".join(out) + b"0\r\n" + trailer + b"\r\n"


async def pumped(response: httpx.Response) -> tuple[bytes, list[float]]:
    """The body as the pump hands it out, and the stamps it came with."""
    parts: list[bytes] = []
    stamps: list[float] = []

    def sink(data: bytes, read_at: float) -> bool:
        parts.append(data)
        stamps.append(read_at)
        return False

    await response.extensions["network_stream"].pump(sink)
    return b"".join(parts), stamps


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=st.binary(min_size=0, max_size=3000),
    sizes=st.lists(st.integers(1, 700), max_size=6),
    splits=st.lists(st.integers(1, 400), min_size=1, max_size=6),
    trailer=st.sampled_from([b"", b"x-checksum: 1\r\n"]),
    head_with_body=st.booleans(),
)
def test_a_pumped_body_is_byte_for_byte_the_iterated_one(
    body: bytes, sizes: list[int], splits: list[int], trailer: bytes, head_with_body: bool
) -> None:
    """Any piece sizes and TCP splits, extensions, trailers; the first bytes of the body in
    the head's read or not; and the connection is reused after a pumped body (its trailers
    were consumed) for an iterated one, and the other way round."""
    wire = chunked(body, sizes, trailer)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(3):  # three requests on one keep-alive connection
                await reader.readuntil(b"\r\n\r\n")
                first = wire[: splits[0]] if head_with_body else b""
                writer.write(HEAD + first)
                pos, i = len(first), 0
                while pos < len(wire):
                    step = splits[i % len(splits)]
                    await writer.drain()
                    await asyncio.sleep(0.001)  # separate reads on the client
                    writer.write(wire[pos : pos + step])
                    pos, i = pos + step, i + 1
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        conns = set()
        for how in ("pump", "iterate", "pump"):
            async with client.stream("GET", f"{base}/") as response:
                conn = response.extensions["network_stream"]
                conns.add(id(conn))
                if how == "pump":
                    got, stamps = await pumped(response)
                    assert stamps == sorted(stamps)
                    assert all(s <= time.monotonic() for s in stamps)
                else:
                    got = b"".join([part async for part in response.aiter_raw()])
                assert conn.body_done
            assert got == body
        assert len(conns) == 1

    serve(handler, test)


def test_reads_queued_before_the_pump_starts_keep_their_own_stamps() -> None:
    """Bytes that arrived while nobody read are handed over first, each with the moment it
    came off the socket, not the moment the pump started."""
    marks: dict[str, float] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD)
        await writer.drain()
        await asyncio.sleep(0.05)
        marks["first"] = time.monotonic()
        writer.write(b"3\r\nabc\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"3\r\ndef\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        async with client.stream("GET", f"{base}/") as response:
            while "first" not in marks:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # the first piece is queued by now
            marks["pump"] = time.monotonic()
            got, stamps = await pumped(response)
        assert got == b"abcdef"
        assert marks["first"] <= stamps[0] < marks["pump"] <= stamps[-1]

    serve(handler, test)


@pytest.mark.parametrize(
    "wire",
    [
        b"5\r\nhello\r\nzz\r\n",  # a chunk size that is not hex
        b"5\r\nhelloXX0\r\n\r\n",  # chunk data not followed by CRLF
        b"-1\r\nx\r\n",  # a sign is not hex
        b"0x5\r\nhello\r\n0\r\n\r\n",  # nor is a 0x prefix
        b"5\r\nhel",  # cut inside a chunk
        b"5\r\nhello\r\n",  # cut before the last chunk
        b"5\r\nhello\r\n0\r\nx-trailer: 1\r\n",  # cut inside the trailers
    ],
)
def test_malformed_or_cut_pumped_bodies_are_protocol_errors(wire: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + wire)
        await writer.drain()
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("GET", f"{base}/") as response:
                await pumped(response)

    serve(handler, test)


def test_silence_in_a_pumped_body_is_a_read_timeout_and_the_connection_is_dropped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + b"3\r\nabc\r\n")
        await writer.drain()
        await asyncio.sleep(5)
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("GET", f"{base}/") as response:
                conn = response.extensions["network_stream"]
                await pumped(response)
        assert not conn.reusable and conn.protocol.pump is None

    serve(handler, test, read=0.3)


def test_a_sink_that_stops_or_raises_ends_the_read_and_the_connection_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(HEAD)
                for _ in range(20):
                    writer.write(b"3\r\nabc\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.005)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        seen: list[bytes] = []

        def stop_at_third(data: bytes, read_at: float) -> bool:
            seen.append(data)
            return len(seen) == 3

        async with client.stream("GET", f"{base}/") as response:
            first = response.extensions["network_stream"]
            await first.pump(stop_at_third)
        assert len(seen) == 3 and not first.body_done and not first.reusable

        def explode(data: bytes, read_at: float) -> bool:
            raise SSEError("bad stream")

        with pytest.raises(SSEError, match="bad stream"):
            async with client.stream("GET", f"{base}/") as response:
                second = response.extensions["network_stream"]
                await second.pump(explode)
        assert second is not first and not second.reusable

    serve(handler, test)


ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
DELTA = b'data: {"choices":[{"index":0,"delta":{"content":"A"}}]}\n\n'
TAIL = (
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


def piece(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def read_sse(client: httpx.AsyncClient, url: str, max_chars: int = 10_000) -> Any:
    """`Caller._read_sse` on one response, as `Caller._stream` runs it (its exceptions mapped
    by `transport_error`); returns (stream, activity, connection)."""

    async def go() -> tuple[Stream, Activity, Any]:
        started = time.monotonic()
        stream = Stream(started, None, ChatStreamAccumulator(started_at=started))  # type: ignore[arg-type]
        activity = Activity(stage="streaming", last=time.time())
        caller = SimpleNamespace(limits={"max_output_chars": max_chars})
        conn = None
        try:
            async with client.stream("POST", url, json={}) as response:
                conn = response.extensions["network_stream"]
                await Caller._read_sse(caller, response, stream, activity)  # type: ignore[arg-type]
        except (TimeoutError, httpx.HTTPError, SSEError) as exc:
            stream.error_code, stream.error = transport_error(exc, {"total_timeout_s": 1})
        return stream, activity, conn

    return go()


def test_the_engine_reader_pumps_and_stamps_ttft_at_the_deltas_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through `Caller._read_sse`: the body is pumped (the sink sees it, the task is not
    woken per chunk), the first token is the read that brought the first delta — after the
    server wrote it — and TTFT counts from the request's write."""
    marks: dict[str, float] = {}
    pumps: list[Any] = []
    original = transport.Connection.pump

    def counted(self: transport.Connection, sink: Any) -> Any:
        pumps.append(self)
        return original(self, sink)

    monkeypatch.setattr(transport.Connection, "pump", counted)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + piece(ROLE))
        await writer.drain()
        await asyncio.sleep(0.05)
        marks["sent"] = time.monotonic()
        writer.write(piece(DELTA))
        await writer.drain()
        await asyncio.sleep(0.05)
        marks["after"] = time.monotonic()
        writer.write(piece(TAIL) + b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        stream, activity, conn = await read_sse(client, f"{base}/v1/chat/completions")
        assert pumps == [conn]
        result = stream.acc.result()
        assert result.complete and result.content == "A", result
        assert marks["sent"] <= result.first_token_at < marks["after"]
        assert stream.acc.started_at == conn.sent_at
        assert conn.body_done and conn.protocol.pump is None
        assert bytes(stream.raw) == ROLE + DELTA + TAIL
        assert activity.snapshot() is not None and activity.bytes == len(stream.raw)

    serve(handler, test)


@pytest.mark.parametrize(
    ("body", "max_chars", "code"),
    [
        (
            ROLE + b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 300 + b'"}}]}\n\n',
            100,
            "output_cap",
        ),
        (ROLE + b"data: \xff\xfe\n\n" + TAIL, 10_000, ""),  # invalid UTF-8: the accumulator's error
        (ROLE + b"data: {not json\n\n" + TAIL, 10_000, ""),
    ],
)
def test_guards_and_hostile_bytes_through_the_pump(body: bytes, max_chars: int, code: str) -> None:
    """The output cap stops the pumped read with its error; undecodable or malformed events
    leave the call incomplete with the accumulator's own message — as when iterated."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD)
        for i in range(0, len(body), 40):
            writer.write(piece(body[i : i + 40]))
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        stream, _, conn = await read_sse(client, f"{base}/v1/chat/completions", max_chars)
        assert stream.error_code == code
        result = stream.acc.result()
        if code:
            assert not conn.body_done and not conn.reusable
            assert len(stream.raw) < len(body) + 1
        else:
            assert bytes(stream.raw) == body
            assert not result.complete and result.error
            # Exactly what the same bytes give when fed in one go (the decoder is pure).
            offline = Stream(0.0, None, ChatStreamAccumulator(started_at=0.0))  # type: ignore[arg-type]
            sink = chunk_sink(offline, max_chars)
            assert sink(body, 1.0) is False
            offline.acc.feed_events(offline.decoder.close())
            assert offline.acc.result().error == result.error

    serve(handler, test)


class FakeSocket(asyncio.Transport):
    """A transport that only records: the test plays the socket by calling the protocol."""

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_bytes_after_the_last_chunk_in_the_same_loop_turn_are_not_lost() -> None:
    """The pump lets go of the socket the moment the last chunk's size line is read: the
    trailers' end and the next response's first bytes, arriving before the reader runs again,
    queue for it instead of going to a finished pump."""

    async def go() -> tuple[bytes, list[bytes], bool]:
        protocol = transport._Protocol()
        conn = transport.Connection(("http", "x", 80), FakeSocket(), protocol)
        protocol.connection_made(conn.transport)
        conn.body(-1, 5.0)
        parts: list[bytes] = []
        task = asyncio.ensure_future(conn.pump(lambda data, _: parts.append(data) is not None))
        await asyncio.sleep(0)  # the pump is attached now
        protocol.data_received(b"3\r\nabc\r\n0\r\nx-trailer: 1\r\n")
        protocol.data_received(b"\r\nHTTP/1.1 200 OK")  # same turn: the reader has not run
        await task
        return conn.buffer, parts, conn.body_done

    buffer, parts, done = async_support.run_on_own_loop(go(), timeout=10)
    assert parts == [b"abc"] and done
    assert buffer == b"HTTP/1.1 200 OK"


# --- the decoder's plain events ------------------------------------------------------------

PIECES = [
    b'data: {"choices":[{"index":0,"delta":{"content":"a\\u2028b"}}]}\n\n',
    b'data: {"model":"m","choices":[{"index":0,"delta":{"reasoning":"r"}}]}\n\n',
    b'data:{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":1}}\r\n\r\n',
    b"data: [DONE]\n\n",
    b": ping\n\n",
    b"id: 7\n",
    b"event: error\ndata: boom\n\n",
    b"data: \xff\xfe\n\n",
    b"data: {not json\n\n",
    b"data: [1, 2]\n\n",
    b"data: one\ndata: two\n\n",
    b"retry: 10\ndata: {}\n\n",
    b'data: {"choices":[{"index":0,"delta":{"content":"tail"}}]}',  # no blank line after it
]


class ReferenceAccumulator(ChatStreamAccumulator):
    """The accumulator's event rules as they were before plain events (one method for every
    event): the independent oracle for `consume_data`."""

    def feed_events(self, events: Any) -> None:
        for event in events:
            self.consume(event)

    def consume(self, event: SSEEvent) -> None:
        self.event_count += 1
        number = self.event_count
        if not event.terminated:
            self._unterminated = True
            self._fail(f"stream ended inside event #{number} (no blank line after it)")
            return
        is_done = sse._is_done(event.data)
        if self.done_count:
            if is_done:
                self.done_count += 1
            else:
                self.events_after_done += 1
            return
        if is_done:
            self.done_count += 1
            return
        if self.error is not None:
            return
        if event.decode_error is not None:
            self._fail(f"event #{number}: {event.decode_error}")
            return
        if event.event == "error":
            self._fail(f"error event #{number}: {sse._clip(event.data)}")
            return
        try:
            chunk = sse_fast.json_object(event.data)
        except json.JSONDecodeError as exc:
            clip = sse._clip(event.data)
            self._fail(f"malformed JSON in event #{number}: {exc.msg} at {exc.pos}: {clip}")
            return
        if not isinstance(chunk, dict):
            self._fail(f"event #{number} is JSON but not an object: {sse._clip(event.data)}")
            return
        self._apply_chunk(chunk, number)


def run_decoder(wire: bytes, cuts: list[int], plain: bool, cap: int) -> tuple[Any, Any]:
    decoder = SSEDecoder(max_line_bytes=cap, max_event_bytes=cap)
    acc = (ChatStreamAccumulator if plain else ReferenceAccumulator)(started_at=0.0)
    acc.read_at = 1.0
    seen: list[Any] = []
    try:
        start = 0
        for cut in [*sorted(cuts), len(wire)]:
            piece, start = wire[start:cut], max(start, cut)
            got = decoder.feed_plain(piece) if plain else decoder.feed(piece)
            seen.extend(SSEEvent(e) if isinstance(e, str) else e for e in got)
            acc.feed_events(got)
        closed = decoder.close()
        seen.extend(closed)
        acc.feed_events(closed)
    except SSEError as exc:
        return ("error", type(exc), str(exc), seen), None
    return seen, acc.result()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    picks=st.lists(st.integers(0, len(PIECES) - 1), max_size=12),
    cuts=st.lists(st.integers(0, 2000), max_size=5),
    cap=st.sampled_from([40, 4096]),
)
def test_plain_events_decode_and_accumulate_exactly_as_event_objects(
    picks: list[int], cuts: list[int], cap: int
) -> None:
    """`feed_plain` (plain events as text, what the engine feeds) into the accumulator against
    `feed` (every event an SSEEvent) into the accumulator's rules as they were: the same
    events, the same errors and the same chat result — done markers, events after them, sticky errors, error events, invalid
    UTF-8, malformed JSON, size caps and an event cut by the close, under any split."""
    wire = b"".join(PIECES[i] for i in picks)
    assert run_decoder(wire, cuts, True, cap) == run_decoder(wire, cuts, False, cap)


def test_a_chat_stream_comes_as_plain_text_and_each_event_counts_once() -> None:
    decoder = SSEDecoder()
    first = decoder.feed_plain(PIECES[1])  # the first bytes: plain too (issue 38)
    got = decoder.feed_plain(PIECES[0] + b"id: 7\n\n" + PIECES[0])
    assert [type(e) for e in [*first, *got]] == [str, str, SSEEvent]
    assert got[1].id == "7"  # after an id, an object that carries it
    acc = ChatStreamAccumulator(started_at=0.0)
    acc.feed_events([*first, *got])
    assert acc.event_count == 3 and acc.content == "a\u2028ba\u2028b" and acc.reasoning == "r"
