"""A model call leaves the engine as httpx's client would send it (runs/engine/client.py): the
same request line, headers in the same order, body and timeouts — except that no cookie a
server set on an earlier call goes back (each call is a request of its own; R3, R15)."""

from __future__ import annotations

import asyncio
import json

import httpx

from runs.engine.client import EngineClient
from runs.engine.transport import SEND_GATE
from tests.runs.async_support import serve

BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": 'héllo \u2028 "quoted" \\ {}'}],
    "stream": True,
    "max_tokens": 12345678901234567890,
}
HEADERS = {"x-srbench-call-id": "17", "authorization": "Bearer sk-test", "user-agent": "mine"}


async def _heads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with its own head and body as the response body; sets a cookie."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            echo = head + body
            writer.write(
                b"HTTP/1.1 200 OK\r\nSet-Cookie: affinity=backend-2; Path=/\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(echo), echo)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        return


def _echoed(response_body: bytes) -> tuple[list[bytes], bytes]:
    head, _, body = response_body.partition(b"\r\n\r\n")
    return head.split(b"\r\n"), body


def test_a_call_is_the_request_httpx_builds_and_carries_no_cookie_back() -> None:
    seen: dict[str, object] = {}

    async def test(client: httpx.AsyncClient, base: str) -> None:
        assert isinstance(client, EngineClient)
        url = f"{base}/v1/chat/completions"
        gate = {SEND_GATE: lambda: True}
        # What httpx's own client sends for the same call, the first request of the client.
        async with client.stream("POST", url, json=BODY, headers=HEADERS) as reference:
            seen["httpx"] = _echoed(await reference.aread())
        built = client.build_request("POST", url, json=BODY, headers=HEADERS, extensions=gate)
        assert "affinity=backend-2" in built.headers.get("cookie", "")  # httpx's jar keeps it
        for name in ("first", "second"):
            response = await client.call_send(url, BODY, HEADERS, gate)
            try:
                assert response.status_code == 200
                assert response.request.extensions["timeout"] == built.extensions["timeout"]
                assert response.request.extensions[SEND_GATE] is gate[SEND_GATE]
                seen[name] = _echoed(await response.aread())
            finally:
                await response.aclose()

    serve(_heads, test, timeout=httpx.Timeout(5.0, read=2.0))
    reference_lines, reference_body = seen["httpx"]  # type: ignore[misc]
    for name in ("first", "second"):
        lines, body = seen[name]  # type: ignore[misc]
        assert body == reference_body
        # Line for line what httpx's client sent before it had a cookie: request line, Host,
        # Content-Length, Content-Type, the defaults, the call's own headers over them.
        assert lines == reference_lines
        assert not any(line.lower().startswith(b"cookie:") for line in lines)
    assert reference_lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert b"user-agent: mine" in reference_lines
    assert reference_body == httpx.Request("POST", "http://x/", json=BODY).content


def test_a_lone_surrogate_a_model_sent_goes_back_as_its_json_escape() -> None:
    """A conversation going back to the model holds its earlier reply, which may carry a lone
    surrogate (JSON's `\\ud800`, kept by json.loads) and U+0000: UTF-8 cannot carry the first,
    and building the request raised before (R15). Now the body goes out as JSON whose parse is
    the same conversation, with the same header lines as any other call."""
    hostile = {**BODY, "messages": [{"role": "assistant", "content": "a\x00\ud800b é"}]}
    seen: dict[str, object] = {}

    async def test(client: httpx.AsyncClient, base: str) -> None:
        url = f"{base}/v1/chat/completions"
        gate = {SEND_GATE: lambda: True}
        for name, body in (("plain", BODY), ("hostile", hostile)):
            response = await client.call_send(url, body, HEADERS, gate)
            try:
                seen[name] = _echoed(await response.aread())
            finally:
                await response.aclose()

    serve(_heads, test, timeout=httpx.Timeout(5.0, read=2.0))
    plain_lines, _ = seen["plain"]  # type: ignore[misc]
    lines, body = seen["hostile"]  # type: ignore[misc]
    assert b"\\u0000" in body and b"\\ud800" in body and "é".encode() in body
    assert json.loads(body.decode("utf-8")) == hostile
    assert f"content-length: {len(body)}".encode() in [line.lower() for line in lines]

    def names(head: list[bytes]) -> list[bytes]:
        return [line.split(b":")[0].lower() for line in head[1:]]

    assert names(lines) == names(plain_lines)
