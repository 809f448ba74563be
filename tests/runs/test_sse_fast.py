"""The common-chunk shortcuts of issue 38 item 2 give exactly the general rules' results.

* ``sse_fast.apply_common`` reads a plain event's chat chunk into typed structs; the general
  path (``ChatStreamAccumulator.consume_data``) is the definition. On hostile chunks — wrong
  types, repeated keys, tool calls, several choices, errors, [DONE] anywhere — both must give
  the same ``ChatStreamResult`` and the same TTFT read.
* ``calls.chunk_sink`` reads a stream in batches after its first token. Its reference here is
  the sink as it stood before (every read read at once, the guards checked after each read),
  written out in this file: under any split of any stream and any character cap, the same
  result, the same guard stopping at the same read, the same bytes kept.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.engine import sse_fast
from runs.engine.call_record import Stream
from runs.engine.calls import (
    REPETITION_CHECK_BYTES,
    REPETITION_MIN_BLOCK,
    REPETITION_REPEATS,
    chunk_sink,
)
from runs.engine.guards import output_cap_violation, repeated_tail_block, stream_byte_cap
from runs.engine.sse import ChatStreamAccumulator, SSEDecoder


def fixed(examples: int) -> settings:
    return settings(
        derandomize=True,
        database=None,
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class GeneralRules(ChatStreamAccumulator):
    """The accumulator without the shortcut: every chunk through ``consume_data``."""

    COMMON_CHUNKS = False


class Counted(ChatStreamAccumulator):
    general = 0

    def consume_data(self, data: str) -> None:
        self.general += 1
        super().consume_data(data)


ODD = st.sampled_from([None, True, False, 0, 1, 0.0, -1, "", "x", [], {}, [1], {"a": 1}])
TEXT = st.text(alphabet='ab \u00e9\u2028\n"\\', max_size=6)
TOOL = st.just([{"index": 0, "function": {"name": "f", "arguments": "{"}}])


def mostly(good: Any, odd: Any = ODD) -> Any:
    """``good`` four times in five: streams mostly of the shapes servers send, each key
    sometimes missing or of another type."""
    return st.one_of(good, good, good, good, odd)


DELTA = st.fixed_dictionaries(
    {},
    optional={
        "content": mostly(TEXT),
        "reasoning_content": mostly(TEXT),
        "reasoning": mostly(TEXT),
        "role": st.just("assistant"),
        "tool_calls": st.one_of(TOOL, ODD),
    },
)
CHOICE = st.fixed_dictionaries(
    {"delta": mostly(DELTA)},
    optional={
        "index": mostly(st.just(0), st.sampled_from([1, True, False, 0.0, "0", None])),
        "finish_reason": mostly(st.sampled_from(["stop", "length", None]), ODD | st.just("x")),
        "logprobs": ODD,
    },
)
CHUNK = st.fixed_dictionaries(
    {"choices": mostly(st.lists(mostly(CHOICE), min_size=1, max_size=3))},
    optional={
        "model": st.sampled_from(["m1", "m2", "", None, 3]),
        "usage": mostly(st.fixed_dictionaries({"prompt_tokens": st.integers(0, 2**70)})),
        "error": mostly(st.none()),
        "id": TEXT,
    },
)


def chunk_text(chunk: dict[str, Any], repeat_key: str | None) -> str:
    text = json.dumps(chunk, ensure_ascii=False)
    if repeat_key is not None and len(chunk) > 0:
        # A repeated key: the last value counts (json.loads' rule).
        text = text[:-1] + (", " if chunk else "") + json.dumps({repeat_key: None})[1:]
    return text


# The shapes servers send, every value of its usual type (the shortcut's own case).
CLEAN = st.fixed_dictionaries(
    {
        "choices": st.lists(
            st.fixed_dictionaries(
                {
                    "delta": st.fixed_dictionaries(
                        {},
                        optional={
                            "content": TEXT | st.none(),
                            "reasoning_content": TEXT | st.none(),
                            "reasoning": TEXT | st.none(),
                            "role": st.just("assistant"),
                        },
                    )
                },
                optional={
                    "index": st.sampled_from([0, 0, 1, 0.0, False, True]),
                    "finish_reason": st.sampled_from(["stop", "length", None]),
                },
            ),
            max_size=2,
        )
    },
    optional={
        "model": st.sampled_from(["m1", "m2", ""]),
        "usage": st.fixed_dictionaries({"prompt_tokens": st.integers(0, 2**70)}) | st.none(),
        "error": st.none(),
    },
).map(json.dumps)
DATA = st.one_of(
    CLEAN,
    CLEAN,
    st.builds(chunk_text, CHUNK, st.sampled_from([None, None, "choices", "model", "usage"])),
    st.sampled_from(["[DONE]", " [DONE] ", "{", "[1]", "null", '{"a":NaN}', "", "1e400"]),
)


def clocked(cls: type[ChatStreamAccumulator]) -> ChatStreamAccumulator:
    ticks = iter(range(1, 10_000))
    return cls(clock=lambda: float(next(ticks)), started_at=0.0)


@fixed(1500)
@given(datas=st.lists(DATA, max_size=12), read_at=st.sampled_from([None, 7.5]))
def test_common_chunks_read_exactly_as_the_general_rules(
    datas: list[str], read_at: float | None
) -> None:
    fast, general = clocked(ChatStreamAccumulator), clocked(GeneralRules)
    for acc in (fast, general):
        acc.read_at = read_at
        for data in datas:  # one read a chunk, as the engine feeds them
            acc.feed_events([data])
    assert fast.result() == general.result()


def test_a_common_stream_takes_the_shortcut() -> None:
    """Otherwise the equivalence above proves nothing about the path the engine runs."""
    acc = Counted()
    chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "a"}}]}
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {}}
    acc.feed_events([json.dumps(chunk)] * 20 + [json.dumps(last), "[DONE]"])
    assert acc.general == 1  # [DONE] only
    assert acc.result().complete and acc.result().content == "a" * 20


def test_a_tool_call_delta_takes_the_general_rules() -> None:
    acc = Counted()
    part = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
    acc.feed_events([json.dumps({"choices": [{"delta": {"tool_calls": [part]}}]})])
    assert acc.general == 1
    assert acc.result().tool_calls[0].name == "f"


def test_plain_values_answers_only_for_whole_plain_events() -> None:
    assert sse_fast.plain_values(b"data: a\n\ndata: b\n\ndat", 100) == (["a", "b"], 18)
    assert sse_fast.plain_values(b"data: a", 100) == ([], 0)
    for odd in (b"data:a\n\n", b"data: a\ndata: b\n\n", b"\n\n\ndata: a\n\n", b"data: \xff\n\n"):
        assert sse_fast.plain_values(odd, 100) is None
    assert sse_fast.plain_values(b"data: a\n\n", 8) is None  # over the caps: the line rules


# --- the batched sink against the sink that read every read at once -----------------------


def eager_sink(stream: Stream, max_chars: int) -> Any:
    """calls.chunk_sink as it stood before issue 38's batching: the reference."""
    raw, acc, decoder = stream.raw, stream.acc, stream.decoder
    byte_cap = stream_byte_cap(max_chars)
    next_check = REPETITION_CHECK_BYTES

    def on_chunk(chunk: bytes, read_at: float) -> bool:
        nonlocal next_check
        raw.extend(chunk)
        acc.read_at = read_at
        acc.feed_events(decoder.feed_plain(chunk))
        if acc.content_chars + acc.reasoning_chars > max_chars or len(raw) > byte_cap:
            violation = output_cap_violation(
                content_chars=acc.content_chars,
                reasoning_chars=acc.reasoning_chars,
                received_bytes=len(raw),
                max_output_chars=max_chars,
            )
            if violation:
                stream.error_code, stream.error = "output_cap", violation
                return True
        if len(raw) >= next_check:
            next_check = len(raw) + REPETITION_CHECK_BYTES
            if repeated_tail_block(
                acc.content, min_block=REPETITION_MIN_BLOCK, repeats=REPETITION_REPEATS
            ):
                stream.error_code, stream.error = "repetition", "the output repeats itself"
                return True
        return False

    return on_chunk


