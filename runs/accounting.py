"""The accounting contract (DESIGN §5): usage buckets, prices, call cost, MoM receipts.

This module is the one place for these rules; reports, comparisons, exports, the API and the
reconcile command all import from here. Unknown is ``None`` throughout and never becomes 0;
money is ``Decimal`` and is never rounded here (display code quantises).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, Literal, NamedTuple

__all__ = [
    "MAX_RECEIPT_BYTES",
    "MAX_RECEIPT_CALLS",
    "CostOutcome",
    "KnownSum",
    "Price",
    "PriceError",
    "Receipt",
    "ReceiptCall",
    "ReceiptOutcome",
    "UsageBuckets",
    "UsageOutcome",
    "CallAccounting",
    "cache_neutral_cost",
    "call_accounting",
    "call_cost",
    "mom_cache_neutral_cost",
    "mom_call_cost",
    "parse_model_usage_receipt",
    "parse_model_usage_receipt_explained",
    "price_for_model",
    "priced_call_cost",
    "sum_known",
    "usage_buckets",
    "usage_buckets_explained",
]

UsageShape = Literal["openai", "anthropic", "responses"]

TOKENS_PER_PRICE_UNIT = Decimal(1_000_000)

# Token counts (≤ 1e12) times prices with a handful of decimals need far fewer digits than
# this; a generous precision keeps every product and sum exact, so no cost is ever rounded.
_EXACT_PRECISION = 60

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
    """

    input: int
    cached_input: int
    cache_write: int
    output: int
    cached_reported: bool
    cache_write_reported: bool
    shape: UsageShape

    def __post_init__(self) -> None:
        for name in ("input", "cached_input", "cache_write", "output"):
            value = getattr(self, name)
            if not _is_count(value):
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")

    @property
    def prompt_total(self) -> int:
        return self.input + self.cached_input + self.cache_write


@dataclass(frozen=True, slots=True)
class UsageOutcome:
    """Buckets, or why there are none: ``missing`` (no usage, or no prompt/output count) or
    ``invalid`` (counts present but impossible). Both leave usage unknown."""

    buckets: UsageBuckets | None
    problem: Literal["missing", "invalid"] | None
    reason: str


def _is_count(value: object) -> bool:
    # bool is a subclass of int in Python; ``True`` tokens is a provider bug, not 1 token.
    return type(value) is int and value >= 0


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
        raise _Invalid(f"{where}{key} is not an integer >= 0: {value!r}")
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


def _openai_buckets(raw: Mapping[str, Any]) -> UsageBuckets:
    prompt = _count_field(raw, "prompt_tokens", "")
    output = _count_field(raw, "completion_tokens", "")
    details = raw.get("prompt_tokens_details")
    if details is None:
        details = {}
    elif not isinstance(details, Mapping):
        raise _Invalid(f"prompt_tokens_details is not an object: {details!r}")
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
    details = raw.get("input_tokens_details")
    if details is None:
        details = {}
    elif not isinstance(details, Mapping):
        raise _Invalid(f"input_tokens_details is not an object: {details!r}")
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
        return UsageOutcome(None, "missing", "no usage object")
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
# Prices and cost


class PriceError(ValueError):
    """A price table entry is malformed: an operator configuration error, not an unknown."""


