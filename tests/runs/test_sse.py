"""SSE decoding and chat-stream accumulation: the byte-level rules the engine and
reconcile-usage both rely on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.engine.chat_result import ChatStreamResult
from runs.engine.guards import output_cap_violation, repeated_tail_block, stream_byte_cap
from runs.engine.sse import (
    ChatStreamAccumulator,
    SSEDecoder,
    SSEEvent,
    SSELimitError,
    decode_sse,
)
from runs.vocabulary.stream_reasons import EMPTY_STREAM


def chunk(delta: dict[str, Any] | None = None, **fields: Any) -> bytes:
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": "m-1"}
    if delta is not None or "finish_reason" in fields:
        body["choices"] = [
            {"index": 0, "delta": delta or {}, "finish_reason": fields.pop("finish_reason", None)}
        ]
    body.update(fields)
    return b"data: " + json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 10, "completion_tokens": 3}


def run_stream(raw: bytes, clock: Iterator[float] | None = None) -> ChatStreamResult:
    ticks = clock or iter(float(i) for i in range(1000))
    acc = ChatStreamAccumulator(clock=lambda: next(ticks))
    acc.feed_events(decode_sse([raw]))
    return acc.result()


def good_stream() -> bytes:
    return (
        chunk({"role": "assistant", "content": ""})
        + chunk({"content": "Hel"})
        + chunk({"content": "lo"})
        + chunk({}, finish_reason="stop")
        + chunk(usage=USAGE, choices=[])
        + DONE
    )


# --- line ends ------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_every_line_end_style_dispatches_the_same_events(eol: bytes) -> None:
    raw = eol.join([b"data: one", b"", b"event: note", b"data: two", b"", b""])
    events = decode_sse([raw])
    assert [(e.event, e.data) for e in events] == [(None, "one"), ("note", "two")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    decoder = SSEDecoder()
    first = decoder.feed(b"data: a\r")
    second = decoder.feed(b"\n\r\ndata: b\r\n\r\n")
    assert [e.data for e in first + second] == ["a", "b"]


def test_cr_at_chunk_end_followed_by_blank_cr_dispatches_without_waiting() -> None:
    decoder = SSEDecoder()
    assert [e.data for e in decoder.feed(b"data: a\r\r")] == ["a"]
    # The LF that follows belongs to the second CR, so it must not become a blank line that
    # would dispatch the next event early.
    assert decoder.feed(b"\ndata: b\r") == []
    assert [e.data for e in decoder.feed(b"\n\r\n")] == ["b"]


def test_unicode_line_separators_inside_data_stay_content() -> None:
    text = "line\u2028sep\u2029para\x85nel\x0cff\x1cfs"
    raw = chunk({"content": text}) + chunk({}, finish_reason="stop") + DONE
    assert "\u2028".encode() in raw and "\x85".encode() in raw  # sent unescaped
    result = run_stream(raw)
    assert result.content == text
    assert result.complete


def test_multiline_data_is_joined_with_newline() -> None:
    events = decode_sse([b"data: first\ndata:second\ndata:  third\ndata\n\n"])
    assert events[0].data == "first\nsecond\n third\n"


def test_comments_are_ignored_and_counted() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b": keep-alive\n\n:\ndata: x\n: inside\n\n")
    assert [e.data for e in events] == ["x"]
    assert decoder.comment_count == 3


def test_event_without_data_lines_is_not_dispatched() -> None:
    assert decode_sse([b"event: ping\n\nid: 7\n\n"]) == []


def test_event_id_and_retry_fields_are_kept() -> None:
    events = decode_sse([b"id: 7\nretry: 1500\ndata: a\n\ndata: b\n\n"])
    assert events[0] == SSEEvent(data="a", id="7", retry=1500)
    assert events[1].id == "7"  # last event ID persists, as in a browser


def test_leading_bom_is_dropped_even_when_split() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef") == []
    assert decoder.feed(b"\xbb") == []
    assert [e.data for e in decoder.feed(b"\xbfdata: x\n\n")] == ["x"]


def test_field_without_space_and_with_two_spaces() -> None:
    events = decode_sse([b"data:x\n\ndata:  y\n\n"])
    assert [e.data for e in events] == ["x", " y"]


# --- chunking property -------------------------------------------------------------------------

SAMPLE = (
    b"\xef\xbb\xbf: hello\r\n"
    + 'data: {"a": "h\u00e9\u2028llo \U0001f600"}\r\n\r\n'.encode()
    + b"event: e\rdata: one\rdata: two\r\r"
    + b"id: 3\ndata: three\n\n"
    + b"data: \xff\xfe bad\n\n"
    + DONE
)


def test_event_split_at_every_byte_position_gives_the_same_events() -> None:
    whole = decode_sse([SAMPLE])
    assert len(whole) == 5
    for cut in range(len(SAMPLE) + 1):
        assert decode_sse([SAMPLE[:cut], SAMPLE[cut:]]) == whole, cut


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_chunking_of_a_stream_yields_the_same_events(data: st.DataObject) -> None:
    raw = data.draw(st.sampled_from([SAMPLE, good_stream(), SAMPLE + good_stream()]))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=20)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert decode_sse(pieces) == decode_sse([raw])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["data", "event", "id", ":", "data"]),
            st.text(
                alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]),
                max_size=12,
            ),
            st.sampled_from([b"\n", b"\r", b"\r\n"]),
            st.booleans(),
        ),
        max_size=12,
    ),
    st.data(),
)
def test_generated_streams_decode_the_same_under_any_chunking(
    lines: list[tuple[str, str, bytes, bool]], data: st.DataObject
) -> None:
    raw = b""
    for name, value, eol, blank in lines:
        raw += name.encode() + b":" + value.encode() + eol + (eol if blank else b"")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert decode_sse(pieces) == decode_sse([raw])
    # The byte-at-a-time extreme, too.
    assert decode_sse([raw[i : i + 1] for i in range(len(raw))]) == decode_sse([raw])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_chunking_of_a_chat_stream_gives_the_same_result(data: st.DataObject) -> None:
    raw = (
        chunk({"reasoning_content": "h\u2028m\r\n"})
        + chunk({"content": "caf\u00e9 \U0001f600"})
        + chunk(
            {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": "{"}}]}
        )
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]})
        + chunk({}, finish_reason="tool_calls")
        + chunk(usage=USAGE, choices=[])
        + DONE
    ).replace(b"\n", b"\r\n")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=30)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    decoder = SSEDecoder()
    acc = ChatStreamAccumulator(clock=lambda: 0.0)
    for piece in pieces:
        acc.feed_events(decoder.feed(piece))
    acc.feed_events(decoder.close())
    result = acc.result()
    assert result == run_stream(raw, clock=iter([0.0] * 3))
    assert result.complete
    assert result.content == "caf\u00e9 \U0001f600"
    assert result.reasoning == "h\u2028m\r\n"


# --- errors and limits -------------------------------------------------------------------------


def test_invalid_utf8_is_reported_on_the_event_not_raised() -> None:
    events = decode_sse([b"data: ok\n\ndata: \xc3\x28 broken\n\n"])
    assert events[0].decode_error is None
    assert events[1].decode_error is not None
    assert "invalid UTF-8" in events[1].decode_error
    assert "\ufffd" in events[1].data


def test_invalid_utf8_fails_the_chat_stream_with_a_readable_error() -> None:
    raw = chunk({"content": "a"}) + b"data: \xff\n\n" + chunk({}, finish_reason="stop") + DONE
    result = run_stream(raw)
    assert not result.complete
    assert result.error is not None and "invalid UTF-8" in result.error


def test_huge_line_without_end_is_capped_with_a_clear_error() -> None:
    decoder = SSEDecoder(max_line_bytes=64)
    decoder.feed(b"data: " + b"x" * 50)
    with pytest.raises(SSELimitError, match="64 bytes"):
        decoder.feed(b"x" * 50)
    # The decoder stays failed: nothing after a cap breach is trusted.
    with pytest.raises(SSELimitError):
        decoder.feed(b"\n\n")


def test_huge_line_inside_one_chunk_is_capped() -> None:
    with pytest.raises(SSELimitError):
        decode_sse([b"data: " + b"x" * 200 + b"\n\n"], max_line_bytes=100)


def test_event_made_of_many_short_lines_is_capped() -> None:
    raw = b"data: 0123456789\n" * 20 + b"\n"
    with pytest.raises(SSELimitError, match="event exceeds 100 bytes"):
        decode_sse([raw], max_event_bytes=100)
    assert len(decode_sse([raw], max_event_bytes=1000)) == 1


def test_unterminated_final_event_is_returned_marked_and_fails_the_stream() -> None:
    raw = good_stream()[: -len(DONE)] + b"data: [DONE]"
    events = decode_sse([raw])
    assert events[-1] == SSEEvent(data="[DONE]", terminated=False)
    result = run_stream(raw)
    assert not result.complete
    assert result.done_count == 0
    assert "stream ended inside event" in (result.incomplete_reason or "")


def test_received_bytes_are_counted() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a")
    decoder.feed(b"\n\n")
    assert decoder.received_bytes == 9


# --- chat stream ---------------------------------------------------------------------------------


def test_well_formed_stream_is_complete_with_model_usage_and_ttft() -> None:
    result = run_stream(good_stream(), clock=iter([100.0, 100.25, 999.0]))
    assert result.content == "Hello"
    assert result.finish_reason == "stop"
    assert result.served_model == "m-1"
    assert result.usage == USAGE
    assert result.done_count == 1
    assert result.complete and not result.truncated
    assert result.incomplete_reason is None
    # The empty role delta must not start the clock; "Hel" does.
    assert result.ttft_s == pytest.approx(0.25)


def test_reasoning_only_first_delta_sets_ttft() -> None:
    ticks = iter([10.0, 10.5, 11.0, 12.0])
    raw = (
        chunk({"reasoning_content": "think"})
        + chunk({"reasoning": " more"})
        + chunk({"content": "42"})
        + chunk({}, finish_reason="stop")
        + DONE
    )
    result = run_stream(raw, clock=ticks)
    assert result.reasoning == "think more"
    assert result.content == "42"
    assert result.ttft_s == pytest.approx(0.5)


def test_reasoning_and_reasoning_content_in_one_delta_are_not_doubled() -> None:
    raw = (
        chunk({"reasoning": "abc", "reasoning_content": "abc"})
        + chunk({}, finish_reason="stop")
        + DONE
    )
    assert run_stream(raw).reasoning == "abc"


def test_stream_without_any_token_has_no_ttft() -> None:
    result = run_stream(chunk({}, finish_reason="stop") + DONE)
    assert result.ttft_s is None and result.first_token_at is None
    assert result.complete


def test_malformed_json_chunk_fails_the_stream_with_a_readable_message() -> None:
    raw = chunk({"content": "a"}) + b'data: {"choices": [\n\n' + chunk({"content": "b"})
    raw += chunk({}, finish_reason="stop") + DONE
    result = run_stream(raw)
    assert not result.complete
    assert result.error is not None
    assert result.error.startswith("malformed JSON in event #2")
    assert '{"choices": [' in result.error
    assert result.content == "a"  # nothing after the error is applied


def test_json_nested_past_the_parser_fails_the_stream_not_the_engine() -> None:
    """R15: a server's chunk of 100,000 nested brackets (within the line cap) raised
    RecursionError out of the reader, crashing the cell and losing the call's record."""
    deep = b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n"
    result = run_stream(chunk({"content": "a"}) + deep + chunk({}, finish_reason="stop") + DONE)
    assert not result.complete
    assert result.error is not None
    assert result.error.startswith("event #2: JSON nested too deeply to read")
    assert result.content == "a"