def run_sink(make: Any, pieces: list[bytes], max_chars: int) -> tuple[Any, ...]:
    stream = Stream(started=0.0, sent_wall=None, acc=ChatStreamAccumulator(started_at=0.0))  # type: ignore[arg-type]
    sink = make(stream, max_chars)
    stopped_at = None
    for number, piece in enumerate(pieces):
        if sink(piece, float(number)):
            stopped_at = number
            break
    if not stream.error_code:  # as Caller._read_sse and Caller._close do
        stream.catch_up()
        stream.acc.feed_events(stream.decoder.close())
    return stopped_at, stream.error_code, stream.error, bytes(stream.raw), stream.acc.result()


def event(delta: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


STREAM_PIECES = st.one_of(
    st.builds(lambda t: event({"content": t}), st.text(alphabet="ab\u00e9 ", max_size=40)),
    st.builds(lambda t: event({"reasoning": t}), st.text(alphabet="xy", max_size=40)),
    st.just(event({"content": "la " * 30})),
    st.just(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'),
    st.sampled_from([b"data: [DONE]\n\n", b": ping\n\n", b"data: {\n\n", b"\r\n", b"id: 1\n\n"]),
)


@fixed(400)
@given(
    parts=st.lists(STREAM_PIECES, max_size=60),
    cuts=st.lists(st.integers(0, 4000), max_size=30),
    max_chars=st.sampled_from([1, 20, 150, 700, 200_000]),
)
def test_the_batched_sink_stops_and_reads_as_the_eager_one(
    parts: list[bytes], cuts: list[int], max_chars: int
) -> None:
    raw = b"".join(parts)
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert run_sink(chunk_sink, pieces, max_chars) == run_sink(eager_sink, pieces, max_chars)


def test_a_repeating_stream_is_stopped_at_the_same_read() -> None:
    """The repetition guard fires (the equivalence above must cover a guard that fires)."""
    pieces = [event({"content": "the same block of text, again and again. "})] * 400
    got = run_sink(chunk_sink, pieces, 200_000)
    assert got[1] == "repetition" and got[0] is not None
    assert got == run_sink(eager_sink, pieces, 200_000)


def test_after_the_first_token_reads_are_kept_not_read() -> None:
    stream = Stream(started=0.0, sent_wall=None, acc=ChatStreamAccumulator(started_at=0.0))  # type: ignore[arg-type]
    sink = chunk_sink(stream, 200_000)
    sink(event({"content": "a"}), 1.0)
    assert stream.acc.first_token_at == 1.0 and stream.unread_from is None
    sink(event({"content": "b"}), 2.0)
    assert stream.unread_from is not None and stream.acc.content == "a"
    stream.catch_up()
    assert stream.acc.content == "ab" and stream.acc.first_token_at == 1.0
    assert isinstance(stream.decoder, SSEDecoder)
