"""The accounting contract (DESIGN §5): prices, call cost, MoM call cost, the worst case.

This module is the one place for these rules; reports, comparisons, exports, the API and the
reconcile command all import from here. What was *used* (token buckets, MoM receipts, which
evidence may price a MoM call) is counted in :mod:`runs.ledger.usage`; import those names from
there. Unknown is ``None`` throughout and never becomes 0; money is ``Decimal`` and is never
rounded here (display code quantises).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, NamedTuple

from runs.ledger.usage import (
    NO_USAGE_OBJECT,
    UsageBuckets,
    header_count,
    mom_call_buckets,
    mom_evidence,
    usage_buckets,
    usage_buckets_explained,
)
from runs.models import CallStatus
from srbench.money import price_places_error

__all__ = [
    "CALL_USAGE_COLUMNS",
    "CostOutcome",
    "ERRORS_NOT_BILLED_TEXT",
    "HTTP_ERROR_BODY_CAP",
    "KnownFailure",
    "NO_CALL_SENT_NOTE",
    "KnownSum",
    "NO_STREAM_USAGE_NOTE",
    "NO_STREAM_USAGE_REMEDY",
    "Price",
    "PriceError",
    "CallAccounting",
    "cache_neutral_cost",
    "call_accounting",
    "errors_billed_by_target",
    "errors_not_billed_reason",
    "errors_not_billed_words",
    "http_error_before_stream",
    "known_failure_unbilled",
    "call_cost",
    "GATEWAY_ANSWERED_HEADER",
    "GATEWAY_ESTIMATE_NOTE",
    "GATEWAY_RESENT_START",
    "STREAM_USAGE_CHECKED_KEY",
    "STREAM_USAGE_ESTIMATE_KEY",
    "gateway_estimate_reason",
    "gateway_resent_count",
    "gateway_unchecked_caution",
    "gateway_resent_note",
    "gateway_resent_reason",
    "with_gateway_resent",
    "mom_cache_neutral_cost",
    "mom_call_cost",
    "no_stream_usage_reason",
    "unpriced_calls_reason",
    "price_for_model",
    "priced_call_cost",
    "sum_known",
    "worst_case_call_cost",
]

TOKENS_PER_PRICE_UNIT = Decimal(1_000_000)

# Token counts (≤ 1e12) times prices with a handful of decimals need far fewer digits than
# this; a generous precision keeps every product and sum exact, so no cost is ever rounded.
_EXACT_PRECISION = 60

# Room for the request envelope around the messages when bounding input tokens by bytes.
_REQUEST_OVERHEAD_BYTES = 64

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
    # Beyond the ledger's scale a cost could only be stored rounded (issue 35 item 5).
    if (too_precise := price_places_error(price)) is not None:
        raise PriceError(f"price {key!r}: {too_precise}")
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


# A single-model call's cost note when its finished stream carried no usage object (the words
# `priced_call_cost` writes); the report counts such calls to say why a cost is unknown.
NO_STREAM_USAGE_NOTE = f"usage missing: {NO_USAGE_OBJECT}"


# A call for which no connection to the target could be made (refused, unreachable, or timed
# out while connecting): not a byte of its request left this machine, so it used no token and
# cost nothing — a known zero, not an unknown. The engine closes it so (runs/engine/calls.py)
# and reconcile-usage verifies it so (runs/reporting/reconcile.py).
NOT_SENT_ERROR = "connect_error"
NOT_SENT_NOTE = "not sent: no connection was made, so nothing reached the model (cost 0)"
NOT_SENT_USAGE: dict[str, Any] = {
    "input_tokens": 0,
    "cached_input_tokens": 0,
    "cache_write_tokens": 0,
    "output_tokens": 0,
    "reasoning_tokens": 0,
    "cached_reported": True,
    "cache_write_reported": True,
    "cost_usd": Decimal(0),
    "cache_neutral_cost_usd": Decimal(0),
    "cost_note": NOT_SENT_NOTE,
}


# A known failure: the server answered with a complete HTTP 4xx/5xx response before any stream
# byte (error_code ``http_<status>``, the error body read to its end, at most this many bytes:
# the engine stops reading there, runs/engine/calls.py). It has no usage, so its ledger cost is
# null. Whether it cost anything is the target's terms, frozen into the run's plan from its
# registry entry (`Target.errors_billed`, migration runs/0005): when they say error responses
# are not billed, its effective cost is a known 0 — on every surface (report, live results,
# comparisons, exports, recovery), by `known_failure_unbilled` alone, applied where the
# effective costs are read (runs.reporting.effective `known_failures`), and always with the
# assumption said beside the figure (`ERRORS_NOT_BILLED_TEXT`). Its tokens stay unknown: the
# terms say what is billed, not what the server used. Anything else unknown stays unknown: a
# target that bills errors or whose plan predates the field, a body cut at the cap, a router
# that reports internal inference calls, a timeout or a cut stream after the request left.
HTTP_ERROR_BODY_CAP = 65536
ERRORS_NOT_BILLED_TEXT = "assumes {target} does not bill error responses (errors_billed = false)"


class KnownFailure(NamedTuple):
    """The ledger's columns of one failed call that the rule reads."""

    status: str
    http_status: int | None
    error_code: str
    bytes_received: int
    inference_call_count: int | None