def test_missing_done_is_incomplete() -> None:
    result = run_stream(good_stream()[: -len(DONE)])
    assert not result.complete
    assert result.incomplete_reason == "stream ended without [DONE]"
    assert result.content == "Hello"


def test_an_empty_event_stream_says_so() -> None:
    """A real server (llama.cpp, a prompt past its context window) sent 200 and headers, then
    ended the body with no event: that is named, not "without [DONE]" like a cut answer."""
    result = run_stream(b"")
    assert not result.complete and result.event_count == 0
    assert result.incomplete_reason == EMPTY_STREAM
    assert result.incomplete_reason.startswith("empty stream: the server ended its 200 event")
    # A comment alone (a keep-alive ping) is no event either.
    assert run_stream(b": ping\n\n").incomplete_reason == EMPTY_STREAM
    # One event and no [DONE] stays the cut answer's reason.
    assert run_stream(chunk({"content": "a"})).incomplete_reason == "stream ended without [DONE]"


def test_two_done_markers_are_incomplete() -> None:
    result = run_stream(good_stream() + DONE)
    assert result.done_count == 2
    assert not result.complete
    assert result.incomplete_reason == "stream has 2 [DONE] markers"


def test_data_after_done_is_noted_and_not_applied() -> None:
    result = run_stream(good_stream() + chunk({"content": "late"}, usage={"prompt_tokens": 1}))
    assert result.events_after_done == 1
    assert result.content == "Hello"
    assert result.usage == USAGE
    assert not result.complete


