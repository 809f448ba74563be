"""Incremental decoding of OpenAI-style chat streams (server-sent events).

Three layers, each pure and usable offline (``reconcile-usage`` re-parses saved evidence with the
same code the live engine used):

* :class:`SSEDecoder` turns arbitrary byte chunks into :class:`SSEEvent` s.
* :class:`ChatStreamAccumulator` turns events into what a chat completion said
  (:class:`ChatStreamResult`).
* the guards checked while a stream is in flight live in runs/engine/guards.py.

Lines end at CR, LF or CRLF only (``str.splitlines`` also splits at U+2028, U+2029, NEL and form
feeds, legal in model output), so all splitting here happens on bytes before any decoding.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runs.engine.chat_result import ChatStreamResult, ToolCall
from runs.engine.sse_fast import apply_common, json_object, plain_values
from runs.vocabulary.stream_reasons import EMPTY_STREAM

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DONE_SENTINEL",
    "KNOWN_FINISH_REASONS",
    "ChatStreamAccumulator",
    "SSEDecoder",
    "SSEError",
    "SSEEvent",
    "SSELimitError",
    "decode_sse",
]

# One data line normally carries one small JSON chunk, but some servers put a whole tool-call
# argument string (JSON-escaped, so up to 6 bytes per character) into a single chunk.
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024

DONE_SENTINEL = "[DONE]"

# finish_reason values after which the call is a finished call. Anything else (None,
# "content_filter", a provider-specific string) leaves the call incomplete.
KNOWN_FINISH_REASONS = frozenset({"stop", "tool_calls", "function_call", "length"})

_BOM = b"\xef\xbb\xbf"
_CR = 0x0D
_LF = 0x0A


class SSEError(Exception):
    """The byte stream cannot be decoded as server-sent events."""


class SSELimitError(SSEError):
    """A line or an event grew past the configured cap; the stream is abandoned."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``data`` is the data lines joined with "\\n". ``decode_error`` is set (and ``data`` holds the
    text decoded with replacement characters) when the event's bytes are not valid UTF-8, so the
    caller decides what an undecodable event means instead of the decoder crashing.
    ``terminated`` is False only for an event that :meth:`SSEDecoder.close` found without the
    blank line that should end it (the connection closed mid-event).
    """

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    decode_error: str | None = None
    terminated: bool = True


class SSEDecoder:
    """Incremental SSE decoder over byte chunks.

    Follows the WHATWG event-stream rules: a leading UTF-8 BOM is dropped; lines end at CR, LF
    or CRLF (a CR that ends one chunk and an LF that starts the next are one line end); ``:``
    lines are comments; ``field: value`` loses exactly one leading space of the value; ``data``
    lines accumulate and are joined with "\\n"; a blank line dispatches the event if it has any
    data line; ``id`` persists to later events like a browser's last-event-ID.

    Work is done per chunk with ``bytes.find``, never per byte.
    """

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if max_line_bytes <= 0 or max_event_bytes <= 0:
            raise ValueError("SSE size caps must be positive")
        self.max_line_bytes = max_line_bytes
        self.max_event_bytes = max_event_bytes
        self.received_bytes = 0
        self.comment_count = 0
        self._buf = bytearray()
        self._bom_checked = False
        # A chunk ended with CR: the line is already dispatched, so an LF opening the next chunk
        # belongs to that same line end and must not produce an extra blank line.
        self._skip_leading_lf = False
        self._closed = False
        self._failed: SSEError | None = None
        self._reset_event()
        self._last_id: bytes | None = None

    def _reset_event(self) -> None:
        self._data_lines: list[bytes] = []
        self._event_bytes = 0
        self._event_type: bytes | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add bytes; return the events completed by them (possibly none)."""
        return [SSEEvent(e) if e.__class__ is str else e for e in self.feed_plain(chunk)]  # type: ignore[misc]

    def feed_plain(self, chunk: bytes) -> list[SSEEvent | str]:
        """:meth:`feed`, except that a plain event — one ``data`` line, valid UTF-8, no
        ``id`` so far, ended by a blank line — comes as its text (what :class:`SSEEvent` would
        hold as ``data``, every other field at its default). Saves building an object per
        chunk on the engine's hot path; :meth:`ChatStreamAccumulator.feed_events` takes both."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise SSEError("feed() after close()")
        self.received_bytes += len(chunk)
        if not chunk:
            return []
        buf = self._buf
        if not self._bom_checked and not buf and len(chunk) >= len(_BOM):
            # A stream's first bytes: the BOM check needs no buffer (the general path below
            # would read the whole first read line by line).
            self._bom_checked = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if (
            not buf
            and self._bom_checked
            and not self._skip_leading_lf
            and not self._data_lines
            and self._event_type is None
            and self._retry is None
            and b"\r" not in chunk
        ):
            # The common case: the chunk starts at an event boundary (no field of an event set
            # yet: an earlier chunk's `event:` or `retry:` line belongs to the next event) and
            # its lines end in LF.
            # Whole events are cut out of it with one find each; what is left (part of an
            # event) takes the general path below.
            try:
                events, done = self._whole_events(chunk)
            except SSEError as exc:
                self._failed = exc
                raise
            if done == len(chunk):
                return events
            chunk = chunk[done:]
        else:
            events = []
        buf += chunk
        start = 0
        if self._skip_leading_lf:
            self._skip_leading_lf = False
            if buf[0] == _LF:
                start = 1
        if not self._bom_checked:
            pending = bytes(buf[start : start + len(_BOM)])
            if len(pending) < len(_BOM) and _BOM.startswith(pending):
                # Not enough bytes yet to tell a split BOM from text.
                del buf[:start]
                return []
            self._bom_checked = True
            if pending == _BOM:
                start += len(_BOM)
        try:
            start = self._consume_lines(start, events)
        except SSEError as exc:
            self._failed = exc
            raise
        del buf[:start]
        if len(buf) > self.max_line_bytes:
            self._failed = SSELimitError(
                f"SSE line exceeds {self.max_line_bytes} bytes without a line end"
            )
            raise self._failed
        return events

    def _whole_events(self, chunk: bytes) -> tuple[list[SSEEvent | str], int]:
        """The events of ``chunk`` that end in it (a blank line), and how many bytes they took.
        Only called at an event boundary on a chunk without CR, so "\n\n" is exactly "a line
        end, then a blank line". A one-line ``data:`` event (what chat streams send) comes out
        as its text (a plain event); any other event goes through the line rules."""
        if self._last_id is None:
            plain = plain_values(chunk, min(self.max_line_bytes, self.max_event_bytes - 1))
            if plain is not None:
                return plain  # type: ignore[return-value]
        events: list[SSEEvent | str] = []
        pos = 0
        end = chunk.find(b"\n\n")
        while end != -1:
            block = chunk[pos:end]
            if block[:5] == b"data:" and b"\n" not in block:
                if len(block) > self.max_line_bytes:
                    raise SSELimitError(f"SSE line exceeds {self.max_line_bytes} bytes")
                value = block[6:] if block[5:6] == b" " else block[5:]
                if len(value) + 1 > self.max_event_bytes:
                    raise SSELimitError(f"SSE event exceeds {self.max_event_bytes} bytes")
                try:
                    data = value.decode("utf-8")
                except UnicodeDecodeError:
                    self._data_lines.append(value)
                    events.append(self._build_event(terminated=True))
                    self._reset_event()
                else:
                    last_id = self._last_id
                    if last_id is None:
                        events.append(data)  # a plain event (feed_plain)
                    else:
                        self._data_lines.append(value)
                        events.append(self._build_event(terminated=True))
                        self._reset_event()
            else:
                for line in block.split(b"\n"):
                    if len(line) > self.max_line_bytes:
                        raise SSELimitError(f"SSE line exceeds {self.max_line_bytes} bytes")
                    self._process_line(line, events)
                self._process_line(b"", events)
            pos = end + 2
            end = chunk.find(b"\n\n", pos)
        return events, pos

    def close(self) -> list[SSEEvent]:
        """End of stream. An event still open (no blank line after it) is returned with
        ``terminated=False``: the spec says to drop it, but the caller must be able to tell
        "the server never sent it" from "the connection closed in the middle of it"."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            return []
        self._closed = True
        if self._buf:
            # A final line without a line end still counts as a line of the open event.
            tail = bytes(self._buf)
            self._buf.clear()
            if not self._bom_checked and _BOM.startswith(tail):
                tail = b""
            if tail:
                try:
                    self._process_line(tail, [])
                except SSEError as exc:
                    self._failed = exc
                    raise
        if not self._data_lines:
            self._reset_event()
            return []
        event = self._build_event(terminated=False)
        self._reset_event()
        return [event]

    @property
    def pending_bytes(self) -> int:
        """Bytes held for a line that has not ended yet."""
        return len(self._buf)

    def _consume_lines(self, start: int, events: list[SSEEvent]) -> int:
        buf = self._buf
        end = len(buf)
        # The next CR and LF positions are cached so a buffer without CR is not rescanned for
        # CR once per line (that would be quadratic in the number of lines).
        next_cr = buf.find(b"\r", start)
        next_lf = buf.find(b"\n", start)
        while start < end:
            if next_cr != -1 and next_cr < start:
                next_cr = buf.find(b"\r", start)
            if next_lf != -1 and next_lf < start:
                next_lf = buf.find(b"\n", start)
            if next_cr == -1 and next_lf == -1:
                break
            if next_lf == -1 or (next_cr != -1 and next_cr < next_lf):
                line_end = next_cr
                if line_end + 1 < end:
                    after = line_end + 2 if buf[line_end + 1] == _LF else line_end + 1
                else:
                    after = line_end + 1
                    self._skip_leading_lf = True
            else:
                line_end = next_lf
                after = line_end + 1
            if line_end - start > self.max_line_bytes:
                raise SSELimitError(f"SSE line exceeds {self.max_line_bytes} bytes")
            self._process_line(bytes(buf[start:line_end]), events)
            start = after
        return start

    def _process_line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data_lines:
                events.append(self._build_event(terminated=True))
            self._reset_event()
            return
        if line[0] == 0x3A:  # ":" comment, e.g. keep-alive pings
            self.comment_count += 1
            return
        colon = line.find(b":")
        if colon == -1:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._event_bytes += len(value) + 1
            if self._event_bytes > self.max_event_bytes:
                raise SSELimitError(f"SSE event exceeds {self.max_event_bytes} bytes")
            self._data_lines.append(value)
        elif name == b"event":
            self._event_type = value
        elif name == b"id":
            if b"\x00" not in value:  # the spec ignores ids containing NUL
                self._last_id = value
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)
        # Unknown fields are ignored, as the spec requires.

    def _build_event(self, *, terminated: bool) -> SSEEvent:
        raw = b"\n".join(self._data_lines)
        errors: list[str] = []
        data = _decode_utf8(raw, "data", errors)
        event_type = (
            _decode_utf8(self._event_type, "event", errors)
            if self._event_type is not None
            else None
        )
        event_id = _decode_utf8(self._last_id, "id", errors) if self._last_id is not None else None
        return SSEEvent(
            data=data,
            event=event_type or None,
            id=event_id,
            retry=self._retry,
            decode_error="; ".join(errors) or None,
            terminated=terminated,
        )


