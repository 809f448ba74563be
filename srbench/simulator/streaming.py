"""How a streamed completion goes out: ``SSEResponse`` sends a pre-rendered ``SSEBody`` on its
schedule.

At C = 256 the simulator sends about 25,000 chunks/s from one Python process on the cores the
engine under test also uses, so its cost per chunk shows up in the engine's figures. Per chunk
this module does one clock reading, at most one sleep and one ASGI ``send`` of bytes rendered
before the first byte went out. Before, every chunk was rendered with a fresh JSON encoder and
passed through two async generators (the body and its counting wrapper) into Starlette's
``StreamingResponse``, with an anyio task group per response.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from srbench.simulator.generation import SSEBody

DONE_EVENT = b"data: [DONE]\n\n"


class StreamCutter:
    """The open streams of the models that cut a stream when another request arrives (issue
    39: llama-cpp-python's ``interrupt_requests``). A request to such a model registers its
    stream here on arrival; when more than the model's limit are open, the oldest are cut:
    they send ``[DONE]`` at their next event, with no finish_reason and no usage, and end."""

    def __init__(self) -> None:
        self.open: dict[str, list[asyncio.Event]] = {}

    def arrive(self, model: str, limit: int) -> asyncio.Event:
        """A new request to ``model``: its own cut signal, after cutting the oldest streams
        beyond ``limit``."""
        streams = self.open.setdefault(model, [])
        signal = asyncio.Event()
        streams.append(signal)
        while len(streams) > limit:
            streams.pop(0).set()
        return signal

    def leave(self, model: str, signal: asyncio.Event) -> None:
        streams = self.open.get(model, [])
        if signal in streams:
            streams.remove(signal)


class StreamCounters(Protocol):
    open_streams: int
    max_open_streams: int
    stream_ttft_ms: list[float]
    stream_marks: list[tuple[str, float, float]]
    stream_late_ms: list[float]
    stream_ends: list[tuple[str, float, float]]


async def _disconnected(receive: Receive) -> None:
    # The request body has been read; what is left to receive is the disconnect (uvicorn also
    # answers a disconnect once the response is complete).
    while (await receive())["type"] != "http.disconnect":
        pass


class SSEResponse(Response):
    """A ``text/event-stream`` response that sends an ``SSEBody`` on its schedule.

    A client that goes away ends the stream at once, even in the middle of a pause (a listener
    task waits for ``http.disconnect``, as Starlette's ``StreamingResponse`` does under ASGI
    2.3). A simulated disconnect returns without finishing the body: uvicorn then closes the
    connection without the chunked-encoding terminator, as a crashed upstream would.

    Counters: the stream is open (``open_streams``) from its headers to its end, however it
    ends; ``stream_ttft_ms`` gets the time from ``received`` to the second event of the body
    (the first after the role chunk) being handed to the connection, and ``stream_marks`` the
    same two moments in wall-clock time under ``call_id`` when the request named one."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: SSEBody,
        counters: StreamCounters,
        received: float,
        headers: dict[str, str],
        *,
        call_id: str | None = None,
        cut: asyncio.Event | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.sse = body
        self.cut = cut
        self.release = release
        self.counters = counters
        self.received = received
        self.call_id = call_id
        self.status_code = 200
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        counters = self.counters
        counters.open_streams += 1
        counters.max_open_streams = max(counters.max_open_streams, counters.open_streams)
        try:
            # The role chunk goes out in the handler's own turn of the loop, and the pause
            # before the first token counts from it. Both waited before for the handlers of
            # every request read meanwhile (at C = 256, a whole wave's: up to 90 ms), the
            # pause because it began in a task of its own, which runs after them.
            sent = _EventSender(send, counters, self.received, self.call_id)
            if self.sse.role:  # none when the stream is refused after its headers
                await sent.event(self.sse.role)
            first_token_due = asyncio.get_running_loop().time() + self.sse.ttft_s
            sending = asyncio.ensure_future(self.send_rest(sent, first_token_due))
            listening = asyncio.ensure_future(_disconnected(receive))
            try:
                await asyncio.wait((sending, listening), return_when=asyncio.FIRST_COMPLETED)
            finally:
                listening.cancel()
                if not sending.done():
                    sending.cancel()
                    # Let the stream's own ``finally`` run before the response counts as ended.
                    await asyncio.wait((sending,))
            if not sending.cancelled():
                sending.result()  # a failure in the stream is the request's failure
        finally:
            # The counters object may have been replaced by a reset meanwhile; decrement the
            # one that was incremented.
            counters.open_streams -= 1
            if self.release is not None:
                self.release()

    async def send_rest(self, sent: _EventSender, first_token_due: float) -> None:
        """Everything after the role chunk, and the body's end unless the stream is cut."""
        if await self.send_events(sent, first_token_due):
            await sent.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send_events(self, sent: _EventSender, first_token_due: float) -> bool:
        """Every event after the role chunk on its schedule, the first delta not before
        ``first_token_due`` (the loop's clock); False after a simulated disconnect."""
        sse = self.sse
        deltas = sse.deltas
        loop = asyncio.get_running_loop()
        if sse.ttft_s > 0 and (pause := first_token_due - loop.time()) > 0:
            await self.pause(pause)
        first_token_at = loop.time()
        for i in range(len(deltas) + 1):
            if i == sse.middle:
                if sse.stall_s is not None:
                    await self.pause(sse.stall_s)
                if sse.malformed is not None:
                    await sent.event(sse.malformed)
                if sse.disconnect:
                    return False
            if i == len(deltas):
                break
            if i and sse.interval:
                delay = first_token_at + i * sse.interval - loop.time()
                if delay > 0:
                    await self.pause(delay)
            if self.cut is not None and self.cut.is_set():
                return await self.send_cut(sent)
            await sent.event(deltas[i])
        if self.cut is not None and self.cut.is_set():
            return await self.send_cut(sent)
        if deltas and sse.stall_s is None:
            # The last delta is due ttft + (n - 1) intervals after the request's arrival: how
            # late it went out is the server's own lateness (issue 38 item 2).
            due = sent.received + sse.ttft_s + (len(deltas) - 1) * sse.interval
            sent.ended(due - loop.time())
        for event in sse.tail:
            await sent.event(event)
        return True

    async def pause(self, seconds: float) -> None:
        """Sleep, or less when this stream is cut meanwhile."""
        if self.cut is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.cut.wait(), timeout=seconds)

    @staticmethod
    async def send_cut(sent: _EventSender) -> bool:
        """A cut stream's end as llama-cpp-python sends it: [DONE] with no finish_reason."""
        await sent.event(DONE_EVENT)
        return True