def http_error_before_stream(call: KnownFailure) -> bool:
    """A known failure: a complete HTTP 4xx/5xx answer before any stream byte. The engine
    records such a call ``failed`` with error_code ``http_<status>``, and only when the error
    body was read to its end (a body cut off at the cap, a disconnect or a timeout while reading
    it gets another code or more bytes). A router that reports internal inference calls in its
    error response did work that may be billed."""
    status = call.http_status
    return (
        call.status == CallStatus.FAILED
        and status is not None
        and 400 <= status <= 599
        and call.error_code == f"http_{status}"
        and call.bytes_received <= HTTP_ERROR_BODY_CAP
        and not call.inference_call_count
    )


def known_failure_unbilled(call: KnownFailure, errors_billed: bool | None) -> bool:
    """The one rule of a failed call's cost without usage: a known failure at a target whose
    frozen ``errors_billed`` is false cost a known 0. ``errors_billed`` None (a plan frozen
    before the field existed) counts as billing: the cost stays unknown."""
    return errors_billed is False and http_error_before_stream(call)


def errors_billed_by_target(manifest: Mapping[str, Any]) -> dict[str, bool | None]:
    """Whether each target of a run (subject, judge, user simulator) bills error responses, as
    frozen in the run's plan (None: the plan predates the field)."""
    snapshots = [
        *manifest.get("targets", []),
        *(manifest.get("judges") or {}).values(),
        *(manifest.get("simulators") or {}).values(),
    ]
    return {s["slug"]: s.get("errors_billed") for s in snapshots}


def errors_not_billed_words(targets: Iterable[str]) -> str | None:
    """The billing assumption behind a zero counted for these targets' error responses, in
    words (None: no zero was assumed)."""
    names = sorted(set(targets))
    if not names:
        return None
    return "; ".join(ERRORS_NOT_BILLED_TEXT.format(target=t) for t in names)


def errors_not_billed_reason(
    calls: int, role_calls: int | None, role: str, targets: Iterable[str]
) -> str | None:
    """Why a target's calls of ``role`` that failed with an HTTP error before any stream byte
    count as $0 and leave its tokens unknown (None when there is no such call): said once per
    target and role, by the report, beside the figures that count them."""
    if not calls:
        return None
    return (
        f"{calls} of {role_calls or calls} {role} calls failed with an HTTP error before any "
        f"stream byte and are counted as $0 ({errors_not_billed_words(targets)}); "
        "their tokens are unknown"
    )


# A target that no call was sent to in a run (none dispatched: a budget that admitted none of
# its worst cases, a run stopped first): nothing left this machine for it, so its known cost is
# a known $0, never unknown. Its cost over the planned cells stays unknown (nothing answered).
NO_CALL_SENT_NOTE = (
    "no call was sent to this target, so nothing was spent on it: its known cost is $0; "
    "its tokens and its cost over the planned cells are unknown (nothing was answered)"
)


