"""Cache-neutral savings whenever both cache-neutral costs are known (issue 35 item 5).

The two savings figures of a comparison each depend only on their own inputs: the measured
savings on the measured (billed) costs, the cache-neutral savings on the cache-neutral costs.
A baseline whose bill is unknown — cached tokens served without a cached-input price — still
has a complete cache-neutral cost, and its cache-neutral savings are stated; the tie rule
(every tied strongest model's cost must be known) asks each figure about its own costs. Every
rate is recomputed here from the constructed amounts (9-decimal prices make 15-decimal costs).
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal, localcontext

import pytest
from rest_framework.test import APIClient

from compare.services import comparison_build
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

D = Decimal


def plain(amount: Decimal) -> str:
    text = f"{amount:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def savings(candidate: Decimal, baseline: Decimal) -> str:
    """100 × (1 − candidate / baseline) at the comparison's 34 digits, as exact text."""
    with localcontext() as ctx:
        ctx.prec = 34
        return plain(100 * (1 - candidate / baseline))


# Per call, as a 9-decimal price table makes them: 1234 tokens at 3.000000007 per 1M and the like.
BASE_NEUTRAL = D(1234) * D("3.000000007") / D(1_000_000)  # 0.003702000008638
ROUTER_COST = D(987) * D("0.518750001") / D(1_000_000)
ROUTER_NEUTRAL = D(1011) * D("0.518750001") / D(1_000_000)
N = 4


def test_a_baseline_with_an_unknown_bill_still_has_cache_neutral_savings():
    """issue 35 item 5: the baseline's measured cost is unknown (its cached tokens have no
    price) but its cache-neutral cost is complete: the cache-neutral savings are stated, on
    every surface; the measured savings stay unknown with their own reason."""
    qs = b.questions({"mmlu-pro": N})
    strong = b.target("strong")
    weak = b.target("weak")
    router = b.target("router", kind="mom")
    r = b.run(
        qs,
        {strong: [True] * N, weak: [True, False, False, False], router: [True] * N},
        costs={strong: None, weak: D("0.0001"), router: ROUTER_COST},
        neutral={strong: BASE_NEUTRAL, weak: D("0.0002"), router: ROUTER_NEUTRAL},
    )

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])

    assert doc["baseline"]["target"] == "strong"
    assert doc["baseline"]["usage"]["subject_cost_usd"] is None
    assert doc["baseline"]["usage"]["cache_neutral_cost_usd"] == plain(N * BASE_NEUTRAL)
    row = next(c for c in doc["comparisons"] if c["target"] == "router")
    assert row["usage"]["cache_neutral_cost_usd"] == plain(N * ROUTER_NEUTRAL)
    want = savings(N * ROUTER_NEUTRAL, N * BASE_NEUTRAL)
    assert row["savings"]["cache_neutral_pct"] == want
    assert row["savings"]["cache_neutral_unknown_reason"] is None
    # The measured savings depend on the bill, which is unknown: unknown, saying why.
    assert row["savings"]["subject_cost_pct"] is None
    assert row["savings"]["subject_cost_unknown_reason"] is not None

    ops = f.user_create(username="ops", staff=True)
    api = APIClient()
    api.force_authenticate(ops)
    response = api.post("/api/v1/compare/", {"baseline": r.pk, "candidates": [r.pk]}, format="json")
    assert response.status_code == 200
    routed = next(c for c in response.json()["comparisons"] if c["target"] == "router")
    assert routed["savings"]["cache_neutral_pct"] == want
    response = api.get(f"/api/v1/compare/export.csv?baseline={r.pk}&candidates={r.pk}")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    (routed_row,) = [x for x in rows if x.get("target") == "router"]
    assert routed_row["cache_neutral_savings_pct"] == want
    assert routed_row["subject_savings_pct"] == ""


def test_each_savings_figure_asks_the_tie_rule_about_its_own_costs():
    """issue 35 item 5: with two tied strongest models, a tied model whose bill is unknown
    withholds the measured savings only, and one whose cache-neutral cost is unknown withholds
    the cache-neutral savings only."""
    qs = b.questions({"mmlu-pro": N})
    billed, unbilled = b.target("a-billed"), b.target("b-unbilled")
    router = b.target("router", kind="mom")
    run = b.run(
        qs,
        {billed: [True] * N, unbilled: [True] * N, router: [True, True, True, False]},
        costs={billed: D("0.002"), unbilled: None, router: ROUTER_COST},
        neutral={billed: BASE_NEUTRAL, unbilled: D("0.001"), router: ROUTER_NEUTRAL},
    )
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert doc["baseline"]["target"] == "a-billed"  # complete cost before incomplete
    assert doc["baseline"]["tied"] == ["a-billed", "b-unbilled"]
    row = next(c for c in doc["comparisons"] if c["target"] == "router")
    assert row["savings"]["subject_cost_pct"] is None
    assert "incomplete cost" in row["savings"]["subject_cost_unknown_reason"]
    assert row["savings"]["cache_neutral_pct"] == savings(N * ROUTER_NEUTRAL, N * BASE_NEUTRAL)

    qs = b.questions({"mmlu-pro": N})
    billed, no_neutral = b.target("c-billed"), b.target("d-no-neutral")
    router = b.target("router-2", kind="mom")
    run = b.run(
        qs,
        {billed: [True] * N, no_neutral: [True] * N, router: [True, True, True, False]},
        costs={billed: D("0.002"), no_neutral: D("0.003"), router: ROUTER_COST},
        neutral={billed: BASE_NEUTRAL, no_neutral: None, router: ROUTER_NEUTRAL},
    )
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert doc["baseline"]["target"] == "c-billed"  # the lower cost of the tied two
    row = next(c for c in doc["comparisons"] if c["target"] == "router-2")
    assert row["savings"]["subject_cost_pct"] == savings(N * ROUTER_COST, N * D("0.002"))
    assert row["savings"]["cache_neutral_pct"] is None
    assert row["savings"]["cache_neutral_unknown_reason"] == (
        "a tied strongest single model has incomplete cache-neutral cost"
    )
