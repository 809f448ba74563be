"""The accounting contract: usage buckets, prices, call cost, MoM receipts. Every cost below is
worked out by hand in the test, not by the code under test."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from runs.ledger.accounting import (
    Price,
    PriceError,
    cache_neutral_cost,
    call_cost,
    mom_call_cost,
    price_for_model,
    priced_call_cost,
    sum_known,
)
from runs.ledger.usage import (
    UsageBuckets,
    parse_model_usage_receipt,
    parse_model_usage_receipt_explained,
    usage_buckets,
    usage_buckets_explained,
)

PRICES: dict[str, dict[str, Any]] = {
    "gpt-big": {"input": "2.50", "cached_input": "1.25", "cache_write": "3.75", "output": "10"},
    "claude-x": {"input": "3", "cached_input": "0.30", "cache_write": "3.75", "output": "15"},
    "small-a": {"input": "1", "cached_input": "0.5", "output": "2"},
    "small-b": {"input": 3, "output": 6},
}


def buckets(
    input: int,
    cached: int = 0,
    write: int = 0,
    output: int = 0,
    *,
    cached_reported: bool = False,
    write_reported: bool = False,
    shape: str = "openai",
    reasoning: int | None = None,
) -> UsageBuckets:
    return UsageBuckets(
        input=input,
        cached_input=cached,
        cache_write=write,
        output=output,
        cached_reported=cached_reported,
        cache_write_reported=write_reported,
        shape=shape,  # type: ignore[arg-type]
        reasoning=reasoning,
    )


# --- usage buckets ---------------------------------------------------------------------------

VALID_USAGES = [
    pytest.param(
        {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
        buckets(1000, 0, 0, 500),
        id="openai-plain",
    ),
    pytest.param(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 500,
            "prompt_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 100},
            "completion_tokens_details": {"reasoning_tokens": 400},
        },
        # The reasoning part is kept as its own count; output stays the billed 500.
        buckets(700, 200, 100, 500, cached_reported=True, write_reported=True, reasoning=400),
        id="openai-cache-read-and-write",
    ),
    pytest.param(
        {
            "prompt_tokens": 10,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        buckets(10, 0, 0, 1, cached_reported=True),
        id="openai-explicit-zero-cache-is-reported",
    ),
    pytest.param(
        {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": None},
        buckets(10, 0, 0, 1),
        id="openai-null-details",
    ),
    pytest.param(
        {"prompt_tokens": 90, "completion_tokens": 9, "cache_creation_input_tokens": 30},
        buckets(60, 0, 30, 9, write_reported=True),
        id="openai-shape-with-anthropic-write-name",
    ),
    pytest.param(
        {"prompt_tokens": 90, "completion_tokens": 9, "cache_write_tokens": 30},
        buckets(60, 0, 30, 9, write_reported=True),
        id="openai-top-level-cache-write",
    ),
    pytest.param(
        {
            "prompt_tokens": 100,
            "cached_input_tokens": 40,
            "cache_write_tokens": 0,
            "completion_tokens": 10,
        },
        buckets(60, 40, 0, 10, cached_reported=True, write_reported=True),
        id="mom-receipt-child-shape",
    ),
    pytest.param(
        {
            "prompt_tokens": 100,
            "completion_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 100},
        },
        buckets(0, 100, 0, 0, cached_reported=True),
        id="openai-all-cached-no-output",
    ),
    pytest.param(
        {
            "input_tokens": 300,
            "cache_read_input_tokens": 1200,
            "cache_creation_input_tokens": 50,
            "output_tokens": 80,
        },
        buckets(300, 1200, 50, 80, cached_reported=True, write_reported=True, shape="anthropic"),
        id="anthropic-input-excludes-cache",
    ),
    pytest.param(
        {"input_tokens": 5, "output_tokens": 7},
        buckets(5, 0, 0, 7, shape="anthropic"),
        id="anthropic-no-cache-fields",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), VALID_USAGES)
def test_usage_is_split_into_four_exclusive_buckets(
    raw: dict[str, Any], expected: UsageBuckets
) -> None:
    assert usage_buckets(raw) == expected


INVALID_USAGES = [
    pytest.param({"prompt_tokens": -1, "completion_tokens": 5}, id="negative-prompt"),
    pytest.param({"prompt_tokens": 10, "completion_tokens": -5}, id="negative-output"),
    pytest.param({"prompt_tokens": True, "completion_tokens": 5}, id="bool-prompt"),
    pytest.param({"prompt_tokens": 10, "completion_tokens": False}, id="bool-output"),
    pytest.param({"prompt_tokens": 10.0, "completion_tokens": 5}, id="float-prompt"),
    pytest.param({"prompt_tokens": "10", "completion_tokens": 5}, id="string-prompt"),
    pytest.param(
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 11},
        },
        id="cached-exceeds-prompt",
    ),
    pytest.param(
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 6, "cache_write_tokens": 5},
        },
        id="cached-plus-written-exceeds-prompt",
    ),
    pytest.param(
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": True},
        },
        id="bool-cached",
    ),
    pytest.param(
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cache_write_tokens": 2},
            "cache_creation_input_tokens": 3,
        },
        id="disagreeing-cache-write-aliases",
    ),
    pytest.param(
        {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": [1]},
        id="details-not-an-object",
    ),
    pytest.param({"input_tokens": 10, "output_tokens": -1}, id="anthropic-negative-output"),
    pytest.param(
        {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": -2},
        id="anthropic-negative-cache-read",
    ),
    pytest.param(
        {"prompt_tokens": 10, "completion_tokens": 5, "input_tokens": 10, "output_tokens": 5},
        id="mixed-shapes",
    ),
    pytest.param(
        {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 11}},
        id="responses-api-cached-exceeds-input",
    ),
    pytest.param(
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 4},
            "cache_read_input_tokens": 4,
        },
        id="responses-api-mixed-with-anthropic-cache",
    ),
    pytest.param([1, 2], id="not-an-object"),
    # Past what the ledger's bigint columns hold: writing it failed the call's close.
    pytest.param({"prompt_tokens": 2**63, "completion_tokens": 5}, id="prompt-past-bigint"),
    pytest.param(
        {"prompt_tokens": 1, "completion_tokens": 10**30, "total_tokens": 10**30 + 1},
        id="output-past-bigint",
    ),
]


def test_the_largest_count_the_ledger_holds_is_a_count() -> None:
    outcome = usage_buckets_explained({"prompt_tokens": 2**63 - 1, "completion_tokens": 0})
    assert outcome.buckets is not None and outcome.buckets.input == 2**63 - 1


@pytest.mark.parametrize("raw", INVALID_USAGES)
def test_impossible_usage_is_invalid_and_unknown(raw: Any) -> None:
    outcome = usage_buckets_explained(raw)
    assert outcome.buckets is None
    assert outcome.problem == "invalid", outcome.reason
    assert usage_buckets(raw) is None


MISSING_USAGES = [
    pytest.param(None, id="no-usage"),
    pytest.param({}, id="empty"),
    pytest.param({"total_tokens": 15}, id="only-total"),
    pytest.param({"completion_tokens": 5}, id="no-prompt"),
    pytest.param({"prompt_tokens": 10}, id="no-output"),
    pytest.param({"prompt_tokens": None, "completion_tokens": 5}, id="null-prompt"),
    pytest.param({"input_tokens": 10}, id="anthropic-no-output"),
    pytest.param({"output_tokens": 10, "cache_read_input_tokens": 3}, id="anthropic-no-input"),
]


@pytest.mark.parametrize("raw", MISSING_USAGES)
def test_missing_prompt_or_output_is_unknown_never_zero(raw: Any) -> None:
    outcome = usage_buckets_explained(raw)
    assert outcome.buckets is None
    assert outcome.problem == "missing", outcome.reason


def test_buckets_reject_bools_and_negatives_when_built_directly() -> None:
    with pytest.raises(ValueError):
        buckets(True)  # bool is an int subclass; must still be refused
    with pytest.raises(ValueError):
        buckets(1, output=-1)


# --- prices and cost --------------------------------------------------------------------------


def test_price_lookup_is_by_exact_served_model_key() -> None:
    price = price_for_model(PRICES, "gpt-big")
    assert price == Price(
        input=Decimal("2.50"),
        cached_input=Decimal("1.25"),
        cache_write=Decimal("3.75"),
        output=Decimal(10),
    )
    assert price_for_model(PRICES, "GPT-BIG") is None
    assert price_for_model(PRICES, "openai/gpt-big") is None
    assert price_for_model(PRICES, None) is None
    assert price_for_model(PRICES, "") is None


def test_unpriced_cache_buckets_are_none_not_zero() -> None:
    price = price_for_model(PRICES, "small-b")
    assert price is not None
    assert price.cached_input is None and price.cache_write is None


def test_float_prices_keep_the_written_decimal() -> None:
    price = Price.from_mapping({"input": 0.15, "output": 0.6})
    assert price.input == Decimal("0.15") and price.output == Decimal("0.6")


@pytest.mark.parametrize(
    "entry",
    [
        {"output": "1"},
        {"input": "1"},
        {"input": "-1", "output": "1"},
        {"input": "abc", "output": "1"},
        {"input": "NaN", "output": "1"},
        {"input": True, "output": "1"},
        {"input": "1", "output": "1", "cached_input": "-0.1"},
    ],
)
def test_malformed_price_entry_is_a_configuration_error(entry: dict[str, Any]) -> None:
    with pytest.raises(PriceError):
        Price.from_mapping(entry)


def test_openai_call_cost_matches_hand_computation() -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 500,
        "prompt_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 100},
    }
    # 700 × 2.50 + 200 × 1.25 + 100 × 3.75 + 500 × 10 = 1750 + 250 + 375 + 5000 = 7375 per 1M
    cost = call_cost(usage_buckets(usage), price_for_model(PRICES, "gpt-big"))
    assert cost == Decimal("0.007375")
    assert isinstance(cost, Decimal)
    # Cache-neutral: 1000 × 2.50 + 500 × 10 = 7500 per 1M
    neutral = cache_neutral_cost(usage_buckets(usage), price_for_model(PRICES, "gpt-big"))
    assert neutral == Decimal("0.0075")


def test_anthropic_call_cost_matches_hand_computation() -> None:
    usage = {
        "input_tokens": 300,
        "cache_read_input_tokens": 1200,
        "cache_creation_input_tokens": 50,
        "output_tokens": 80,
    }
    # 300 × 3 + 1200 × 0.30 + 50 × 3.75 + 80 × 15 = 900 + 360 + 187.5 + 1200 = 2647.5 per 1M
    price = price_for_model(PRICES, "claude-x")
    assert call_cost(usage_buckets(usage), price) == Decimal("0.0026475")
    # Cache-neutral: (300 + 1200 + 50) × 3 + 80 × 15 = 4650 + 1200 = 5850 per 1M
    assert cache_neutral_cost(usage_buckets(usage), price) == Decimal("0.00585")


def test_cost_is_exact_for_large_counts_and_small_prices() -> None:
    price = Price(input=Decimal("0.000001"), output=Decimal("0.000003"))
    cost = call_cost(buckets(999_999_999_999, output=123_456_789_012), price)
    # 999999.999999 + 370370.367036 = 1370370.367035 per 1M: more digits than a float holds.
    assert cost == Decimal("1.370370367035")


def test_cost_unknown_when_usage_or_price_unknown() -> None:
    price = price_for_model(PRICES, "gpt-big")
    assert call_cost(None, price) is None
    assert call_cost(buckets(10, output=1), None) is None
    assert cache_neutral_cost(None, price) is None
    assert cache_neutral_cost(buckets(10, output=1), None) is None


def test_used_cache_bucket_without_price_makes_cost_unknown() -> None:
    price = price_for_model(PRICES, "small-b")  # input 3, output 6, no cache prices
    assert call_cost(buckets(100, cached=1, output=10), price) is None
    assert call_cost(buckets(100, write=1, output=10), price) is None
    # Unused unpriced buckets cost nothing: 100 × 3 + 10 × 6 = 360 per 1M.
    assert call_cost(buckets(100, output=10), price) == Decimal("0.00036")
    # The cache-neutral cost needs only input and output prices: 101 × 3 + 10 × 6 = 363.
    assert cache_neutral_cost(buckets(100, cached=1, output=10), price) == Decimal("0.000363")


def test_zero_tokens_cost_a_known_zero() -> None:
    assert call_cost(buckets(0), price_for_model(PRICES, "small-b")) == Decimal(0)


def test_priced_call_cost_explains_unknowns() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    assert priced_call_cost(usage, "small-b", PRICES).cost == Decimal("0.00036")
    unknown_model = priced_call_cost(usage, "mystery", PRICES)
    assert unknown_model.cost is None and "mystery" in unknown_model.reason
    no_usage = priced_call_cost(None, "small-b", PRICES)
    assert no_usage.cost is None and "missing" in no_usage.reason


# --- MoM ---------------------------------------------------------------------------------------


def receipt(calls: list[dict[str, Any]], *, complete: bool = True, version: Any = 1) -> str:
    return json.dumps({"version": version, "complete": complete, "calls": calls})


CHILD_A = {
    "model": "small-a",
    "role": "subject",
    "stage": "draft",
    "status": "completed",
    "usage": {
        "prompt_tokens": 100,
        "cached_input_tokens": 40,
        "cache_write_tokens": 0,
        "completion_tokens": 10,
    },
}
CHILD_B = {
    "model": "small-b",
    "role": "subject",
    "stage": "review",
    "status": "completed",
    "usage": {"prompt_tokens": 50, "completion_tokens": 5},
}
STREAM_USAGE = {"prompt_tokens": 50, "completion_tokens": 5}


def test_complete_receipt_prices_each_child_by_its_own_model() -> None:
    headers = {"x-vsr-model-usage": receipt([CHILD_A, CHILD_B]), "x-vsr-inference-call-count": "2"}
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    # small-a: 60 × 1 + 40 × 0.5 + 10 × 2 = 100 per 1M; small-b: 50 × 3 + 5 × 6 = 180 per 1M.
    assert cost == Decimal("0.00028")
    assert "2 call" in reason


def test_receipt_header_lookup_is_case_insensitive() -> None:
    headers = {"X-VSR-Model-Usage": receipt([CHILD_B])}
    assert mom_call_cost(headers, None, PRICES).cost == Decimal("0.00018")


def test_incomplete_receipt_leaves_cost_unknown() -> None:
    headers = {"x-vsr-model-usage": receipt([CHILD_A, CHILD_B], complete=False)}
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    assert cost is None and "incomplete" in reason


def test_receipt_with_an_unpriced_child_leaves_cost_unknown() -> None:
    stranger = {**CHILD_B, "model": "not-in-table"}
    headers = {"x-vsr-model-usage": receipt([CHILD_A, stranger])}
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    assert cost is None and "not-in-table" in reason


def test_receipt_with_a_child_missing_usage_leaves_cost_unknown() -> None:
    headers = {"x-vsr-model-usage": receipt([CHILD_A, {"model": "small-b"}])}
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    assert cost is None and "call 1" in reason


def test_receipt_disagreeing_with_the_call_count_is_not_trusted() -> None:
    headers = {"x-vsr-model-usage": receipt([CHILD_A]), "x-vsr-inference-call-count": "2"}
    assert mom_call_cost(headers, STREAM_USAGE, PRICES).cost is None


def test_malformed_receipt_does_not_fall_back_to_the_direct_call_rule() -> None:
    headers = {
        "x-vsr-model-usage": "{not json",
        "x-vsr-inference-call-count": "1",
        "x-vsr-selected-model": "small-b",
    }
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    assert cost is None and "not JSON" in reason


def test_proven_direct_call_prices_stream_usage_at_the_selected_model() -> None:
    headers = {"x-vsr-inference-call-count": "1", "x-vsr-selected-model": "small-b"}
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    assert cost == Decimal("0.00018")  # 50 × 3 + 5 × 6 = 180 per 1M
    assert "direct" in reason


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-headers"),
        pytest.param({"x-vsr-selected-model": "small-b"}, id="selected-model-only"),
        pytest.param({"x-vsr-inference-call-count": "1"}, id="count-without-model"),
        pytest.param(
            {"x-vsr-inference-call-count": "2", "x-vsr-selected-model": "small-b"},
            id="several-calls-without-receipt",
        ),
        pytest.param(
            {"x-vsr-inference-call-count": "one", "x-vsr-selected-model": "small-b"},
            id="garbled-count",
        ),
        pytest.param(
            {"x-vsr-inference-call-count": "1", "x-vsr-selected-model": "unpriced"},
            id="direct-to-unpriced-model",
        ),
    ],
)
def test_mom_cost_is_unknown_without_explicit_evidence(headers: dict[str, str]) -> None:
    cost, reason = mom_call_cost(headers, STREAM_USAGE, PRICES)
    assert cost is None
    assert reason


def test_direct_call_with_unknown_stream_usage_is_unknown() -> None:
    headers = {"x-vsr-inference-call-count": "1", "x-vsr-selected-model": "small-b"}
    assert mom_call_cost(headers, None, PRICES).cost is None


def test_receipt_parsing_accepts_the_documented_shape() -> None:
    parsed = parse_model_usage_receipt(receipt([CHILD_A, CHILD_B]))
    assert parsed is not None
    assert parsed.complete and parsed.version == 1
    assert [c.model for c in parsed.calls] == ["small-a", "small-b"]
    assert [c.stage for c in parsed.calls] == ["draft", "review"]
    assert parsed.calls[0].buckets == buckets(
        60, 40, 0, 10, cached_reported=True, write_reported=True
    )
    assert parse_model_usage_receipt(receipt([CHILD_B], version="1")) is not None


@pytest.mark.parametrize(
    ("value", "reason_part"),
    [
        (None, "no receipt"),
        ("", "not JSON"),
        ("[]", "not a JSON object"),
        (receipt([CHILD_A], version=2), "version"),
        (receipt([CHILD_A], version=True), "version"),
        (json.dumps({"version": 1, "calls": []}), "complete"),
        (json.dumps({"version": 1, "complete": "yes", "calls": []}), "complete"),
        (json.dumps({"version": 1, "complete": True, "calls": {}}), "calls"),
        (json.dumps({"version": 1, "complete": True, "calls": [1]}), "calls[0]"),
        (json.dumps({"version": 1, "complete": True, "calls": [{"model": 3}]}), "model"),
        (receipt([{}] * 257), "more than 256"),
        (receipt([{**CHILD_B, "stage": "x" * 13000}]), "bytes"),
    ],
)
def test_malformed_receipts_are_rejected_with_a_reason(value: str | None, reason_part: str) -> None:
    outcome = parse_model_usage_receipt_explained(value)
    assert outcome.receipt is None
    assert reason_part in outcome.reason


def test_complete_receipt_with_no_calls_is_a_known_zero() -> None:
    # The router states that it made no inference call (e.g. a blocked request).
    headers = {"x-vsr-model-usage": receipt([])}
    assert mom_call_cost(headers, None, PRICES).cost == Decimal(0)


# --- sums -------------------------------------------------------------------------------------


def test_sum_known_keeps_unknown_total_but_reports_the_known_part() -> None:
    total, known, complete = sum_known([Decimal("0.1"), None, Decimal("0.2")])
    assert total is None
    assert known == Decimal("0.3")
    assert complete is False


def test_sum_known_of_known_values_is_exact() -> None:
    assert sum_known([Decimal("0.1")] * 3) == (Decimal("0.3"), Decimal("0.3"), True)
    assert sum_known([]) == (Decimal(0), Decimal(0), True)


def test_responses_api_usage_counts_cached_tokens_inside_input_tokens() -> None:
    raw = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 20},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 150,
    }
    outcome = usage_buckets_explained(raw)
    assert outcome.problem is None, outcome.reason
    b = outcome.buckets
    assert (b.input, b.cached_input, b.cache_write, b.output) == (100, 20, 0, 30)
    assert b.cached_reported and not b.cache_write_reported