# A gateway that re-sends a request on its own (LiteLLM's proxy retries a failed upstream call
# twice by default, on a timeout too, then tries its fallbacks, even mid-stream) answers once;
# only these response headers say that its upstream was asked more than once. The engine keeps
# them in the call's headers. An earlier attempt may have been billed (a timed-out or cut
# stream was computed upstream), and nothing says what it used: the answer's cost is a lower
# bound of the call's, so a report sums such calls as known at least, never as complete.
GATEWAY_RESEND_HEADERS = ("x-litellm-attempted-retries", "x-litellm-attempted-fallbacks")
GATEWAY_RESENT_START = "the gateway re-sent this request"


def gateway_resent_count(headers: Mapping[str, str]) -> int:
    """How many times the gateway says it re-sent the request upstream (0 when it does not
    say so); ``headers`` with lower-cased names."""
    return sum(header_count(headers.get(name, "")) or 0 for name in GATEWAY_RESEND_HEADERS)


def gateway_resent_note(headers: Mapping[str, str]) -> str:
    """Words for a call's cost note when the gateway in front of the model says it sent the
    request upstream more than once ("" when it does not say so). The usage, and so the cost,
    is that of the answer that came back; what the earlier attempts used is not reported."""
    resent = gateway_resent_count(headers)
    if not resent:
        return ""
    return (
        f"{GATEWAY_RESENT_START} {resent} time(s) upstream: cost is of the last "
        "attempt only, what earlier attempts cost is unknown"
    )


def with_gateway_resent(note: str, headers: Mapping[str, str]) -> str:
    """A call's cost note, led by the gateway's re-sends when it says it re-sent the request:
    the engine's note at close and reconcile-usage's for the same call read the same."""
    resent = gateway_resent_note(headers)
    return f"{resent}; {note}" if resent else note


def gateway_resent_reason(calls: int, role_calls: int | None, role: str) -> str | None:
    """Why a target's cost in ``role`` is a lower bound (None when no call was re-sent): said
    once per target, by the report, beside the known sum."""
    if not calls:
        return None
    return (
        f"the gateway re-sent {calls} of {role_calls or calls} {role} calls upstream: each "
        "is priced by the answer that came back, what the earlier attempts cost is unknown, so "
        "the cost is at least the known sum, not complete"
    )


# A stream's usage that the target check showed to be a gateway's own count, not the server's
# (runs.preflight.findings.stream_usage_disagreement: LiteLLM before llama.cpp streams 9 prompt
# tokens where the server counts 32), frozen into the plan's target snapshot as
# STREAM_USAGE_ESTIMATE_KEY. Such usage is shaped like a receipt and is not one: a cost priced
# from it would be wrong, shown as known; its tokens and cost are unknown instead.
STREAM_USAGE_ESTIMATE_KEY = "stream_usage_estimate"
# (With the longest re-sent words before it, the note still fits the 200-character column.)
GATEWAY_ESTIMATE_NOTE = "usage is a gateway's estimate, not the server's: tokens, cost unknown"


# What a run can tell without the target check: that a LiteLLM proxy answered (it sends this
# header with every answer, kept by the engine), not whether a stream's usage is its estimate
# (its headers and the usage chunk's fields are the same either way, measured on 1.110.2). A
# plan that froze a check of the target's stream usage names it (STREAM_USAGE_CHECKED_KEY).
GATEWAY_ANSWERED_HEADER = "x-litellm-version"
STREAM_USAGE_CHECKED_KEY = "stream_usage_checked"


def gateway_unchecked_caution(calls: int, subject_calls: int | None) -> str | None:
    """Why a target's known tokens and cost may be a gateway's estimate (None when no call was
    answered by a gateway): its calls came through LiteLLM and the plan froze no target check
    of its stream usage. Said once per target by the report; the costs stay as recorded."""
    if not calls:
        return None
    return (
        f"{calls} of {subject_calls or calls} subject calls were answered through a LiteLLM "
        "gateway and the plan froze no target check of it: when the server behind it sends no "
        "usage in a stream, the gateway streams its own token estimate, which a run cannot "
        "tell from the server's count (LiteLLM before llama.cpp: 14 prompt tokens where the "
        "server counts 37), so these tokens and costs may be wrong; check the target "
        "(benchmark targets check) before trusting them"
    )