def _decode_utf8(raw: bytes, what: str, errors: list[str]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        errors.append(f"invalid UTF-8 in {what} at byte {exc.start}: {exc.reason}")
        return raw.decode("utf-8", errors="replace")


def decode_sse(
    chunks: Iterable[bytes],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> list[SSEEvent]:
    """Decode a whole saved stream (e.g. CallEvidence bytes) in one go."""
    decoder = SSEDecoder(max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events


# --------------------------------------------------------------------------------------------
# Chat completion stream


@dataclass(slots=True)
class _ToolCallParts:
    index: int
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatStreamAccumulator:
    """Consumes the events of one ``/chat/completions`` stream (``stream: true``).

    Only ``choices`` index 0 is read: requests are sent with ``n = 1``. The first error (a
    malformed JSON chunk, an ``error`` event or object, invalid UTF-8) is sticky: later events are
    counted but not applied, because content after a protocol error cannot be trusted.

    ``clock`` is called once at construction (the call's start, unless ``started_at`` is given)
    and once for the first non-empty content or reasoning delta, which is the TTFT mark — unless
    the reader set ``read_at`` (the moment the bytes being fed came off the socket, before any
    other work of the event loop): then that moment is the mark (issue 25).
    """

    # Whether a plain event may be read as a chat chunk by sse_fast (a subclass reading
    # another wire format says no).
    COMMON_CHUNKS = True

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        started_at: float | None = None,
    ) -> None:
        self._clock = clock
        self.started_at = clock() if started_at is None else started_at
        self.content_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self._tools: dict[int, _ToolCallParts] = {}
        self.content_chars = 0
        self.reasoning_chars = 0
        self.finish_reason: str | None = None
        self.models_list: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.done_count = 0
        self.events_after_done = 0
        self.event_count = 0
        self.first_token_at: float | None = None
        self.read_at: float | None = None
        self.error: str | None = None
        self._unterminated = False

    def feed_events(self, events: Iterable[SSEEvent | str]) -> None:
        """Consume events; a ``str`` is a plain event's text (:meth:`SSEDecoder.feed_plain`),
        a common chat chunk read by ``sse_fast.apply_common`` where it can."""
        common = self.COMMON_CHUNKS
        for event in events:
            if not isinstance(event, str):
                self.consume(event)
            elif not (common and not self.done_count and self.error is None) or not (
                apply_common(self, event)
            ):
                self.consume_data(event)

    def consume(self, event: SSEEvent) -> None:
        if event.terminated and event.decode_error is None and event.event != "error":
            self.consume_data(event.data)
            return
        self.event_count += 1
        number = self.event_count
        if not event.terminated:
            # The connection closed inside this event: its bytes are not a whole message.
            self._unterminated = True
            self._fail(f"stream ended inside event #{number} (no blank line after it)")
        elif not self._settled(event.data):
            if event.decode_error is not None:
                self._fail(f"event #{number}: {event.decode_error}")
            else:
                self._fail(f"error event #{number}: {_clip(event.data)}")

    def consume_data(self, data: str) -> None:
        """``consume(SSEEvent(data))``: a whole event with nothing but its data."""
        self.event_count += 1
        number = self.event_count
        if self._settled(data):
            return
        try:
            chunk = json_object(data)
        except json.JSONDecodeError as exc:
            self._fail(f"malformed JSON in event #{number}: {exc.msg} at {exc.pos}: {_clip(data)}")
            return
        except RecursionError:  # thousands of nested brackets: no chat chunk is that deep
            self._fail(f"event #{number}: JSON nested too deeply to read: {_clip(data)}")
            return
        if not isinstance(chunk, dict):
            self._fail(f"event #{number} is JSON but not an object: {_clip(data)}")
            return
        self._apply_chunk(chunk, number)

    def _settled(self, data: str) -> bool:
        """Whether a whole event needs no more work: a [DONE], anything after one, or anything
        after an error."""
        is_done = _is_done(data)
        if self.done_count:
            # [DONE] is the last message of the protocol; anything after it is noted and
            # ignored so it cannot change the recorded answer or usage.
            if is_done:
                self.done_count += 1
            else:
                self.events_after_done += 1
            return True
        if is_done:
            self.done_count += 1
            return True
        return self.error is not None

    def _apply_chunk(self, chunk: dict[str, Any], number: int) -> None:
        if "error" in chunk and chunk["error"] is not None:
            self._fail(f"error object in event #{number}: {_clip(json.dumps(chunk['error']))}")
            return
        model = chunk.get("model")
        if isinstance(model, str) and model and model not in self.models_list:
            self.models_list.append(model)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            # The include_usage chunk is normally the last one; if several carry usage, the
            # last is the provider's final word.
            self.usage = usage
        choices = chunk.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            self._fail(f"event #{number}: 'choices' is not a list")
            return
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                self._fail(f"event #{number}: choice {position} is not an object")
                return
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta is not None:
                if not isinstance(delta, dict):
                    self._fail(f"event #{number}: 'delta' is not an object")
                    return
                if not self._apply_delta(delta, number):
                    return
            finish = choice.get("finish_reason")
            if finish is not None:
                if not isinstance(finish, str):
                    self._fail(f"event #{number}: finish_reason is not a string")
                    return
                self.finish_reason = finish

    def _apply_delta(self, delta: dict[str, Any], number: int) -> bool:
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            self._fail(f"event #{number}: delta.content is not a string")
            return False
        # Servers spell the reasoning channel reasoning_content (DeepSeek, older vLLM) or
        # reasoning (newer vLLM, OpenRouter); some send both with the same text in one delta,
        # so they are aliases: take one per delta, never both.
        reasoning = delta.get("reasoning_content")
        if not reasoning:
            reasoning = delta.get("reasoning")
        if reasoning is not None and not isinstance(reasoning, str):
            self._fail(f"event #{number}: delta reasoning is not a string")
            return False
        if content:
            self.content_parts.append(content)
            self.content_chars += len(content)
        if reasoning:
            self.reasoning_parts.append(reasoning)
            self.reasoning_chars += len(reasoning)
        if (content or reasoning) and self.first_token_at is None:
            self.mark_first_token()
        tool_calls = delta.get("tool_calls")
        if tool_calls is None:
            return True
        if not isinstance(tool_calls, list):
            self._fail(f"event #{number}: delta.tool_calls is not a list")
            return False
        for position, part in enumerate(tool_calls):
            if not isinstance(part, dict):
                self._fail(f"event #{number}: tool call delta {position} is not an object")
                return False
            index = part.get("index")
            if index is None and len(tool_calls) == 1 and len(self._tools) <= 1:
                # Some servers omit the index when only one tool call is streamed.
                index = next(iter(self._tools), 0)
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                self._fail(f"event #{number}: tool call delta {position} has no valid index")
                return False
            parts = self._tools.setdefault(index, _ToolCallParts(index=index))
            call_id = part.get("id")
            if isinstance(call_id, str) and call_id and parts.id is None:
                parts.id = call_id
            call_type = part.get("type")
            if isinstance(call_type, str) and call_type and parts.type is None:
                parts.type = call_type
            function = part.get("function")
            if function is None:
                continue
            if not isinstance(function, dict):
                self._fail(f"event #{number}: tool call function is not an object")
                return False
            name = function.get("name")
            if isinstance(name, str) and name and name != parts.name:
                # OpenAI sends the name once; a few servers repeat the full name in every delta
                # (equal, skipped) and a few stream it in pieces (appended).
                parts.name += name
            arguments = function.get("arguments")
            if arguments is not None:
                if not isinstance(arguments, str):
                    self._fail(f"event #{number}: tool call arguments are not a string")
                    return False
                parts.arguments.append(arguments)
        return True

    def mark_first_token(self) -> None:
        self.first_token_at = self._clock() if self.read_at is None else self.read_at

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    @property
    def content(self) -> str:
        return "".join(self.content_parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    def result(self) -> ChatStreamResult:
        served_model = self.models_list[0] if len(self.models_list) == 1 else None
        reason: str | None = None
        if self.error is not None:
            reason = self.error
        elif self.done_count == 0:
            reason = EMPTY_STREAM if self.event_count == 0 else "stream ended without [DONE]"
        elif self.done_count > 1:
            reason = f"stream has {self.done_count} [DONE] markers"
        elif self.events_after_done:
            reason = f"{self.events_after_done} event(s) after [DONE]"
        elif self.finish_reason is None:
            reason = "no finish_reason"
        elif self.finish_reason not in KNOWN_FINISH_REASONS:
            reason = f"unknown finish_reason {self.finish_reason!r}"
        complete = reason is None
        ttft = None if self.first_token_at is None else self.first_token_at - self.started_at
        return ChatStreamResult(
            content=self.content,
            reasoning=self.reasoning,
            tool_calls=tuple(
                ToolCall(
                    index=p.index,
                    id=p.id,
                    type=p.type,
                    name=p.name,
                    arguments="".join(p.arguments),
                )
                for _, p in sorted(self._tools.items())
            ),
            finish_reason=self.finish_reason,
            # Chunks naming different models leave the served model unknown: pricing by either
            # one would be a guess.
            served_model=served_model,
            models_seen=tuple(self.models_list),
            usage=self.usage,
            done_count=self.done_count,
            events_after_done=self.events_after_done,
            event_count=self.event_count,
            first_token_at=self.first_token_at,
            ttft_s=ttft,
            error=self.error,
            complete=complete,
            truncated=complete and self.finish_reason == "length",
            incomplete_reason=reason,
        )


def _is_done(data: str) -> bool:
    # Length first: stripping a large content chunk to compare it with "[DONE]" would copy it.
    return len(data) <= 32 and data.strip() == DONE_SENTINEL


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