def _price_value(entry: Mapping[str, Any], key: str, *, required: bool) -> Decimal | None:
    value = entry.get(key)
    if value is None:
        if required:
            raise PriceError(f"price {key!r} is missing")
        return None
    if isinstance(value, bool):
        raise PriceError(f"price {key!r} is not a number: {value!r}")
    if isinstance(value, float):
        # JSON numbers arrive as floats unless parsed with parse_float=Decimal. str() gives the
        # shortest repr, which is the literal the operator wrote (0.15 → "0.15"), so no binary
        # noise reaches the money arithmetic.
        value = str(value)
    if not isinstance(value, (int, str, Decimal)):
        raise PriceError(f"price {key!r} is not a number: {value!r}")
    try:
        price = Decimal(value)
    except InvalidOperation as exc:
        raise PriceError(f"price {key!r} is not a number: {value!r}") from exc
    if not price.is_finite() or price < 0:
        raise PriceError(f"price {key!r} must be a finite number >= 0: {value!r}")
    return price


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M tokens for each bucket. ``cached_input``/``cache_write`` may be None (not
    priced): a call that used such a bucket then has unknown cost."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> Price:
        if not isinstance(entry, Mapping):
            raise PriceError(f"price entry is not an object: {entry!r}")
        input_price = _price_value(entry, "input", required=True)
        output_price = _price_value(entry, "output", required=True)
        assert input_price is not None and output_price is not None
        return cls(
            input=input_price,
            output=output_price,
            cached_input=_price_value(entry, "cached_input", required=False),
            cache_write=_price_value(entry, "cache_write", required=False),
        )


def price_for_model(
    price_table: Mapping[str, Mapping[str, Any]], served_model: str | None
) -> Price | None:
    """The price of the model the *response* says served the call.

    The lookup is by exact key: case-sensitive, no prefix stripping (``openai/gpt-x`` is not
    ``gpt-x``), no fallback to the requested or virtual model name. A near-miss stays unpriced
    (unknown cost) instead of silently borrowing another model's price. A malformed entry raises
    :class:`PriceError`.
    """
    if not served_model:
        return None
    entry = price_table.get(served_model)
    if entry is None:
        return None
    return Price.from_mapping(entry)


def call_cost(buckets: UsageBuckets | None, price: Price | None) -> Decimal | None:
    """Σ bucket × price / 1e6 in exact Decimal; None when usage or price is unknown, or a
    non-empty cache bucket has no price."""
    if buckets is None or price is None:
        return None
    rates: list[tuple[int, Decimal | None]] = [
        (buckets.input, price.input),
        (buckets.cached_input, price.cached_input),
        (buckets.cache_write, price.cache_write),
        (buckets.output, price.output),
    ]
    with localcontext() as ctx:
        ctx.prec = _EXACT_PRECISION
        total = Decimal(0)
        for tokens, rate in rates:
            if tokens == 0:
                continue  # an unpriced bucket that was not used costs nothing
            if rate is None:
                return None
            total += tokens * rate
        return total / TOKENS_PER_PRICE_UNIT


def cache_neutral_cost(buckets: UsageBuckets | None, price: Price | None) -> Decimal | None:
    """Counterfactual cost with every input token at the ordinary input price (R3.1): neither a
    bill nor a measured cache-free run, but comparable across runs that warmed caches."""
    if buckets is None or price is None:
        return None
    with localcontext() as ctx:
        ctx.prec = _EXACT_PRECISION
        return (
            buckets.prompt_total * price.input + buckets.output * price.output
        ) / TOKENS_PER_PRICE_UNIT


class CostOutcome(NamedTuple):
    cost: Decimal | None
    reason: str


def priced_call_cost(
    raw_usage: object, served_model: str | None, price_table: Mapping[str, Mapping[str, Any]]
) -> CostOutcome:
    """Cost of a single-model call from its stream usage and served model."""
    outcome = usage_buckets_explained(raw_usage)
    if outcome.buckets is None:
        return CostOutcome(None, f"usage {outcome.problem}: {outcome.reason}")
    price = price_for_model(price_table, served_model)
    if price is None:
        return CostOutcome(None, f"no price for served model {served_model!r}")
    cost = call_cost(outcome.buckets, price)
    if cost is None:
        return CostOutcome(None, f"a used cache bucket has no price for {served_model!r}")
    return CostOutcome(cost, f"priced as {served_model}")


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


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that also works on a plain dict."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, candidate in headers.items():
        if key.lower() == name:
            return candidate
    return None