class _EventSender:
    """Sends body events, stamping the server's TTFT at the second one."""

    __slots__ = ("call_id", "counters", "count", "received", "send")

    def __init__(
        self, send: Send, counters: StreamCounters, received: float, call_id: str | None
    ) -> None:
        self.send = send
        self.counters = counters
        self.received = received
        self.call_id = call_id
        self.count = 0

    async def event(self, data: bytes) -> None:
        self.count += 1
        if self.count == 2:  # the first event after the role chunk
            now = time.monotonic()
            self.counters.stream_ttft_ms.append((now - self.received) * 1000)
            if self.call_id is not None:
                wall = time.time()
                self.counters.stream_marks.append(
                    (self.call_id, wall - (now - self.received), wall)
                )
        message: Message = {"type": "http.response.body", "body": data, "more_body": True}
        await self.send(message)

    def ended(self, early_s: float) -> None:
        """The last delta has been handed to the connection, ``early_s`` before its due time
        (negative: late). Kept per stream as lateness in ms (0 when on time or early), and for a
        stream that named its call the wall-clock hand-over and due time."""
        self.counters.stream_late_ms.append(max(0.0, -early_s) * 1000)
        if self.call_id is not None:
            wall = time.time()
            self.counters.stream_ends.append((self.call_id, wall, wall + early_s))
