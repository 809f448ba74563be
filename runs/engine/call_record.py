"""One model call's stream and the columns its close writes (runs/engine/calls.py
`Caller._close`): what came back (evidence), a router's routing headers, and the token buckets
and cost — from a finished stream's usage only, or the known zero of a call that never left."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from runs.engine import store
from runs.engine.sse import ChatStreamAccumulator, SSEDecoder
from runs.ledger.accounting import (
    NOT_SENT_ERROR,
    NOT_SENT_USAGE,
    call_accounting,
    with_gateway_resent,
)
from runs.ledger.usage import header_count
from srbench.money import money_stored

__all__ = ["Stream", "accounting_fields", "evidence_fields", "router_fields"]


@dataclass
class Stream:
    """What one call's stream has produced so far: the evidence `_close` records."""

    # time.monotonic() before the request (duration_ms counts from here); TTFT counts from the
    # moment the request was handed to the socket (the transport's sent_at), when known.
    started: float
    sent_wall: datetime
    acc: ChatStreamAccumulator
    raw: bytearray = field(default_factory=bytearray)
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    http_status: int | None = None
    kept: dict[str, str] = field(default_factory=dict)
    error_code: str = ""
    error: str = ""
    # Where the SSE bytes the chunk sink kept but has not read yet begin in `raw` (None: all
    # read). After the first token the sink reads a stream in batches (calls.chunk_sink).
    unread_from: int | None = None

    def catch_up(self) -> None:
        """Read the SSE bytes kept but not read yet; raises the decoder's SSEError."""
        start = self.unread_from
        if start is not None:
            self.unread_from = None
            self.acc.feed_events(self.decoder.feed_plain(bytes(self.raw[start:])))


def router_fields(
    target: store.TargetInfo, lower: dict[str, str], fields: dict[str, Any], stream: Stream
) -> None:
    """A router's routing headers into the call's fields; a config it acknowledges other
    than the pinned one fails an otherwise good call."""
    fields["selected_model"] = lower.get("x-vsr-selected-model", "")
    fields["selected_decision"] = lower.get("x-vsr-selected-decision", "")
    fields["config_hash_ack"] = lower.get("x-vsr-config-hash", "")
    fields["inference_call_count"] = header_count(lower.get("x-vsr-inference-call-count", ""))
    if (
        stream.http_status == 200
        and not stream.error_code
        and fields["config_hash_ack"] != target.config_hash
    ):
        stream.error_code = "config_hash_mismatch"
        stream.error = (
            f"router acknowledged config {fields['config_hash_ack'] or 'nothing'}, "
            f"expected {target.config_hash}"
        )


def evidence_fields(stream: Stream, result: Any) -> dict[str, Any]:
    """The call's record of what came back, before accounting and outcome."""
    return {
        "http_status": stream.http_status,
        "response_headers": stream.kept,
        "served_model": result.served_model or "",
        "finish_reason": result.finish_reason or "",
        "content": result.content,
        "reasoning": result.reasoning,
        "tool_calls": [dataclasses.asdict(t) for t in result.tool_calls] or None,
        "usage_raw": result.usage,
        "stage": "done",
        "bytes_received": len(stream.raw),
        "finished_at": timezone.now(),
        "duration_ms": (time.monotonic() - stream.started) * 1000,
        "ttft_ms": None if result.ttft_s is None else result.ttft_s * 1000,
        "first_token_at": None
        if result.first_token_at is None
        else stream.sent_wall + timedelta(seconds=result.first_token_at - stream.started),
        "last_activity_at": timezone.now(),
    }


def accounting_fields(
    target: store.TargetInfo, lower: dict[str, str], stream: Stream, result: Any
) -> dict[str, Any]:
    """Token buckets and cost, from a finished stream's usage only; a call that never left
    (no connection was made) used and cost nothing, known."""
    if stream.error_code == NOT_SENT_ERROR:
        return dict(NOT_SENT_USAGE)
    if result.complete and (not stream.error_code or stream.error_code == "config_hash_mismatch"):
        buckets, cost, cache_neutral, note = call_accounting(
            kind=target.kind,
            usage=result.usage,
            served_model=result.served_model or "",
            headers=lower,
            price_table=target.prices,
            usage_estimated=bool(target.stream_usage_estimate),
        )
    else:
        # Usage is trusted only from a finished stream (one [DONE], a finish_reason): a
        # usage chunk in a broken stream stays in the evidence but is not a receipt.
        buckets, cost, cache_neutral = None, None, None
        note = with_gateway_resent("stream incomplete: usage unverified", lower)
    fields: dict[str, Any] = {}
    if buckets is not None:
        fields.update(
            input_tokens=buckets.input,
            cached_input_tokens=buckets.cached_input,
            cache_write_tokens=buckets.cache_write,
            output_tokens=buckets.output,
            reasoning_tokens=buckets.reasoning,
            cached_reported=buckets.cached_reported,
            cache_write_reported=buckets.cache_write_reported,
        )
    # Stored exactly, never rounded: by the rule reconcile-usage uses (srbench.money).
    fields.update(
        cost_usd=money_stored(cost),
        cache_neutral_cost_usd=money_stored(cache_neutral),
        cost_note=note[:200],
    )
    return fields
