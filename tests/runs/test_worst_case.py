"""The worst-case call cost and the MoM evidence predicate each have one home (issue 24):
`runs.ledger.accounting.worst_case_call_cost` for the engine's reservation and the plan review, and
`runs.ledger.usage.mom_evidence` for pricing, bucketing and `reconcile-usage`. Expected values are
computed here from the rule's statement, not by calling the code under test."""

from __future__ import annotations

import json
import zlib
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pytest

from runs.engine.driver import Driver
from runs.engine.store import TargetInfo
from runs.ledger.accounting import mom_call_cost, worst_case_call_cost
from runs.ledger.usage import mom_call_buckets, mom_evidence
from runs.models import Call, CallEvidence
from runs.reporting.reconcile import usage_reconcile
from srbench.canonical import sha256_bytes
from tests.compare import builders as b

MESSAGES = [{"role": "user", "content": "Which is larger, 2**10 or 10**3? Answer with one letter."}]
PRICES = {
    "cheap": {"input": "0.15", "output": "0.60"},
    "dear": {"input": "3", "output": "15", "cached_input": "0.3"},
}


def bound(input_price: str, output_price: str, max_tokens: int, calls: int = 1) -> Fraction:
    request_bytes = len(json.dumps(MESSAGES).encode("utf-8")) + 64
    per_call = (Fraction(input_price) * request_bytes + Fraction(output_price) * max_tokens) / (
        10**6
    )
    return per_call * calls


def test_a_single_model_target_is_bounded_at_its_own_price() -> None:
    got = worst_case_call_cost(
        PRICES,
        kind="single",
        model="cheap",
        messages=MESSAGES,
        max_tokens=512,
        max_inference_calls=None,
    )
    assert got is not None and Fraction(got) == bound("0.15", "0.60", 512)


def test_a_router_is_bounded_at_its_dearest_model_times_its_call_cap() -> None:
    got = worst_case_call_cost(
        PRICES,
        kind="mom",
        model="auto",
        messages=MESSAGES,
        max_tokens=512,
        max_inference_calls=3,
    )
    assert got is not None and Fraction(got) == bound("3", "15", 512, calls=3)


@pytest.mark.parametrize(
    ("kind", "model", "table"),
    [("single", "unpriced", PRICES), ("mom", "auto", {}), ("single", "cheap", {})],
)
def test_a_missing_price_leaves_the_bound_unknown(kind: str, model: str, table: Any) -> None:
    assert (
        worst_case_call_cost(
            table, kind=kind, model=model, messages=MESSAGES, max_tokens=8, max_inference_calls=2
        )
        is None
    )


def test_the_engine_reserves_the_same_bound() -> None:
    target = TargetInfo(
        slug="r",
        kind="mom",
        base_url="http://127.0.0.1:1",
        model="auto",
        fixed_params={},
        prices=PRICES,
        config_hash=None,
        max_inference_calls=2,
        preview_url=None,
        api_key=None,
        target_id=1,
    )
    engine = SimpleNamespace(max_cost=Decimal("1"), limits={"max_output_tokens": 256})
    body = {"model": "auto", "messages": MESSAGES}  # no max_tokens: the plan's limit applies
    got = Driver.reservation(engine, target, body)  # type: ignore[arg-type]
    assert got is not None and Fraction(got) == bound("3", "15", 256, calls=2)
    # No budget cap: nothing is reserved.
    uncapped = SimpleNamespace(max_cost=None, limits={"max_output_tokens": 256})
    assert Driver.reservation(uncapped, target, body) is None  # type: ignore[arg-type]


USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
RECEIPT = json.dumps(
    {
        "version": 1,
        "complete": True,
        "calls": [
            {"model": "cheap", "usage": USAGE},
            {"model": "dear", "usage": USAGE},
        ],
    }
)
HEADER_CASES: list[tuple[str, dict[str, str], bool]] = [
    ("complete receipt", {"x-vsr-model-usage": RECEIPT}, True),
    (
        "receipt agreeing with the count",
        {"x-vsr-model-usage": RECEIPT, "x-vsr-inference-call-count": "2"},
        True,
    ),
    (
        "receipt disagreeing with the count",
        {"x-vsr-model-usage": RECEIPT, "x-vsr-inference-call-count": "3"},
        False,
    ),
    ("incomplete receipt", {"x-vsr-model-usage": RECEIPT.replace("true", "false")}, False),
    ("unparseable receipt", {"x-vsr-model-usage": "{"}, False),
    (
        "proven direct call",
        {"x-vsr-inference-call-count": "1", "x-vsr-selected-model": "dear"},
        True,
    ),
    ("direct call without a selected model", {"x-vsr-inference-call-count": "1"}, False),
    (
        "two calls, no receipt",
        {"x-vsr-inference-call-count": "2", "x-vsr-selected-model": "dear"},
        False,
    ),
    ("invalid count", {"x-vsr-inference-call-count": "one", "x-vsr-selected-model": "dear"}, False),
    ("no evidence", {}, False),
]


def proven_mom_cost(headers: dict[str, str]) -> Fraction:
    """A receipt prices each of its calls (cheap, then dear); a proven direct call is dear's."""
    one = {
        "cheap": Fraction("0.15") * 100 + Fraction("0.60") * 20,
        "dear": Fraction(3) * 100 + Fraction(15) * 20,
    }
    expected = one["cheap"] + one["dear"] if "x-vsr-model-usage" in headers else one["dear"]
    return expected / 10**6


@pytest.mark.parametrize(
    ("label", "headers", "proven"), HEADER_CASES, ids=[c[0] for c in HEADER_CASES]
)
def test_pricing_and_bucketing_agree_on_what_proves_a_mom_call(
    label: str, headers: dict[str, str], proven: bool
) -> None:
    assert mom_evidence(headers).proven is proven, mom_evidence(headers).reason
    assert (mom_call_buckets(headers, USAGE) is not None) is proven
    cost = mom_call_cost(headers, USAGE, PRICES).cost
    assert (cost is not None) is proven
    if cost is not None:
        assert Fraction(cost) == proven_mom_cost(headers)


def evidence_stream(model: str) -> bytes:
    """The saved SSE of one finished call whose usage chunk is USAGE."""
    chunks: list[Any] = [
        {"model": model, "choices": [{"index": 0, "delta": {"content": "B"}}]},
        {"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"model": model, "choices": [], "usage": USAGE},
        "[DONE]",
    ]
    return b"".join(
        f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n".encode() for c in chunks
    )


@pytest.mark.django_db
def test_reconcile_usage_attributes_exactly_the_mom_calls_pricing_can_prove() -> None:
    qs = b.questions({"mmlu-pro": len(HEADER_CASES)})
    router = b.target("router", kind="mom", model="dear", prices=PRICES)
    r = b.run(
        qs,
        {router: [True] * len(qs)},
        costs={router: None},
        call_fields={
            router: [
                {"usage_raw": USAGE, "served_model": "dear", "response_headers": headers}
                for _, headers, _ in HEADER_CASES
            ]
        },
    )
    calls = list(Call.objects.filter(cell__run=r).order_by("cell__question_id"))
    for call in calls:
        raw = evidence_stream("dear")
        CallEvidence.objects.create(
            call=call, body=zlib.compress(raw), raw_size=len(raw), sha256=sha256_bytes(raw)
        )

    entries = {
        e["call_id"]: e for e in usage_reconcile(run_id=r.pk).correction.corrections["calls"]
    }

    for call, (label, headers, proven) in zip(calls, HEADER_CASES, strict=True):
        entry = entries[call.pk]
        assert (entry["cost_usd"] is not None) is proven, (label, entry)
        if proven:
            assert Fraction(entry["cost_usd"]) == proven_mom_cost(headers)
        else:
            assert entry["outcome"] == "unverifiable", label
            assert entry["reason"] == (
                f"MoM call is not attributable: {mom_evidence(headers).reason}"
            ), label