def gateway_estimate_reason(calls: int, subject_calls: int | None, why: str) -> str | None:
    """Why a target's tokens and cost are unknown when its streams' usage is a gateway's own
    estimate (None when no call of it was so); ``why`` is what the plan's snapshot froze."""
    if not calls:
        return None
    return (
        f"{calls} of {subject_calls or calls} subject calls carried usage that is not the "
        f"server's own count ({why}): their tokens and cost are unknown; point the target at "
        "the server itself, or at a gateway that passes the server's usage through"
    )


# What evidence would make such a call's usage known (the reconcile path says it per call).
NO_STREAM_USAGE_REMEDY = (
    "the saved stream holds no usage; only a server that sends usage with "
    "stream_options.include_usage, or a router's usage receipt, would make it known"
)


def no_stream_usage_reason(calls: int, subject_calls: int | None) -> str | None:
    """Why a target's tokens and cost are unknown when its server sent no usage while
    streaming (issue 39), and what evidence would make them known; None when no call of it
    ended that way. Said once per target, by the report."""
    if not calls:
        return None
    subject_calls = subject_calls or calls
    return (
        f"this server reports no usage when streaming: {calls} of {subject_calls} subject calls "
        "carried no usage object, so their tokens and cost are unknown; reconcile-usage cannot "
        "recover them (the saved streams hold no usage) — a server that sends usage with "
        "stream_options.include_usage, or a router's usage receipt, would make them known"
    )


