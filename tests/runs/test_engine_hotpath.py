"""The engine's per-chunk path after issue 25 point 3: the shortcuts taken for CPU give exactly
the results of the general rules, and TTFT is the moment the first delta's bytes came off the
socket, not the moment the engine got round to them.

* The SSE decoder cuts whole one-line ``data:`` events out of a chunk without its line machinery
  (``SSEDecoder._whole_events``). A subclass whose shortcut takes nothing is the decoder as it
  stood before (the general line-by-line rules): on hostile inputs, under the same split, both
  must give the same events, the same errors (type and message) and the same chat result.
* The accumulator parses a chunk's JSON without ``json.loads``' whitespace scans: same value or
  the very same error.
* The transport decodes HTTP/1.1 chunked bodies itself: any chunk sizes and any TCP splits give
  the body byte for byte; malformed framing is a protocol error, as h11 made it.
* TTFT (R10.2, issue 25): with work queued in the event loop between a read and its
  processing, the stamp lies between the server's write and the processing — asserted as an
  order of clock readings, not as durations, so it holds at any load.
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

from runs.engine.call_record import Stream
from runs.engine.calls import Activity, Caller
from runs.engine.sse import (
    ChatStreamAccumulator,
    SSEDecoder,
    SSEError,
)
from runs.engine.sse_fast import json_object
from tests.runs import async_support


def fixed(examples: int) -> settings:
    return settings(
        derandomize=True,
        database=None,
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class CountingDecoder(SSEDecoder):
    shortcuts = 0

    def _whole_events(self, chunk: bytes) -> Any:
        events, done = super()._whole_events(chunk)
        self.shortcuts += done > 0  # the shortcut consumed bytes
        return events, done


class LineRulesDecoder(CountingDecoder):
    """The decoder without the shortcut: every byte through the line rules."""

    def _whole_events(self, chunk: bytes) -> Any:
        return [], 0


def decode(pieces: list[bytes], cls: type = CountingDecoder, **caps: int) -> tuple[Any, int]:
    """(events and the chat result they make, or the error; shortcut count)."""
    decoder = cls(**caps)
    acc = ChatStreamAccumulator(clock=lambda: 0.0)
    events = []
    try:
        for piece in pieces:
            got = decoder.feed(piece)
            events.extend(got)
            acc.feed_events(got)
        got = decoder.close()
        events.extend(got)
        acc.feed_events(got)
    except SSEError as exc:
        return (type(exc).__name__, str(exc)), decoder.shortcuts
    return (events, acc.result()), decoder.shortcuts


CHAT_PIECES = st.sampled_from(
    [
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
        b'data:{"choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
        b"data: [DONE]\n\n",
        b'data: {"model":"m"} \n\n',
        b"data: \xff\xfe\n\n",
        b"data: {\n\n",
        b"data: a\ndata: b\n\n",
        b"event: error\ndata: x\n\n",
        b"id: 7\n\n",
        b": ping\n\n",
        b"retry: 5\n",
        b"data\n\n",
        b"\n\n\n",
        b"\r\n",
        b"\r",
        b"\xef\xbb\xbf",
        b"data: " + b"y" * 40 + b"\n\n",
    ]
)
hostile_streams = st.one_of(
    st.lists(CHAT_PIECES, max_size=40).map(b"".join),
    st.binary(max_size=600),
)


@fixed(400)
@given(raw=hostile_streams, cuts=st.lists(st.integers(0, 600), max_size=8))
def test_the_whole_event_shortcut_decodes_exactly_as_the_line_rules(
    raw: bytes, cuts: list[int]
) -> None:
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    for split in (pieces, [raw]):
        reference, shortcuts = decode(split, LineRulesDecoder)
        assert shortcuts == 0
        assert decode(split)[0] == reference


@fixed(300)
@given(
    raw=st.lists(CHAT_PIECES, max_size=30).map(b"".join),
    line=st.integers(1, 60),
    event=st.integers(1, 60),
)
def test_size_caps_refuse_the_same_streams_the_same_way(raw: bytes, line: int, event: int) -> None:
    caps = {"max_line_bytes": line, "max_event_bytes": event}
    assert decode([raw], **caps)[0] == decode([raw], LineRulesDecoder, **caps)[0]


def test_the_shortcut_is_what_a_chat_stream_takes() -> None:
    """Otherwise the equivalence above would prove nothing about the path the engine runs."""
    piece = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    decoder = CountingDecoder()
    for _ in range(6):
        assert len(decoder.feed(piece)) == 1
    # Every chunk, the first too: its BOM check needs no buffer (it took the line rules, and
    # a first read holding many events read them line by line, before issue 38).
    assert decoder.shortcuts == 6


JSON_TEXTS = st.one_of(
    st.sampled_from(
        ['{"a":1}', ' {"a":1}', '{"a":1} ', '{"a":1}x', '{"a":1}{}', "{", "}", "{}}", "{]", ""]
        + ['{"a":"\\ud800"}', '{"a":NaN}', '{"a":1,}', '{"a" 1}', "[1]", "1", '"x"', "{}\n"]
        + ['{"a":1E400}', '{"a":-Infinity}', '\ufeff{"a":1}', '{"a":"\x00"}', '{"a":01}']
        + ['{"a":1.}', '{"a":.5}', '{"a":+1}', '{"a":1,"a":2}', '{"a":-0}', '{"a":-0.0}']
        + [
            '{"\ud800":1}',
            '{"a":"\\uDFFF\\uD800"}',
            '{"a":1e-400}',
            "[" * 50 + "]" * 50,
            "[" * 100_000 + "]" * 100_000,
        ]
    ),
    st.text(alphabet='{}[]":,01 ab\\\n\teE.-+\ufeff\x00\u00e9', max_size=30),
    st.builds(lambda s: "{" + s + "}", st.text(alphabet='{}[]":,01 ab\\eE.-+', max_size=20)),
)
# Values of every JSON type (integers past 64 bits, floats at the edges, any text), written
# with json.dumps' variants: what a server might send.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def strictly(value: Any) -> Any:
    """A value with its types spelled out: 1, 1.0 and True differ; -0.0 is not 0.0."""
    if isinstance(value, dict):
        return ("dict", [(strictly(k), strictly(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [strictly(v) for v in value])
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def outcome(parse: Any, text: str) -> Any:
    try:
        return "value", strictly(parse(text))
    except json.JSONDecodeError as exc:
        return "error", exc.msg, exc.pos
    except RecursionError:
        return "too deep"


@fixed(800)
@given(text=JSON_TEXTS)
def test_chunk_json_is_parsed_exactly_as_json_loads(text: str) -> None:
    """The read path's decoder (msgspec first, json.loads for what it refuses) against
    json.loads: the same value with the same types, or the same error at the same place."""
    assert outcome(json_object, text) == outcome(json.loads, text)


@fixed(300)
@given(
    value=JSON_VALUES,
    ascii_only=st.booleans(),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]),
    indent=st.sampled_from([None, 0, 2, "\t"]),
)
def test_any_json_value_reads_back_exactly_as_json_loads_reads_it(
    value: Any, ascii_only: bool, separators: tuple[str, str], indent: Any
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators, indent=indent)
    assert outcome(json_object, text) == outcome(json.loads, text)


# --- the transport's chunked decoding ---------------------------------------------------------


def serve(handler: Any, test: Any) -> None:
    """Run `test(client, base_url)` against an asyncio server answering with `handler`."""
    async_support.serve(handler, test, timeout=httpx.Timeout(10.0, read=5.0))


def chunked(body: bytes, sizes: list[int], trailer: bytes = b"") -> bytes:
    out, pos, i = [], 0, 0
    while pos < len(body):
        size = max(1, sizes[i % len(sizes)]) if sizes else len(body)
        piece = body[pos : pos + size]
        # Chunk extensions and upper-case hex are legal and must be ignored.
        ext = b";name=value" if i % 3 == 1 else b""
        out.append(b"%X%s\r\n%s\r\n" % (len(piece), ext, piece))
        pos += size
        i += 1
    return b"".join(out) + b"0\r\n" + trailer + b"\r\n"


@fixed(25)
@given(
    body=st.binary(min_size=0, max_size=3000),
    sizes=st.lists(st.integers(1, 700), max_size=6),
    splits=st.lists(st.integers(1, 400), min_size=1, max_size=6),
    trailer=st.sampled_from([b"", b"x-checksum: 1\r\n"]),
)
def test_chunked_bodies_arrive_byte_for_byte_under_any_split(
    body: bytes, sizes: list[int], splits: list[int], trailer: bytes
) -> None:
    wire = chunked(body, sizes, trailer)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(2):  # two requests on one keep-alive connection
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                pos, i = 0, 0
                while pos < len(wire):
                    step = splits[i % len(splits)]
                    writer.write(wire[pos : pos + step])
                    await writer.drain()
                    await asyncio.sleep(0.001)  # separate reads on the client
                    pos, i = pos + step, i + 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        streams = set()
        for _ in range(2):
            async with client.stream("GET", f"{base}/") as response:
                got = b"".join([part async for part in response.aiter_raw()])
                streams.add(id(response.extensions["network_stream"]))
            assert got == body
        assert len(streams) == 1  # the trailer was consumed: the connection was reusable

    serve(handler, test)


@pytest.mark.parametrize(
    "wire",
    [
        b"5\r\nhello\r\nzz\r\n",  # a chunk size that is not hex
        b"5\r\nhelloXX0\r\n\r\n",  # chunk data not followed by CRLF
        b"-1\r\nx\r\n",  # a sign is not hex
        b"0x5\r\nhello\r\n0\r\n\r\n",  # nor is a 0x prefix (int(..., 16) would take it)
        b"5\r\nhel",  # cut inside a chunk
        b"5\r\nhello\r\n",  # cut before the last chunk
    ],
)
def test_malformed_or_cut_chunked_bodies_are_protocol_errors(wire: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + wire)
        await writer.drain()
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("GET", f"{base}/") as response:
                async for _ in response.aiter_raw():
                    pass

    serve(handler, test)


# --- TTFT -------------------------------------------------------------------------------------

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
DELTA = b'data: {"choices":[{"index":0,"delta":{"content":"A"}}]}\n\n'
TAIL = (
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


def test_ttft_is_the_first_deltas_arrival_not_when_the_loop_got_to_it() -> None:
    """R10.2, issue 25 point 3: work queued in the loop ahead of the read (other streams, the
    ledger batcher's completions) must not count as the server's latency. The consumer here
    stalls after the role chunk — meanwhile the first delta arrives — and only then reads it.
    The recorded first-token time must lie after the server's write of the delta and before
    the consumer got to it: ordering of clock readings, true at any load. (The engine's own
    reader takes the bytes in the protocol callback, `Connection.pump`, so it cannot lag its
    stamp; this is the iterating reader, which any other transport gets.)"""
    marks: dict[str, float] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(ROLE), ROLE))
        await writer.drain()
        await asyncio.sleep(0.05)
        marks["sent"] = time.monotonic()
        writer.write(b"%x\r\n%s\r\n" % (len(DELTA), DELTA))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(TAIL), TAIL))
        await writer.drain()
        writer.close()

    async def test(client: httpx.AsyncClient, base: str) -> None:
        started = time.monotonic()
        stream = Stream(started, None, ChatStreamAccumulator(started_at=started))  # type: ignore[arg-type]
        activity = Activity(stage="streaming", last=time.time())
        caller = SimpleNamespace(limits={"max_output_chars": 10_000})
        async with client.stream("POST", f"{base}/v1/chat/completions", json={}) as response:

            async def slow_consumer() -> Any:
                async for chunk in response.aiter_raw():
                    if b'"A"' in chunk:
                        marks["processed"] = time.monotonic()
                    yield chunk
                    if b"assistant" in chunk:
                        # The loop is busy elsewhere until well after the delta arrived.
                        while "sent" not in marks:
                            await asyncio.sleep(0.01)
                        await asyncio.sleep(0.3)

            conn = response.extensions["network_stream"]

            class StampsOnly:  # the connection's stamps, live; no pump
                read_at = property(lambda _: conn.read_at)
                sent_at = property(lambda _: conn.sent_at)

            stamps_only = StampsOnly()
            view = SimpleNamespace(
                headers=response.headers,
                extensions={**response.extensions, "network_stream": stamps_only},
                aiter_raw=slow_consumer,
                aiter_bytes=slow_consumer,
            )
            await Caller._read_sse(caller, view, stream, activity)  # type: ignore[arg-type]
            # TTFT counts from the request leaving (after any connection set-up).
            assert started <= response.extensions["network_stream"].sent_at
            assert stream.acc.started_at == response.extensions["network_stream"].sent_at
        result = stream.acc.result()
        assert result.complete and result.content == "A"
        assert marks["sent"] <= result.first_token_at < marks["processed"]
        # The live activity sees the stream's bytes without a per-chunk write.
        assert activity.snapshot() is not None and activity.bytes == len(stream.raw)
        assert activity.snapshot() is None  # nothing new since

    serve(handler, test)
