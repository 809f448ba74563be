"""Usage evidence (DESIGN §5): a provider's usage object as four token buckets, the MoM
router's per-request usage receipt, and the one predicate that says which evidence may price a
MoM call — a complete receipt or a proven direct call (R2.5).

Pure: no Django, no I/O. :mod:`runs.ledger.accounting` prices what this module counts and re-exports
its names, so callers keep importing from there. Unknown is ``None`` and never becomes 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from srbench.digits import ascii_digits

__all__ = [
    "HEADER_CALL_COUNT",
    "HEADER_MODEL_USAGE",
    "HEADER_SELECTED_MODEL",
    "MAX_RECEIPT_BYTES",
    "MAX_RECEIPT_CALLS",
    "NO_USAGE_OBJECT",
    "MomEvidence",
    "Receipt",
    "ReceiptCall",
    "ReceiptOutcome",
    "UsageBuckets",
    "UsageOutcome",
    "header_value",
    "mom_call_buckets",
    "mom_evidence",
    "parse_model_usage_receipt",
    "parse_model_usage_receipt_explained",
    "usage_buckets",
    "usage_buckets_explained",
]

UsageShape = Literal["openai", "anthropic", "responses"]

HEADER_MODEL_USAGE = "x-vsr-model-usage"
HEADER_CALL_COUNT = "x-vsr-inference-call-count"
HEADER_SELECTED_MODEL = "x-vsr-selected-model"

# Limits the router itself documents for the receipt header.
MAX_RECEIPT_BYTES = 12 * 1024
MAX_RECEIPT_CALLS = 256

# --------------------------------------------------------------------------------------------
# Usage → four buckets


@dataclass(frozen=True, slots=True)
class UsageBuckets:
    """Four mutually exclusive token classes of one call.

    ``input`` is fresh (uncached) input; ``cached_input`` was read from a prompt cache;
    ``cache_write`` was written to it; ``output`` includes reasoning tokens. The ``*_reported``
    flags say whether the provider sent the cache field at all (an explicit 0 counts as
    reported), so a cache-read ratio can leave out providers that never report caching.

    ``reasoning`` is the part of ``output`` the provider reports as reasoning (OpenAI's
    ``completion_tokens_details.reasoning_tokens``, the Responses API's
    ``output_tokens_details.reasoning_tokens``): its own count, kept beside ``output``, never
    added to it (providers bill it inside the output count, at the output price). None when the
    provider did not report it — unknown, never 0 (issue 37 item 4).
    """

    input: int
    cached_input: int
    cache_write: int
    output: int
    cached_reported: bool
    cache_write_reported: bool
    shape: UsageShape
    reasoning: int | None = None

    def __post_init__(self) -> None:
        for name in ("input", "cached_input", "cache_write", "output"):
            value = getattr(self, name)
            if not _is_count(value):
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.reasoning is not None and not (
            _is_count(self.reasoning) and self.reasoning <= self.output
        ):
            raise ValueError(f"reasoning must be an int in 0..output, got {self.reasoning!r}")

    @property
    def prompt_total(self) -> int:
        return self.input + self.cached_input + self.cache_write


# The reason a finished stream's usage is unknown when it carried no usage at all (a server
# that sends none when streaming, e.g. llama.cpp's; issue 39).
NO_USAGE_OBJECT = "no usage object"


@dataclass(frozen=True, slots=True)
class UsageOutcome:
    """Buckets, or why there are none: ``missing`` (no usage, or no prompt/output count) or
    ``invalid`` (counts present but impossible). Both leave usage unknown."""

    buckets: UsageBuckets | None
    problem: Literal["missing", "invalid"] | None
    reason: str


# The largest token count the ledger's columns hold (bigint): a larger one is no real count,
# and writing it made the call's close fail.
MAX_TOKEN_COUNT = 2**63 - 1


def _is_count(value: object) -> bool:
    # bool is a subclass of int in Python; ``True`` tokens is a provider bug, not 1 token.
    return type(value) is int and 0 <= value <= MAX_TOKEN_COUNT


class _Invalid(Exception):
    pass


class _Missing(Exception):
    pass


def _count_field(source: Mapping[str, Any], key: str, where: str) -> int | None:
    """The count under ``key``: None when absent or null, else a validated int."""
    value = source.get(key)
    if value is None:
        return None
    if not _is_count(value):
        raise _Invalid(f"{where}{key} is not an integer from 0 to 2^63 - 1: {value!r}")
    return int(value)


def _agreed(candidates: list[tuple[str, int | None]], what: str) -> tuple[int, bool]:
    """One value from several aliases of the same counter: (value, reported). Disagreeing
    aliases make the usage invalid rather than picking one."""
    present = [(name, value) for name, value in candidates if value is not None]
    if not present:
        return 0, False
    values = {value for _, value in present}
    if len(values) > 1:
        listed = ", ".join(f"{name}={value}" for name, value in present)
        raise _Invalid(f"{what} fields disagree: {listed}")
    return present[0][1], True


def _details(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    details = raw.get(key)
    if details is None:
        return {}
    if not isinstance(details, Mapping):
        raise _Invalid(f"{key} is not an object: {details!r}")
    return details


def _reasoning(raw: Mapping[str, Any], key: str, output: int | None) -> int | None:
    """The reasoning part of the output count under ``key`` (``completion_tokens_details`` or
    ``output_tokens_details``), None when not reported. More reasoning than output is
    impossible: the usage is invalid rather than one of the two believed."""
    where = f"{key}."
    value = _count_field(_details(raw, key), "reasoning_tokens", where)
    if value is not None and output is not None and value > output:
        raise _Invalid(f"{where}reasoning_tokens ({value}) exceed the output count ({output})")
    return value


def _openai_buckets(raw: Mapping[str, Any]) -> UsageBuckets:
    prompt = _count_field(raw, "prompt_tokens", "")
    output = _count_field(raw, "completion_tokens", "")
    details = _details(raw, "prompt_tokens_details")
    d = "prompt_tokens_details."
    # Cache reads: OpenAI's nested field, the MoM receipt's cached_input_tokens, or the
    # Anthropic name that proxies (LiteLLM and friends) copy into OpenAI-shaped usage.
    cached, cached_reported = _agreed(
        [
            (d + "cached_tokens", _count_field(details, "cached_tokens", d)),
            ("cached_input_tokens", _count_field(raw, "cached_input_tokens", "")),
            ("cache_read_input_tokens", _count_field(raw, "cache_read_input_tokens", "")),
        ],
        "cache-read",
    )
    written, written_reported = _agreed(
        [
            (d + "cache_write_tokens", _count_field(details, "cache_write_tokens", d)),
            (d + "cache_creation_tokens", _count_field(details, "cache_creation_tokens", d)),
            ("cache_write_tokens", _count_field(raw, "cache_write_tokens", "")),
            ("cache_creation_tokens", _count_field(raw, "cache_creation_tokens", "")),
            ("created_cache_tokens", _count_field(raw, "created_cache_tokens", "")),
            ("cache_creation_input_tokens", _count_field(raw, "cache_creation_input_tokens", "")),
        ],
        "cache-write",
    )
    if prompt is None or output is None:
        missing = "prompt_tokens" if prompt is None else "completion_tokens"
        raise _Missing(f"{missing} is missing")
    if cached + written > prompt:
        raise _Invalid(
            f"cached ({cached}) + cache-write ({written}) exceed prompt_tokens ({prompt})"
        )
    return UsageBuckets(
        input=prompt - cached - written,
        cached_input=cached,
        cache_write=written,
        output=output,
        cached_reported=cached_reported,
        cache_write_reported=written_reported,
        shape="openai",
        reasoning=_reasoning(raw, "completion_tokens_details", output),
    )


def _anthropic_buckets(raw: Mapping[str, Any]) -> UsageBuckets:
    # Anthropic's input_tokens already excludes both cache fields, so the prompt total is the
    # sum of the three and the subtraction below gives input_tokens back.
    fresh = _count_field(raw, "input_tokens", "")
    output = _count_field(raw, "output_tokens", "")
    cached = _count_field(raw, "cache_read_input_tokens", "")
    written = _count_field(raw, "cache_creation_input_tokens", "")
    if fresh is None or output is None:
        missing = "input_tokens" if fresh is None else "output_tokens"
        raise _Missing(f"{missing} is missing")
    return UsageBuckets(
        input=fresh,
        cached_input=cached or 0,
        cache_write=written or 0,
        output=output,
        cached_reported=cached is not None,
        cache_write_reported=written is not None,
        shape="anthropic",
    )


def _responses_buckets(raw: Mapping[str, Any]) -> UsageBuckets:
    # OpenAI's Responses API: input_tokens *includes* the cache reads reported in
    # input_tokens_details.cached_tokens (unlike Anthropic's), and output_tokens includes
    # reasoning tokens. It reports no cache writes.
    fresh = _count_field(raw, "input_tokens", "")
    output = _count_field(raw, "output_tokens", "")
    details = _details(raw, "input_tokens_details")
    d = "input_tokens_details."
    cached = _count_field(details, "cached_tokens", d)
    if fresh is None or output is None:
        missing = "input_tokens" if fresh is None else "output_tokens"
        raise _Missing(f"{missing} is missing")
    if (cached or 0) > fresh:
        raise _Invalid(f"cached ({cached}) exceed input_tokens ({fresh})")
    return UsageBuckets(
        input=fresh - (cached or 0),
        cached_input=cached or 0,
        cache_write=0,
        output=output,
        cached_reported=cached is not None,
        cache_write_reported=False,
        shape="responses",
        reasoning=_reasoning(raw, "output_tokens_details", output),
    )


def usage_buckets_explained(raw: object) -> UsageOutcome:
    """Normalise a provider usage object into :class:`UsageBuckets`, saying why not if not.

    Shape rules:

    * OpenAI (``prompt_tokens``/``completion_tokens``): the prompt includes cached and written
      tokens; input = prompt − cached − written.
    * Anthropic (``input_tokens``/``output_tokens``): ``input_tokens`` excludes the cache fields.
    * OpenAI Responses API (``input_tokens``/``output_tokens`` with ``input_tokens_details``):
      ``input_tokens`` *includes* ``input_tokens_details.cached_tokens``; input = input −
      cached. The details object is what tells it from Anthropic's shape.
    * A usage that mixes the OpenAI and Anthropic counters, or Anthropic cache fields beside
      ``input_tokens_details``, is ``invalid``: which rule applies cannot be told, and a guess
      would misprice the call.
    """
    if raw is None:
        return UsageOutcome(None, "missing", NO_USAGE_OBJECT)
    if not isinstance(raw, Mapping):
        return UsageOutcome(None, "invalid", f"usage is not an object: {raw!r}")
    has_openai = "prompt_tokens" in raw or "completion_tokens" in raw
    has_anthropic = "input_tokens" in raw or "output_tokens" in raw
    try:
        if has_openai and has_anthropic:
            raise _Invalid("usage mixes OpenAI and Anthropic token counters")
        if "input_tokens_details" in raw:
            if "cache_read_input_tokens" in raw or "cache_creation_input_tokens" in raw:
                raise _Invalid("usage mixes Responses-API details and Anthropic cache counters")
            buckets = _responses_buckets(raw)
        elif has_openai:
            buckets = _openai_buckets(raw)
        elif has_anthropic:
            buckets = _anthropic_buckets(raw)
        else:
            return UsageOutcome(None, "missing", "usage has no prompt or output count")
    except _Missing as exc:
        return UsageOutcome(None, "missing", str(exc))
    except _Invalid as exc:
        return UsageOutcome(None, "invalid", str(exc))
    return UsageOutcome(buckets, None, "ok")


def usage_buckets(raw: object) -> UsageBuckets | None:
    """:func:`usage_buckets_explained` without the reason: None means unknown usage."""
    return usage_buckets_explained(raw).buckets


# --------------------------------------------------------------------------------------------
# MoM: usage receipts and proven direct calls


@dataclass(frozen=True, slots=True)
class ReceiptCall:
    """One inference call the router made for a request."""

    model: str | None
    role: str | None
    stage: str | None
    status: str | None
    usage: Mapping[str, Any] | None
    buckets: UsageBuckets | None
    usage_reason: str


@dataclass(frozen=True, slots=True)
class Receipt:
    """A parsed ``x-vsr-model-usage`` header: ``{version: 1, complete, calls: [...]}``."""

    version: int
    complete: bool
    calls: tuple[ReceiptCall, ...]


class ReceiptOutcome(NamedTuple):
    receipt: Receipt | None
    reason: str


def _optional_str(call: Mapping[str, Any], key: str, position: int) -> str | None:
    value = call.get(key)
    if value is None or isinstance(value, str):
        return value
    raise _Invalid(f"calls[{position}].{key} is not a string")


def parse_model_usage_receipt_explained(header_value: str | None) -> ReceiptOutcome:
    """Parse the router's per-request usage receipt, or say why it cannot be used.

    Accepted: a JSON object with ``version`` 1 (int, or the string "1"), ``complete`` a bool and
    ``calls`` a list (≤ 256) of objects with optional ``model``, ``role``, ``stage``, ``status``
    and ``usage``. Child usage may be in the receipt's own shape (``prompt_tokens``,
    ``cached_input_tokens``, ``cache_write_tokens``, ``completion_tokens``), OpenAI's or
    Anthropic's; it is normalised by :func:`usage_buckets`. A child with unusable usage does
    not reject the receipt (it is still evidence of what ran) but leaves that child's cost
    unknown. Anything else, or a header over 12 KiB, is rejected.
    """
    if header_value is None:
        return ReceiptOutcome(None, "no receipt header")
    if len(header_value.encode("utf-8")) > MAX_RECEIPT_BYTES:
        return ReceiptOutcome(None, f"receipt exceeds {MAX_RECEIPT_BYTES} bytes")
    try:
        document = json.loads(header_value)
    except json.JSONDecodeError as exc:
        return ReceiptOutcome(None, f"receipt is not JSON: {exc.msg}")
    try:
        if not isinstance(document, dict):
            raise _Invalid("receipt is not a JSON object")
        version = document.get("version")
        if version not in (1, "1") or isinstance(version, bool):
            raise _Invalid(f"unsupported receipt version {version!r}")
        complete = document.get("complete")
        if not isinstance(complete, bool):
            raise _Invalid("receipt 'complete' is not a boolean")
        raw_calls = document.get("calls")
        if not isinstance(raw_calls, list):
            raise _Invalid("receipt 'calls' is not a list")
        if len(raw_calls) > MAX_RECEIPT_CALLS:
            raise _Invalid(f"receipt lists more than {MAX_RECEIPT_CALLS} calls")
        calls: list[ReceiptCall] = []
        for position, raw_call in enumerate(raw_calls):
            if not isinstance(raw_call, dict):
                raise _Invalid(f"calls[{position}] is not an object")
            usage = raw_call.get("usage")
            outcome = usage_buckets_explained(usage)
            calls.append(
                ReceiptCall(
                    model=_optional_str(raw_call, "model", position),
                    role=_optional_str(raw_call, "role", position),
                    stage=_optional_str(raw_call, "stage", position),
                    status=_optional_str(raw_call, "status", position),
                    usage=usage if isinstance(usage, Mapping) else None,
                    buckets=outcome.buckets,
                    usage_reason=outcome.reason,
                )
            )
    except _Invalid as exc:
        return ReceiptOutcome(None, str(exc))
    return ReceiptOutcome(Receipt(version=1, complete=complete, calls=tuple(calls)), "ok")


def parse_model_usage_receipt(header_value: str | None) -> Receipt | None:
    return parse_model_usage_receipt_explained(header_value).receipt


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that also works on a plain dict."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, candidate in headers.items():
        if key.lower() == name:
            return candidate
    return None


# The largest count a PositiveIntegerField column holds (the router's inference call count).
MAX_HEADER_COUNT = 2**31 - 1


def header_count(text: str) -> int | None:
    """A count a server sends as header text: None unless ASCII digits of at most
    `MAX_HEADER_COUNT` (99999999999 overflows the ledger's column)."""
    text = text.strip()
    if not ascii_digits(text):
        return None
    count = int(text)
    return count if count <= MAX_HEADER_COUNT else None


def _call_count(headers: Mapping[str, str]) -> int | None | Literal["invalid"]:
    value = header_value(headers, HEADER_CALL_COUNT)
    if value is None:
        return None
    count = header_count(value)
    return "invalid" if count is None else count


# --------------------------------------------------------------------------------------------
# Which evidence may price a MoM call: the rule's one home


class MomEvidence(NamedTuple):
    """What may attribute a MoM call's usage and cost (R2.5): a complete receipt, or the served
    model of a proven direct call. Both None means neither, and ``reason`` says why."""

    receipt: Receipt | None
    direct_model: str | None
    reason: str

    @property
    def proven(self) -> bool:
        return self.receipt is not None or self.direct_model is not None


def mom_evidence(headers: Mapping[str, str]) -> MomEvidence:
    """A complete receipt or a proven direct call, from a MoM call's response headers.

    1. A ``x-vsr-model-usage`` receipt, if present, is the only source: it must parse, say
       ``complete: true`` and agree with ``x-vsr-inference-call-count`` when that is sent.
    2. Without a receipt, ``x-vsr-inference-call-count: 1`` and an ``x-vsr-selected-model``
       prove a direct call to the selected model.
    3. Otherwise neither: the final stream's usage is never split across, or multiplied by,
       several internal calls.
    """
    receipt_header = header_value(headers, HEADER_MODEL_USAGE)
    count = _call_count(headers)
    if count == "invalid":
        return MomEvidence(None, None, f"{HEADER_CALL_COUNT} is not a non-negative integer")
    if receipt_header is not None:
        parsed = parse_model_usage_receipt_explained(receipt_header)
        receipt = parsed.receipt
        if receipt is None:
            return MomEvidence(None, None, f"unusable usage receipt: {parsed.reason}")
        if not receipt.complete:
            return MomEvidence(None, None, "usage receipt is marked incomplete")
        if count is not None and count != len(receipt.calls):
            return MomEvidence(
                None,
                None,
                f"{HEADER_CALL_COUNT} says {count} but the receipt lists {len(receipt.calls)}",
            )
        return MomEvidence(receipt, None, f"complete receipt of {len(receipt.calls)} call(s)")
    if count != 1:
        if count is None:
            return MomEvidence(None, None, "no usage receipt and no inference call count")
        return MomEvidence(None, None, f"no usage receipt for {count} inference calls")
    selected = (header_value(headers, HEADER_SELECTED_MODEL) or "").strip()
    if not selected:
        return MomEvidence(None, None, f"direct call without {HEADER_SELECTED_MODEL}")
    return MomEvidence(None, selected, f"proven direct call to {selected}")


def mom_call_buckets(headers: Mapping[str, str], stream_usage: object) -> UsageBuckets | None:
    """The token buckets of a MoM call, from the same evidence that may price it: the sum of a
    complete receipt's children, or the stream usage of a proven direct call; else unknown."""
    evidence = mom_evidence(headers)
    if evidence.direct_model is not None:
        return usage_buckets(stream_usage)
    if evidence.receipt is None:
        return None
    children = [c.buckets for c in evidence.receipt.calls]
    if any(b is None for b in children):
        return None
    known = [b for b in children if b is not None]
    return UsageBuckets(
        input=sum(b.input for b in known),
        cached_input=sum(b.cached_input for b in known),
        cache_write=sum(b.cache_write for b in known),
        output=sum(b.output for b in known),
        cached_reported=all(b.cached_reported for b in known),
        cache_write_reported=all(b.cache_write_reported for b in known),
        shape=known[0].shape if known else "openai",
        # Known only when every inference call reported it: a partial sum would understate.
        reasoning=None
        if any(b.reasoning is None for b in known)
        else sum(b.reasoning or 0 for b in known),
    )