def _call_count(headers: Mapping[str, str]) -> int | None | Literal["invalid"]:
    value = _header(headers, HEADER_CALL_COUNT)
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit():
        return "invalid"
    return int(text)


def mom_call_cost(
    headers: Mapping[str, str],
    stream_usage: object,
    price_table: Mapping[str, Mapping[str, Any]],
) -> CostOutcome:
    """Cost of one call to a MoM router, known only from explicit evidence (R2.5); see
    :func:`_mom_priced` for which evidence counts."""
    return _mom_priced(headers, stream_usage, price_table, call_cost)


def mom_cache_neutral_cost(
    headers: Mapping[str, str],
    stream_usage: object,
    price_table: Mapping[str, Mapping[str, Any]],
) -> CostOutcome:
    """Cache-neutral cost of one call to a MoM router (R3.2): the single-model rule
    (:func:`cache_neutral_cost`) applied to each receipt entry at its own served model's
    price, summed; from exactly the evidence that may price the call (:func:`_mom_priced`), so
    it is unknown only when an entry is missing, has unusable usage or its model is unpriced."""
    return _mom_priced(headers, stream_usage, price_table, cache_neutral_cost)


def _mom_priced(
    headers: Mapping[str, str],
    stream_usage: object,
    price_table: Mapping[str, Mapping[str, Any]],
    price_call: Callable[[UsageBuckets | None, Price | None], Decimal | None],
) -> CostOutcome:
    """An amount of one MoM call, ``price_call`` applied per inference call the router made,
    known only from explicit evidence (R2.5).

    1. A ``x-vsr-model-usage`` receipt, if present, is the only source: it must parse, say
       ``complete: true``, agree with ``x-vsr-inference-call-count`` when that is sent, and
       every child must have valid usage and a price for its own model.
    2. Without a receipt, a proven direct call — ``x-vsr-inference-call-count: 1`` and an
       ``x-vsr-selected-model`` — prices the stream usage at the selected model's rate.
    3. Otherwise unknown. The final stream's usage is never split across, or multiplied by,
       several internal calls.
    """
    receipt_header = _header(headers, HEADER_MODEL_USAGE)
    count = _call_count(headers)
    if count == "invalid":
        return CostOutcome(None, f"{HEADER_CALL_COUNT} is not a non-negative integer")
    if receipt_header is not None:
        parsed = parse_model_usage_receipt_explained(receipt_header)
        receipt = parsed.receipt
        if receipt is None:
            return CostOutcome(None, f"unusable usage receipt: {parsed.reason}")
        if not receipt.complete:
            return CostOutcome(None, "usage receipt is marked incomplete")
        if count is not None and count != len(receipt.calls):
            return CostOutcome(
                None,
                f"{HEADER_CALL_COUNT} says {count} but the receipt lists {len(receipt.calls)}",
            )
        with localcontext() as ctx:
            ctx.prec = _EXACT_PRECISION
            total = Decimal(0)
            for position, call in enumerate(receipt.calls):
                if call.buckets is None:
                    return CostOutcome(
                        None, f"receipt call {position} has unusable usage: {call.usage_reason}"
                    )
                cost = price_call(call.buckets, price_for_model(price_table, call.model))
                if cost is None:
                    return CostOutcome(
                        None, f"receipt call {position} model {call.model!r} is not priced"
                    )
                total += cost
        return CostOutcome(total, f"complete receipt of {len(receipt.calls)} call(s)")
    if count != 1:
        if count is None:
            return CostOutcome(None, "no usage receipt and no inference call count")
        return CostOutcome(None, f"no usage receipt for {count} inference calls")
    selected = _header(headers, HEADER_SELECTED_MODEL)
    if not selected or not selected.strip():
        return CostOutcome(None, f"direct call without {HEADER_SELECTED_MODEL}")
    model = selected.strip()
    outcome = usage_buckets_explained(stream_usage)
    if outcome.buckets is None:
        return CostOutcome(None, f"usage {outcome.problem}: {outcome.reason}")
    price = price_for_model(price_table, model)
    if price is None:
        return CostOutcome(None, f"no price for served model {model!r}")
    cost = price_call(outcome.buckets, price)
    if cost is None:
        return CostOutcome(None, f"a used cache bucket has no price for {model!r}")
    return CostOutcome(cost, f"proven direct call to {model}")


