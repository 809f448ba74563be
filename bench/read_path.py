"""CPU of reading one chat stream, by path (issue 38 item 2; docs/performance.md).

Prints microseconds of process CPU per call (the best of several rounds, so a busy machine
inflates it least) for one 50-chunk stream of the simulator's shape, read:

* by the engine's chunk sink (`runs.engine.calls.chunk_sink`) with 1 or 3 events a socket read,
  as it runs today (events after the first token kept and read in batches, common chunks by
  `runs.engine.sse_fast`) and by the rules alone (every read read at once, every event through
  the general decoder and accumulator);
* whole from saved evidence, as `reconcile-usage` re-reads every call
  (`runs.reporting.reconcile`: the whole body through `SSEDecoder.feed_plain`; before,
  `decode_sse([raw])`, an event object each, by the rules alone).

Usage: python bench/read_path.py [--rounds 7] [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")
os.environ.setdefault("SECRET_KEY", "bench")

import django  # noqa: E402

django.setup()

from runs.engine import sse, sse_fast  # noqa: E402
from runs.engine.call_record import Stream  # noqa: E402
from runs.engine.calls import chunk_sink  # noqa: E402
from runs.engine.sse import ChatStreamAccumulator, SSEDecoder, decode_sse  # noqa: E402


def stream_events(chunks: int = 50) -> list[bytes]:
    """The events of one simulator-shaped call: chunks of a few characters, a finish, usage,
    [DONE]."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [
        {
            **head,
            "choices": [{"index": 0, "delta": {"content": f"word{i} "}, "finish_reason": None}],
        }
        for i in range(chunks)
    ]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append({**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 50}})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


class _Eager(ChatStreamAccumulator):
    """The rules alone: no common-chunk shortcut, and a first token the sink never sees (so
    every read is read at once)."""

    COMMON_CHUNKS = False

    @property  # type: ignore[override]
    def first_token_at(self) -> float | None:
        return None

    @first_token_at.setter
    def first_token_at(self, value: float | None) -> None:
        self.mark = value


def through_sink(reads: list[bytes], acc_class: type[ChatStreamAccumulator]) -> Any:
    stream = Stream(started=0.0, sent_wall=None, acc=acc_class(started_at=0.0))  # type: ignore[arg-type]
    sink = chunk_sink(stream, 200_000)
    for number, read in enumerate(reads):
        sink(read, float(number))
    stream.catch_up()
    stream.acc.feed_events(stream.decoder.close())
    return stream.acc.result()


def from_evidence(raw: bytes, acc_class: type[ChatStreamAccumulator]) -> Any:
    acc = acc_class(clock=lambda: 0.0)
    if acc_class is _Eager:  # before issue 38: decode_sse([raw]), every event an object
        acc.feed_events(decode_sse([raw]))
    else:  # runs.reporting.reconcile today
        decoder = SSEDecoder()
        acc.feed_events(decoder.feed_plain(raw))
        acc.feed_events(decoder.close())
    return acc.result()


def best_us(work: Callable[[], Any], calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            work()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    events = stream_events()
    raw = b"".join(events)
    threes = [b"".join(events[i : i + 3]) for i in range(0, len(events), 3)]
    plain_values = sse_fast.plain_values
    print(f"one call: {len(events)} events, {len(raw):,} bytes; load {os.getloadavg()[0]:.2f}")
    for label, reads in (("1 event a read", events), ("3 events a read", threes)):
        today = best_us(
            lambda r=reads: through_sink(r, ChatStreamAccumulator), args.calls, args.rounds
        )
        sse.plain_values = lambda chunk, limit: None  # the decoder's rules alone
        try:
            rules = best_us(lambda r=reads: through_sink(r, _Eager), args.calls, args.rounds)
        finally:
            sse.plain_values = plain_values
        assert through_sink(reads, ChatStreamAccumulator) == through_sink(
            reads, ChatStreamAccumulator
        )
        print(
            f"engine sink, {label}: {today:7.1f} us a call today, {rules:7.1f} by the rules alone ({rules / today:.2f}x)"
        )
    today = best_us(lambda: from_evidence(raw, ChatStreamAccumulator), args.calls, args.rounds)
    sse.plain_values = lambda chunk, limit: None
    try:
        rules = best_us(lambda: from_evidence(raw, _Eager), args.calls, args.rounds)
    finally:
        sse.plain_values = plain_values
    print(
        f"saved evidence re-read (reconcile-usage): {today:7.1f} us a call today, {rules:7.1f} by the rules alone ({rules / today:.2f}x)"
    )


if __name__ == "__main__":
    main()
