"""Bad input, property-based (issue 13 point 2): the SSE decoder, the chat-stream accumulator
and the usage normaliser on arbitrary bytes, split points, Unicode separators, huge lines,
negative, non-integer and inconsistent counts.

Complements tests/runs/test_sse.py and test_accounting.py (which hold the worked examples and
chunking properties of well-formed streams): here the inputs are hostile, and every property
runs derandomised (a fixed seed) so CI sees the same examples every time. The number of
examples tried is written to var/properties-report.txt.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.engine.sse import (
    KNOWN_FINISH_REASONS,
    ChatStreamAccumulator,
    SSEDecoder,
    SSEError,
    SSELimitError,
    decode_sse,
)
from runs.ledger.accounting import Price, call_cost
from runs.ledger.usage import (
    UsageBuckets,
    parse_model_usage_receipt_explained,
    usage_buckets_explained,
)
from tests.conftest import ROOT


def fixed(examples: int) -> settings:
    """A fixed seed (derandomize) and a fixed number of examples: the same inputs in every CI run."""
    return settings(
        derandomize=True,
        database=None,
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


TRIED: Counter[str] = Counter()

# Line-like characters that are NOT SSE line ends: only CR and LF are (DESIGN §4).
UNICODE_SEPARATORS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e\u000b\u200b\ufeff"
text_with_separators = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(UNICODE_SEPARATORS)),
        st.characters(blacklist_categories=["Cs"]),
    ),
    max_size=40,
)


@pytest.fixture(scope="module", autouse=True)
def _report_examples():
    yield
    path = ROOT / "var" / "properties-report.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(TRIED.values())
    lines = [f"property examples tried: {total}"] + [
        f"  {k}: {v}" for k, v in sorted(TRIED.items())
    ]
    path.write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


def split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(raw)) for c in cuts})
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


def decode_or_error(pieces: list[bytes], **caps: int) -> tuple[str, Any]:
    try:
        return "events", decode_sse(pieces, **caps)
    except SSELimitError:
        return "limit", None


def chat(pieces: list[bytes]) -> Any:
    decoder = SSEDecoder()
    acc = ChatStreamAccumulator(clock=lambda: 0.0)
    try:
        for piece in pieces:
            acc.feed_events(decoder.feed(piece))
        acc.feed_events(decoder.close())
    except SSEError:
        return None
    return acc.result()


# --- the SSE decoder --------------------------------------------------------------------------

SSE_ALPHABET = st.sampled_from(
    [b"data:", b"data: ", b"event:", b"id:", b"retry:", b":", b"\r", b"\n", b"\r\n", b"\n\n"]
    + [b"x", b" ", b"[DONE]", b"{", b"}", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\x00"]
)
hostile_bytes = st.one_of(
    st.binary(max_size=2048),
    st.lists(SSE_ALPHABET, max_size=120).map(b"".join),
)


@fixed(600)
@given(raw=hostile_bytes, cuts=st.lists(st.integers(0, 2048), max_size=12))
def test_arbitrary_bytes_decode_the_same_under_any_split_and_never_crash(
    raw: bytes, cuts: list[int]
) -> None:
    TRIED["sse arbitrary bytes × splits"] += 1
    whole = decode_or_error([raw])
    assert decode_or_error(split(raw, cuts)) == whole
    if whole[0] == "events":
        for event in whole[1]:
            assert isinstance(event.data, str)
            # Invalid UTF-8 is reported on the event, never raised.
            if event.decode_error:
                assert "invalid UTF-8" in event.decode_error


@fixed(300)
@given(raw=hostile_bytes, cap=st.integers(1, 64), cuts=st.lists(st.integers(0, 2048), max_size=8))
def test_small_caps_fail_the_same_way_under_any_split(
    raw: bytes, cap: int, cuts: list[int]
) -> None:
    TRIED["sse caps × splits"] += 1
    caps = {"max_line_bytes": cap, "max_event_bytes": cap * 2}
    assert decode_or_error(split(raw, cuts), **caps) == decode_or_error([raw], **caps)


@fixed(200)
@given(
    size=st.integers(1, 200_000),
    cap=st.integers(16, 100_000),
    cuts=st.lists(st.integers(0, 200_100), max_size=6),
)
def test_a_huge_line_is_refused_exactly_when_it_passes_the_cap(
    size: int, cap: int, cuts: list[int]
) -> None:
    TRIED["sse huge lines"] += 1
    line = b"data: " + b"y" * size
    raw = line + b"\n\n"
    outcome = decode_or_error(split(raw, cuts), max_line_bytes=cap, max_event_bytes=10**9)
    if len(line) > cap:
        assert outcome == ("limit", None)
    else:
        assert outcome[0] == "events" and outcome[1][0].data == "y" * size


@fixed(300)
@given(
    pieces=st.lists(text_with_separators, min_size=1, max_size=6),
    eol=st.sampled_from([b"\n", b"\r", b"\r\n"]),
    cuts=st.lists(st.integers(0, 4096), max_size=15),
)
def test_unicode_separators_never_split_content(
    pieces: list[str], eol: bytes, cuts: list[int]
) -> None:
    TRIED["sse unicode separators"] += 1

    def event(body: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + eol + eol

    raw = b"".join(
        event({"model": "m", "choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces
    )
    raw += event({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    raw += event(
        {"model": "m", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    )
    raw += b"data: [DONE]" + eol + eol
    result = chat(split(raw, cuts))
    assert result is not None and result.complete, result
    assert result.content == "".join(pieces)
    assert result.event_count == len(pieces) + 3


chunk_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text_with_separators,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
delta = st.fixed_dictionaries(
    {},
    optional={
        "content": st.none() | text_with_separators | st.integers(),
        "reasoning_content": st.none() | text_with_separators,
        "role": st.sampled_from(["assistant", "user", ""]),
        "tool_calls": st.lists(chunk_json, max_size=2) | chunk_json,
    },
)
chat_chunk = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["m", "n", ""]) | chunk_json,
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "index": st.integers(-1, 2) | chunk_json,
                    "delta": delta | chunk_json,
                    "finish_reason": st.sampled_from([None, "stop", "length", "weird", ""]),
                },
            ),
            max_size=2,
        )
        | chunk_json,
        "usage": chunk_json,
        "error": st.none() | chunk_json,
    },
)
chat_event = st.one_of(
    chat_chunk.map(lambda c: b"data: " + json.dumps(c).encode() + b"\n\n"),
    st.just(b"data: [DONE]\n\n"),
    st.binary(max_size=40).map(lambda b: b"data: " + b + b"\n\n"),
    st.just(b": keep-alive\n\n"),
)


@fixed(500)
@given(events=st.lists(chat_event, max_size=12), cuts=st.lists(st.integers(0, 4096), max_size=10))
def test_hostile_chat_streams_never_crash_and_complete_only_when_proven(
    events: list[bytes], cuts: list[int]
) -> None:
    TRIED["chat streams hostile chunks"] += 1
    raw = b"".join(events)
    result = chat(split(raw, cuts))
    assert result == chat([raw])  # the split changes nothing
    if result is None:
        return
    if result.complete:
        assert result.done_count == 1 and result.events_after_done == 0
        assert result.finish_reason in KNOWN_FINISH_REASONS and result.error is None
        assert result.truncated == (result.finish_reason == "length")
    else:
        assert result.incomplete_reason
    assert isinstance(result.content, str) and isinstance(result.reasoning, str)


# --- the usage normaliser ---------------------------------------------------------------------

count = st.one_of(
    st.integers(0, 10**12),
    st.integers(-(10**6), -1),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.none(),
    st.just(10.0),
    st.just("10"),
)


def valid(value: Any) -> bool:
    return type(value) is int and value >= 0


OPENAI_TOP = (
    "prompt_tokens",
    "completion_tokens",
    "cached_input_tokens",
    "cache_read_input_tokens",
    "cache_write_tokens",
    "cache_creation_tokens",
    "created_cache_tokens",
    "cache_creation_input_tokens",
)
OPENAI_DETAILS = ("cached_tokens", "cache_write_tokens", "cache_creation_tokens")


@fixed(800)
@given(
    top=st.dictionaries(st.sampled_from(OPENAI_TOP), count, max_size=6),
    details=st.none() | st.dictionaries(st.sampled_from(OPENAI_DETAILS), count, max_size=3),
)
def test_openai_usage_is_exact_or_unknown_never_guessed(
    top: dict[str, Any], details: dict[str, Any] | None
) -> None:
    TRIED["usage openai shape"] += 1
    raw: dict[str, Any] = dict(top)
    if details is not None:
        raw["prompt_tokens_details"] = details
    outcome = usage_buckets_explained(raw)
    present = {k: v for k, v in top.items() if v is not None}
    present |= {"d." + k: v for k, v in (details or {}).items() if v is not None}
    bad = [k for k, v in present.items() if not valid(v)]
    cached = {
        present[k]
        for k in ("d.cached_tokens", "cached_input_tokens", "cache_read_input_tokens")
        if k in present
    }
    written = {
        present[k]
        for k in (
            "d.cache_write_tokens",
            "d.cache_creation_tokens",
            "cache_write_tokens",
            "cache_creation_tokens",
            "created_cache_tokens",
            "cache_creation_input_tokens",
        )
        if k in present
    }
    has_openai = "prompt_tokens" in raw or "completion_tokens" in raw
    if not has_openai:
        has_anthropic = False  # no anthropic key is generated here
        assert outcome.buckets is None and not has_anthropic
        return
    if bad or len(cached) > 1 or len(written) > 1:
        assert outcome.buckets is None and outcome.problem == "invalid", (raw, outcome)
        return
    prompt, output = present.get("prompt_tokens"), present.get("completion_tokens")
    if prompt is None or output is None:
        assert outcome.buckets is None and outcome.problem == "missing", (raw, outcome)
        return
    c, w = (next(iter(cached)) if cached else 0), (next(iter(written)) if written else 0)
    if c + w > prompt:
        assert outcome.buckets is None and outcome.problem == "invalid", (raw, outcome)
        return
    b = outcome.buckets
    assert b is not None, (raw, outcome)
    assert (b.input, b.cached_input, b.cache_write, b.output) == (prompt - c - w, c, w, output)
    assert b.cached_reported == bool(cached) and b.cache_write_reported == bool(written)
    assert b.prompt_total == prompt


ANTHROPIC = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


@fixed(500)
@given(raw=st.dictionaries(st.sampled_from(ANTHROPIC), count, max_size=4))
def test_anthropic_usage_is_exact_or_unknown(raw: dict[str, Any]) -> None:
    TRIED["usage anthropic shape"] += 1
    outcome = usage_buckets_explained(raw)
    present = {k: v for k, v in raw.items() if v is not None}
    if "input_tokens" not in raw and "output_tokens" not in raw:
        assert outcome.buckets is None  # cache fields alone are not a usage
        return
    if any(not valid(v) for v in present.values()):
        assert outcome.buckets is None and outcome.problem == "invalid", (raw, outcome)
        return
    if "input_tokens" not in present or "output_tokens" not in present:
        assert outcome.buckets is None and outcome.problem == "missing", (raw, outcome)
        return
    b = outcome.buckets
    assert b is not None
    assert b.input == present["input_tokens"] and b.output == present["output_tokens"]
    assert b.cached_input == present.get("cache_read_input_tokens", 0)
    assert b.cache_write == present.get("cache_creation_input_tokens", 0)


@fixed(500)
@given(raw=chunk_json)
def test_any_json_value_as_usage_never_crashes_and_never_becomes_zero(raw: Any) -> None:
    TRIED["usage arbitrary json"] += 1
    outcome = usage_buckets_explained(raw)
    assert (outcome.buckets is None) != (outcome.problem is None)
    if outcome.buckets is not None:
        b = outcome.buckets
        assert all(
            type(v) is int and v >= 0 for v in (b.input, b.cached_input, b.cache_write, b.output)
        )
    else:
        assert outcome.reason


price_value = st.decimals(
    min_value=0, max_value=1000, places=4, allow_nan=False, allow_infinity=False
)


@fixed(400)
@given(
    counts=st.tuples(*[st.integers(0, 10**12)] * 4),
    prices=st.tuples(price_value, price_value, st.none() | price_value, st.none() | price_value),
)
def test_cost_is_exact_decimal_and_unknown_when_a_used_bucket_has_no_price(
    counts: tuple[int, int, int, int], prices: tuple[Any, ...]
) -> None:
    TRIED["cost exact decimal"] += 1
    fresh, cached, written, output = counts
    b = UsageBuckets(fresh, cached, written, output, True, True, "openai")
    p_in, p_out, p_cached, p_write = prices
    cost = call_cost(b, Price(input=p_in, output=p_out, cached_input=p_cached, cache_write=p_write))
    if (cached and p_cached is None) or (written and p_write is None):
        assert cost is None
        return
    expected = (
        fresh * p_in + cached * (p_cached or 0) + written * (p_write or 0) + output * p_out
    ) / Decimal(1_000_000)
    assert isinstance(cost, Decimal) and cost == expected and cost >= 0


@fixed(400)
@given(
    header=st.one_of(
        st.text(max_size=300),
        chunk_json.map(json.dumps),
        st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
    )
)
def test_any_receipt_header_is_parsed_or_refused_with_a_reason(header: str) -> None:
    TRIED["mom receipt header"] += 1
    outcome = parse_model_usage_receipt_explained(header)
    assert outcome is not None