def test_missing_finish_reason_is_incomplete() -> None:
    result = run_stream(chunk({"content": "x"}) + DONE)
    assert not result.complete
    assert result.incomplete_reason == "no finish_reason"


def test_unknown_finish_reason_is_incomplete() -> None:
    result = run_stream(chunk({"content": "x"}, finish_reason="content_filter") + DONE)
    assert not result.complete
    assert "content_filter" in (result.incomplete_reason or "")


def test_length_finish_is_a_complete_but_truncated_call() -> None:
    result = run_stream(chunk({"content": "x"}, finish_reason="length") + DONE)
    assert result.complete
    assert result.truncated


def test_error_event_and_error_object_fail_the_stream() -> None:
    as_event = run_stream(b'event: error\ndata: {"message": "overloaded"}\n\n' + DONE)
    assert as_event.error is not None and "overloaded" in as_event.error
    as_object = run_stream(b'data: {"error": {"message": "rate limited"}}\n\n' + DONE)
    assert as_object.error is not None and "rate limited" in as_object.error
    assert not as_event.complete and not as_object.complete


def test_tool_call_deltas_are_assembled_by_index() -> None:
    raw = (
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": ""},
                    }
                ]
            }
        )
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"comm'}}]})
        + chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "function": {"name": "look", "arguments": "{}"}},
                    {"index": 0, "function": {"arguments": 'and": "ls"}'}},
                ]
            }
        )
        + chunk({}, finish_reason="tool_calls")
        + DONE
    )
    result = run_stream(raw)
    assert result.complete
    assert [(t.index, t.id, t.type, t.name, t.arguments) for t in result.tool_calls] == [
        (0, "call_a", "function", "terminal", '{"command": "ls"}'),
        (1, "call_b", None, "look", "{}"),
    ]
    assert json.loads(result.tool_calls[0].arguments) == {"command": "ls"}
    assert result.ttft_s is None  # tool calls are not content or reasoning