def unpriced_calls_reason(calls: int, role_calls: int | None, role: str = "subject") -> str | None:
    """Why a target's cost is unknown when some of its calls of ``role`` have no known cost for
    a reason the report does not name otherwise (for subject calls: not a stream without usage
    nor a gateway's estimate, said by `no_stream_usage_reason`, `gateway_estimate_reason`): a
    router's missing or unusable receipt, a served model without a price, a failed call whose
    usage never came; for a judge's or a user simulator's calls, any reason, a stream without
    usage too. Each call's cost note names its own reason; None when there is no such call."""
    if calls <= 0:
        return None
    role_calls = role_calls or calls
    if role != "subject":
        return (
            f"{calls} of {role_calls} {role} calls have no known cost (a stream without usage, "
            "a failed call, or a served model without a price; each call's cost note names it), "
            "so the evaluation cost and the total spend are unknown, never counted as $0"
        )
    return (
        f"{calls} of {role_calls} subject calls have no known cost (a failed call, a "
        "router's missing or unusable usage receipt, or a served model without a price; each "
        "call's cost note names it), so the cost is unknown, never counted as $0"
    )


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
    known only from the evidence :func:`runs.ledger.usage.mom_evidence` accepts (R2.5): a complete
    receipt, whose every child must have valid usage and a price for its own model, or a proven
    direct call, whose stream usage is priced at the selected model's rate. Otherwise unknown.
    """
    evidence = mom_evidence(headers)
    if evidence.receipt is not None:
        with localcontext() as ctx:
            ctx.prec = _EXACT_PRECISION
            total = Decimal(0)
            for position, call in enumerate(evidence.receipt.calls):
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
        return CostOutcome(total, evidence.reason)
    model = evidence.direct_model
    if model is None:
        return CostOutcome(None, evidence.reason)
    outcome = usage_buckets_explained(stream_usage)
    if outcome.buckets is None:
        return CostOutcome(None, f"usage {outcome.problem}: {outcome.reason}")
    price = price_for_model(price_table, model)
    if price is None:
        return CostOutcome(None, f"no price for served model {model!r}")
    cost = price_call(outcome.buckets, price)
    if cost is None:
        return CostOutcome(None, f"a used cache bucket has no price for {model!r}")
    return CostOutcome(cost, evidence.reason)


# --------------------------------------------------------------------------------------------
# The worst case of a call, before it is sent


def sent_max_tokens(fixed_params: Mapping[str, Any], limits: Mapping[str, Any]) -> int:
    """The ``max_tokens`` a call to a target is sent with: the target's fixed parameter (R8.6),
    else the run's ``max_output_tokens`` (the engine's request body, ``Caller.request_body``)."""
    return int(fixed_params.get("max_tokens") or limits["max_output_tokens"])


def worst_case_call_cost(
    price_table: Mapping[str, Mapping[str, Any]],
    *,
    kind: str,
    model: str,
    messages: Sequence[Any],
    max_tokens: int,
    max_inference_calls: int | None,
) -> Decimal | None:
    """An upper bound on what one request to a target can cost; the engine reserves it against
    the budget and the plan review sums it over the cases (R5).

    Every request byte counts as an input token (a byte-level tokenizer never makes more tokens
    than bytes), plus room for the envelope; ``max_tokens`` of output; at the dearest model the
    target may serve (its own model when ``single``, every priced model of a router); times a
    router's internal call cap. Exact, never rounded: rounding could state a bound below the
    worst case it promises. None when the target has no price for a model it may serve."""
    models = [model] if kind == "single" else list(price_table)
    prices = [price_for_model(price_table, m) for m in models]
    if not prices or any(p is None for p in prices):
        return None
    input_upper = len(json.dumps(messages).encode()) + _REQUEST_OVERHEAD_BYTES
    with localcontext() as ctx:
        ctx.prec = _EXACT_PRECISION
        worst = max(
            (p.input * input_upper + p.output * max_tokens) / TOKENS_PER_PRICE_UNIT
            for p in prices
            if p is not None
        )
        return worst * (max_inference_calls or 1)


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


# --------------------------------------------------------------------------------------------
# One call: what the engine records and what reconcile recomputes from evidence


class CallAccounting(NamedTuple):
    """The usage and money of one finished call. ``buckets`` None means unknown usage, and then
    ``cost`` and ``cache_neutral`` are None too (a cost without usage cannot be audited)."""

    buckets: UsageBuckets | None
    cost: Decimal | None
    cache_neutral: Decimal | None
    note: str


# The columns of a call its accounting fills: the four buckets and reasoning, whether the
# cache counts were reported, its cost and cache-neutral cost, and the note saying why.
CALL_USAGE_COLUMNS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_reported",
    "cache_write_reported",
    "cost_usd",
    "cache_neutral_cost_usd",
    "cost_note",
)


def call_accounting(
    *,
    kind: str,
    usage: object,
    served_model: str | None,
    headers: Mapping[str, str],
    price_table: Mapping[str, Mapping[str, Any]],
    usage_estimated: bool = False,
) -> CallAccounting:
    """Buckets, cost and cache-neutral cost of one call of a finished stream: the one
    composition that both the engine (at close) and ``reconcile-usage`` (from saved evidence)
    apply. ``kind`` is the target's kind (``single`` or ``mom``); ``headers`` are the response
    headers with lower-cased names (a MoM call's receipts, a gateway's re-sends). A MoM call is
    bucketed, priced and cache-neutrally priced only from a complete receipt (each entry at its
    own served model's price) or a proven direct call. ``usage_estimated``: the plan froze that
    the target's stream usage is a gateway's estimate (:data:`STREAM_USAGE_ESTIMATE_KEY`), so a
    call priced from its stream's usage has unknown tokens and cost (a router's receipt is not
    the stream's usage and still prices). When the cost is known but the cache-neutral cost is
    not, the note says why; a gateway's re-sends lead the note. Raises :class:`PriceError` for
    a malformed price entry."""
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
    elif usage_estimated and (kind != "mom" or mom_evidence(headers).receipt is None):
        buckets, cost, neutral, note = None, None, None, GATEWAY_ESTIMATE_NOTE
    return CallAccounting(buckets, cost, neutral, with_gateway_resent(note, headers))
