"""A router's cache-neutral cost comes from its per-entry usage receipts (issue 21, point 3):
each entry's usage at its own served model's ordinary input and output prices, and is null
only when an entry is missing or unpriced, saying which."""

from __future__ import annotations

import json
from decimal import Decimal, localcontext
from typing import Any

import pytest

from compare.services import comparison_build
from runs.ledger.accounting import call_accounting
from runs.models import Call
from runs.planning.services import run_create
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

MILLION = Decimal(1_000_000)


def neutral_by_hand(prompt_tokens: int, completion_tokens: int, model: str) -> Decimal:
    """DESIGN §5: (input + cached_input + cache_write) × input price + output × output price;
    a receipt entry's ``prompt_tokens`` already holds all three input buckets."""
    price = es.PRICES[model]
    return (
        prompt_tokens * Decimal(price["input"]) + completion_tokens * Decimal(price["output"])
    ) / MILLION


def receipt_of(call: Call) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in call.response_headers.items()}
    return json.loads(headers["x-vsr-model-usage"])


def mom_headers(calls: list[dict[str, Any]], *, complete: bool = True, count: int | None = None):
    headers = {
        "x-vsr-model-usage": json.dumps({"version": 1, "complete": complete, "calls": calls}),
        "x-vsr-selected-model": calls[-1]["model"] if calls else "",
    }
    if count is not None:
        headers["x-vsr-inference-call-count"] = str(count)
    return headers


def entry(model: str, prompt: int, cached: int, completion: int) -> dict[str, Any]:
    return {
        "model": model,
        "role": "candidate",
        "stage": "generation",
        "status": "ok",
        "usage": {
            "prompt_tokens": prompt,
            "cached_input_tokens": cached,
            "cache_write_tokens": 0,
            "completion_tokens": completion,
        },
    }


def router_accounting(headers: dict[str, str]):
    return call_accounting(
        kind="mom",
        usage={"prompt_tokens": 1, "completion_tokens": 1},
        served_model="sim-strong",
        headers=headers,
        price_table={k: es.PRICES[k] for k in ("sim-strong", "sim-weak")},
    )


def test_a_router_call_is_priced_cache_neutrally_entry_by_entry():
    headers = mom_headers(
        [entry("sim-weak", 1000, 800, 50), entry("sim-strong", 1200, 960, 30)], count=2
    )
    result = router_accounting(headers)
    # weak: 1000 × 0.5 + 50 × 1.5; strong: 1200 × 3 + 30 × 15 (per 1M tokens).
    assert result.cache_neutral == Decimal("0.004625")
    assert result.cost is not None and result.cost < result.cache_neutral


def test_a_receipt_entry_with_an_unpriced_model_leaves_the_cache_neutral_cost_null_saying_so():
    headers = mom_headers([entry("sim-weak", 1000, 0, 50), entry("sim-secret", 100, 0, 5)])
    result = router_accounting(headers)
    assert result.cache_neutral is None and result.cost is None
    assert result.note == "receipt call 1 model 'sim-secret' is not priced"


def test_a_missing_receipt_entry_leaves_the_cache_neutral_cost_null_saying_so():
    listed_one_of_two = router_accounting(mom_headers([entry("sim-weak", 1000, 0, 50)], count=2))
    assert listed_one_of_two.cache_neutral is None
    assert listed_one_of_two.note == ("x-vsr-inference-call-count says 2 but the receipt lists 1")
    marked_incomplete = router_accounting(
        mom_headers([entry("sim-weak", 1000, 0, 50)], complete=False)
    )
    assert marked_incomplete.cache_neutral is None
    assert marked_incomplete.note == "usage receipt is marked incomplete"


def test_an_entry_without_usage_leaves_the_cache_neutral_cost_null_saying_so():
    no_usage = entry("sim-weak", 1000, 0, 50)
    del no_usage["usage"]
    result = router_accounting(mom_headers([no_usage]))
    assert result.cache_neutral is None
    assert result.note.startswith("receipt call 0 has unusable usage")


@pytest.mark.worker
def test_router_report_and_comparison_show_cache_neutral_cost_and_savings_from_receipts(
    celery_worker,
):
    benchmarks = ["mmlu-pro", "arc"]
    with es.simulator(benchmarks) as url:
        targets = es.sim_targets(url)
        # The same router, but its frozen price table knows only the strong model.
        targets["router"].pk = None
        targets["router"].slug = "sim-router-strong-priced"
        targets["router"].prices = {"sim-strong": es.PRICES["sim-strong"]}
        targets["router"].save()
        dataset = es.fixture_dataset(benchmarks)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "router cache-neutral",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-router", "sim-router-strong-priced"],
                "limits": {"concurrency": 4},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=180)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])

    calls = Call.objects.filter(cell__run=run, role="subject")
    # By hand from what the simulator returned: the strong model's stream usage, and every
    # entry of every router receipt, each at its own model's price.
    with localcontext() as ctx:
        ctx.prec = 60
        baseline = sum(
            (
                neutral_by_hand(
                    c.usage_raw["prompt_tokens"], c.usage_raw["completion_tokens"], "sim-strong"
                )
                for c in calls.filter(cell__target__slug="sim-strong")
            ),
            Decimal(0),
        )
        entries = [
            e for c in calls.filter(cell__target__slug="sim-router") for e in receipt_of(c)["calls"]
        ]
        router = sum(
            (
                neutral_by_hand(
                    e["usage"]["prompt_tokens"], e["usage"]["completion_tokens"], e["model"]
                )
                for e in entries
            ),
            Decimal(0),
        )
    cached = sum(e["usage"]["cached_input_tokens"] for e in entries)
    assert cached > 0, "the simulator's prefix cache should have served some input"
    assert {e["model"] for e in entries} >= {"sim-weak"}
    with localcontext() as ctx:
        ctx.prec = 34
        savings = 100 * (1 - router / baseline)

    report = {t["slug"]: t for t in run_report(run=run)["targets"]}
    assert Decimal(report["sim-strong"]["cache_neutral_cost_usd"]) == baseline
    assert Decimal(report["sim-router"]["cache_neutral_cost_usd"]) == router
    assert report["sim-router"]["cache_neutral_unknown_reason"] is None
    # Cache-neutral is not the bill: cached input is priced at the ordinary input price.
    assert Decimal(report["sim-router"]["subject_cost_usd"]) < router

    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert doc["baseline"]["target"] == "sim-strong"
    rows = {c["target"]: c for c in doc["comparisons"]}
    routed = rows["sim-router"]
    assert Decimal(routed["usage"]["cache_neutral_cost_usd"]) == router
    assert Decimal(routed["savings"]["cache_neutral_pct"]) == savings
    assert routed["savings"]["cache_neutral_unknown_reason"] is None

    # A receipt entry served by a model the frozen price table lacks: unknown, and said so.
    partial = report["sim-router-strong-priced"]
    assert partial["cache_neutral_cost_usd"] is None
    unpriced = calls.filter(
        cell__target__slug="sim-router-strong-priced", cache_neutral_cost_usd__isnull=True
    )
    assert unpriced.exists()
    assert all("model 'sim-weak' is not priced" in c.cost_note for c in unpriced)
    partial_calls = calls.filter(cell__target__slug="sim-router-strong-priced").count()
    assert partial["cache_neutral_unknown_reason"].startswith(
        f"{unpriced.count()} of {partial_calls} subject calls have no cache-neutral cost"
    )
    why = rows["sim-router-strong-priced"]["savings"]["cache_neutral_unknown_reason"]
    assert why.startswith("the candidate's cache-neutral cost is unknown: ")
    assert "model has no price" in why