def test_tool_call_name_repeated_in_every_delta_is_not_doubled() -> None:
    raw = (
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{"}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "}"}}]})
        + chunk({}, finish_reason="tool_calls")
        + DONE
    )
    (call,) = run_stream(raw).tool_calls
    assert (call.name, call.arguments) == ("f", "{}")


def test_last_usage_object_wins_and_null_usage_is_ignored() -> None:
    raw = (
        chunk({"content": "a"}, usage=None)
        + chunk({}, finish_reason="stop", usage={"prompt_tokens": 1, "completion_tokens": 1})
        + chunk(usage=USAGE, choices=[])
        + DONE
    )
    assert run_stream(raw).usage == USAGE


def test_conflicting_model_names_leave_the_served_model_unknown() -> None:
    raw = chunk({"content": "a"}) + chunk({}, finish_reason="stop", model="m-2") + DONE
    result = run_stream(raw)
    assert result.served_model is None
    assert result.models_seen == ("m-1", "m-2")


def test_only_choice_zero_is_read() -> None:
    body = {
        "choices": [
            {"index": 1, "delta": {"content": "other"}},
            {"index": 0, "delta": {"content": "mine"}},
        ]
    }
    raw = b"data: " + json.dumps(body).encode() + b"\n\n" + chunk({}, finish_reason="stop") + DONE
    assert run_stream(raw).content == "mine"


