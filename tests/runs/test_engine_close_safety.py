"""A response the engine cannot read still closes its call (runs/engine/calls.py `Caller._close`):
failed, usage and cost unknown, the evidence kept — never a crashed cell and an unsettled call
whose record is lost (R15: model and server output are hostile input)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from django.utils import timezone

from runs.engine import call_record, calls, store
from runs.engine.sse import ChatStreamAccumulator
from tests.runs.async_support import serve

BODY = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"(B)"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
    b"data: [DONE]\n\n"
)


class _Ledger:
    def __init__(self) -> None:
        self.closes: list[store.CloseCall] = []

    def enqueue(self, op: Any) -> object:
        self.closes.append(op)
        return object()


def _target(kind: str) -> store.TargetInfo:
    return store.TargetInfo(
        slug="t",
        kind=kind,
        base_url="http://127.0.0.1:9/v1",
        model="m",
        fixed_params={},
        prices={"m": {"input": "1", "cached_input": "0.1", "output": "2"}},
        config_hash="h" if kind == "mom" else None,
        max_inference_calls=None,
        preview_url=None,
        api_key=None,
        target_id=1,
    )


def _caller(ledger: _Ledger, client: Any = None) -> calls.Caller:
    return calls.Caller(
        ctx=None,  # type: ignore[arg-type]
        worker="w",
        db=None,  # type: ignore[arg-type]
        client=client,
        limits={"total_timeout_s": 10, "idle_timeout_s": 5, "max_output_chars": 10_000},
        max_cost=None,
        ledger=ledger,  # type: ignore[arg-type]
    )


def _closed(kind: str) -> tuple[store.CloseCall, calls.CallOutcome]:
    ledger = _Ledger()
    caller = _caller(ledger)
    started = time.monotonic()
    stream = calls.Stream(started, timezone.now(), ChatStreamAccumulator(started_at=started))
    stream.http_status = 200
    stream.raw.extend(BODY)
    stream.acc.feed_events(stream.decoder.feed_plain(BODY))
    stream.acc.feed_events(stream.decoder.close())
    outcome = caller._close(7, 3, _target(kind), stream)
    (close,) = ledger.closes
    return close, outcome


def test_a_readable_response_closes_completed_and_priced() -> None:
    close, outcome = _closed("model")
    assert outcome.ok and close.fields["status"] == "completed"
    assert close.fields["input_tokens"] == 3 and close.fields["cost_usd"] is not None


def test_a_response_the_engine_cannot_read_closes_failed_with_its_evidence(monkeypatch) -> None:
    def unforeseen(**_: Any) -> Any:
        raise ValueError("invalid literal for int() with base 10: '²'")

    monkeypatch.setattr(call_record, "call_accounting", unforeseen)
    close, outcome = _closed("model")
    assert not outcome.ok and outcome.error_code == "response_unread"
    assert close.fields["status"] == "failed" and close.fields["error_code"] == "response_unread"
    assert "ValueError" in close.fields["error"] and "²" in close.fields["error"]
    assert close.fields["cost_usd"] is None and close.fields["input_tokens"] is None
    assert close.fields["content"] == "(B)" and close.raw == BODY  # nothing of it lost
    assert close.failure == {"error_code": "response_unread", "error": close.fields["error"]}


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
        )
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        return


def test_a_read_that_fails_unforeseen_still_records_the_call_that_left(monkeypatch) -> None:
    """The whole path of a streamed call (`Caller._stream`) against a real server: an
    exception the reader did not foresee ends the call failed with what arrived."""

    async def unforeseen(self: Any, resp: Any, stream: Any, activity: Any) -> None:
        stream.raw.extend(await resp.aread())
        raise ValueError("something no one foresaw")

    monkeypatch.setattr(calls.Caller, "_read_sse", unforeseen)
    ledger = _Ledger()
    outcomes = []

    async def test(client: httpx.AsyncClient, base: str) -> None:
        caller = _caller(ledger, client)
        caller.activity[7] = calls.Activity(stage="waiting", last=time.time())
        target = store.TargetInfo(**{**_target("model").__dict__, "base_url": base})
        outcomes.append(await caller._stream(7, 3, target, {"model": "m", "messages": []}))

    serve(_answer, test, timeout=httpx.Timeout(5.0))
    (close,) = ledger.closes
    assert not outcomes[0].ok and close.fields["error_code"] == "response_unread"
    assert "something no one foresaw" in close.fields["error"] and close.raw == BODY