# --------------------------------------------------------------------------------------------
# Sums of possibly unknown amounts


class KnownSum(NamedTuple):
    """``total`` is the sum only if every value is known; ``known_sum`` adds the known ones
    (the report's ``known_cost_usd``); ``complete`` says whether ``total`` is set."""

    total: Decimal | None
    known_sum: Decimal
    complete: bool


def sum_known(values: Iterable[Decimal | None]) -> KnownSum:
    """Sum money where any unknown makes the total unknown. An empty input sums to a known 0
    (nothing was spent); callers that need "nothing planned" to be unknown check that first."""
    with localcontext() as ctx:
        ctx.prec = _EXACT_PRECISION
        known = Decimal(0)
        complete = True
        for value in values:
            if value is None:
                complete = False
            else:
                known += value
    return KnownSum(known if complete else None, known, complete)


def mom_call_buckets(headers: Mapping[str, str], stream_usage: object) -> UsageBuckets | None:
    """The token buckets of a MoM call, from the same evidence that may price it: the sum of a
    complete receipt's children, or the stream usage of a proven direct call; else unknown."""
    receipt_header = _header(headers, HEADER_MODEL_USAGE)
    if receipt_header is not None:
        receipt = parse_model_usage_receipt(receipt_header)
        if receipt is None or not receipt.complete:
            return None
        children = [c.buckets for c in receipt.calls]
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
        )
    if _call_count(headers) == 1 and (_header(headers, HEADER_SELECTED_MODEL) or "").strip():
        return usage_buckets(stream_usage)
    return None


# --------------------------------------------------------------------------------------------
# One call: what the engine records and what reconcile recomputes from evidence


class CallAccounting(NamedTuple):
    """The usage and money of one finished call. ``buckets`` None means unknown usage, and then
    ``cost`` and ``cache_neutral`` are None too (a cost without usage cannot be audited)."""

    buckets: UsageBuckets | None
    cost: Decimal | None
    cache_neutral: Decimal | None
    note: str


def call_accounting(
    *,
    kind: str,
    usage: object,
    served_model: str | None,
    headers: Mapping[str, str],
    price_table: Mapping[str, Mapping[str, Any]],
) -> CallAccounting:
    """Buckets, cost and cache-neutral cost of one call of a finished stream: the one
    composition that both the engine (at close) and ``reconcile-usage`` (from saved evidence)
    apply. ``kind`` is the target's kind (``single`` or ``mom``); ``headers`` are the response
    headers with lower-cased names (only MoM reads them). A MoM call is bucketed, priced and
    cache-neutrally priced only from a complete receipt (each entry at its own served model's
    price) or a proven direct call. When the cost is known but the cache-neutral cost is not,
    the note says why. Raises :class:`PriceError` for a malformed price entry."""
    if kind == "mom":
        buckets = mom_call_buckets(headers, usage)
        cost, note = mom_call_cost(headers, usage, price_table)
        neutral, neutral_note = mom_cache_neutral_cost(headers, usage, price_table)
        if neutral is None and cost is not None:
            note = f"{note}; cache-neutral cost unknown: {neutral_note}"
    else:
        buckets = usage_buckets(usage)
        cost, note = priced_call_cost(usage, served_model or None, price_table)
        neutral = cache_neutral_cost(buckets, price_for_model(price_table, served_model))
    if buckets is None:
        if cost is not None:
            note = "usage unknown"
        cost, neutral = None, None
    return CallAccounting(buckets, cost, neutral, note)