# --- guards ---------------------------------------------------------------------------------------


def test_repetition_guard_detects_a_block_repeated_at_the_tail() -> None:
    block = "The answer is unclear. "  # 23 chars
    text = "Some preamble. " + block * 5
    assert repeated_tail_block(text, min_block=16, repeats=5) == len(block)
    assert repeated_tail_block(text, min_block=16, repeats=6) is None


def test_repetition_guard_catches_short_loops_through_a_multiple_of_their_period() -> None:
    text = "intro " + "ha " * 200
    period = repeated_tail_block(text, min_block=32, repeats=5)
    assert period is not None and period >= 32 and period % 3 == 0


def test_repetition_guard_ignores_ordinary_text_and_respects_max_block() -> None:
    text = "".join(f"step {i}: value {i * i}\n" for i in range(200))
    assert repeated_tail_block(text, min_block=8, repeats=3) is None
    looping = "x" + "abcdefghijklmnopqrstuvwxyz0123456789" * 4
    assert repeated_tail_block(looping, min_block=8, repeats=4) == 36
    assert repeated_tail_block(looping, min_block=8, repeats=4, max_block=30) is None


def test_repetition_guard_matches_a_naive_search() -> None:
    def naive(text: str, min_block: int, repeats: int) -> int | None:
        for p in range(min_block, len(text) // repeats + 1):
            tail = text[len(text) - p * repeats :]
            if tail == tail[-p:] * repeats:
                return p
        return None

    samples = ["", "abc", "ab" * 40, "xyz" + "abcab" * 9, "aab" * 7 + "aabx", "q" + "ab c" * 12]
    for text in samples:
        for min_block in (1, 2, 4, 5):
            for repeats in (2, 3, 5):
                assert repeated_tail_block(text, min_block=min_block, repeats=repeats) == naive(
                    text, min_block, repeats
                ), (text, min_block, repeats)


def test_output_caps() -> None:
    assert stream_byte_cap(1000) == 1024 * 1024
    assert stream_byte_cap(131072) == 131072 * 30
    assert (
        output_cap_violation(
            content_chars=60, reasoning_chars=40, received_bytes=10, max_output_chars=100
        )
        is None
    )
    reason = output_cap_violation(
        content_chars=60, reasoning_chars=41, received_bytes=10, max_output_chars=100
    )
    assert reason is not None and "100 characters" in reason
    reason = output_cap_violation(
        content_chars=1,
        reasoning_chars=0,
        received_bytes=501,
        max_output_chars=100,
        max_stream_bytes=500,
    )
    assert reason is not None and "500 bytes" in reason


def test_an_event_field_in_an_earlier_chunk_belongs_to_the_next_event() -> None:
    """Found by the chunking property above: a chunk that ends after an `event:` (or `retry:`)
    line left the decoder with that field set and no data line, and the next chunk took the
    fast path of a fresh event boundary, dropping the event type."""
    raw = b"event:\xc2\x88\nevent:\xc2\x88\ndata:\n\ndata:\n\n"
    whole = decode_sse([raw])
    assert whole[0].event == "\x88" and whole[1].event is None
    assert decode_sse([raw[:15], raw[15:]]) == whole
    retry = b"retry:250\ndata:x\n\n"
    assert decode_sse([retry[:10], retry[10:]]) == decode_sse([retry])
