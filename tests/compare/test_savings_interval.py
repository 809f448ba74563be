"""The savings interval (issue 6 item 5): a stratified paired bootstrap of the subject-cost
ratio, recomputed here with a few lines of numpy on the same seed and resampling scheme."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from compare.services import comparison_build
from compare.views import compare_url
from srbench import savings_bootstrap as stats
from srbench.savings_bootstrap import (
    SAVINGS_INTERVAL_LABEL,
    savings_bootstrap_interval,
    savings_bootstrap_intervals,
)
from srbench.stats import DEFAULT_BOOTSTRAP_SEED
from tests import factories as f
from tests.compare import builders as b

D = Decimal


def expected(base: dict[str, list[float]], cand: dict[str, list[float]], alpha: float = 0.05):
    """Resample case indices within each benchmark (sorted), apply them to both arrays, take
    100·(1 − Σcand/Σbase) per draw and its percentile interval."""
    rng = np.random.default_rng(DEFAULT_BOOTSTRAP_SEED)
    bs, cs = np.zeros(2000), np.zeros(2000)
    for k in sorted(base):
        i = rng.integers(0, len(base[k]), size=(2000, len(base[k])))
        bs += np.asarray(base[k])[i].sum(axis=1)
        cs += np.asarray(cand[k])[i].sum(axis=1)
    return np.quantile(100 * (1 - cs / bs), [alpha / 2, 1 - alpha / 2])


BASE = {"mmlu-pro": [0.010, 0.020, 0.015, 0.030, 0.012, 0.018], "gpqa": [0.040, 0.050, 0.045]}
CAND = {"mmlu-pro": [0.002, 0.020, 0.004, 0.030, 0.001, 0.003], "gpqa": [0.010, 0.060, 0.005]}


def test_the_function_matches_an_independent_computation_and_ignores_dict_order():
    got = savings_bootstrap_interval(BASE, CAND)
    lo, hi = expected(BASE, CAND)
    assert (got.lower, got.upper) == pytest.approx((lo, hi), abs=1e-9)
    assert lo < hi
    assert got.draws == 2000 and got.seed == DEFAULT_BOOTSTRAP_SEED
    assert got.label == SAVINGS_INTERVAL_LABEL
    reordered = savings_bootstrap_interval(dict(reversed(BASE.items())), CAND)
    assert reordered == got  # same seed, same interval: reproducible


def test_a_batch_gives_each_candidate_the_interval_it_would_get_alone():
    rng = np.random.default_rng(7)
    # Costs as the ledger holds them: 10 decimal places.
    base = {"mmlu-pro": rng.uniform(0.001, 0.02, 40), "gpqa": rng.uniform(0, 0.05, 9)}
    base = {k: np.round(v, 10).tolist() for k, v in base.items()}
    cands = [
        {
            k: np.round(np.asarray(v) * rng.uniform(0.2, 1.5, len(v)), 10).tolist()
            for k, v in base.items()
        }
        for _ in range(4)
    ]
    cands.insert(2, {**cands[0], "gpqa": [None] + list(cands[0]["gpqa"][1:])})
    got = savings_bootstrap_intervals(base, cands, alpha=0.1)
    assert got[2] is None  # one unknown case cost: that candidate only
    for interval, cand in zip(got[:2] + got[3:], cands[:2] + cands[3:], strict=True):
        lo, hi = expected(base, cand, alpha=0.1)
        assert (interval.lower, interval.upper) == pytest.approx((lo, hi), abs=1e-9)
        assert interval == savings_bootstrap_interval(base, cand, alpha=0.1)
    assert savings_bootstrap_intervals({k: [0.0] * len(v) for k, v in base.items()}, cands) == [
        None
    ] * len(cands)


@pytest.mark.parametrize("block", [1, 7, 40 * 3, 40 * 2000])
def test_resamples_drawn_a_block_at_a_time_give_the_interval_of_one_draw(monkeypatch, block):
    """Issue 38: the bootstrap draws its resamples a block of rows at a time to stay in cache at
    100,000 cases; the generator's stream, so every interval, is that of one (draws, n) draw —
    blocks of one row, of a few, and one block holding them all give the same exact figures."""
    rng = np.random.default_rng(11)
    base = {"mmlu-pro": np.round(rng.uniform(0.001, 0.02, 40), 10).tolist()}
    base["gpqa"] = np.round(rng.uniform(0.001, 0.05, 9), 10).tolist()
    cand = {
        k: np.round(np.asarray(v) * rng.uniform(0.2, 1.5, len(v)), 10).tolist()
        for k, v in base.items()
    }
    monkeypatch.setattr(stats, "BOOTSTRAP_BLOCK_ELEMENTS", block)
    got = savings_bootstrap_interval(base, cand)
    lo, hi = expected(base, cand)
    assert (got.lower, got.upper) == pytest.approx((lo, hi), abs=1e-9)
    # Past float exactness (the int64 path), in blocks too.
    huge = {k: [x * 1e6 for x in v] for k, v in base.items()}  # Σ n·max ≥ 2**53 units
    got = savings_bootstrap_interval(huge, cand)
    lo, hi = expected(huge, cand)
    assert (got.lower, got.upper) == pytest.approx((lo, hi), abs=1e-9)


def test_costs_past_float_exactness_are_resampled_exactly_in_integers():
    # Σ n_b · max cost ≥ 2**53 units of 1e-10 USD (≈ 900,720 USD): the int64 path.
    base = {"mmlu-pro": [400_000.5, 250_000.25, 380_000.0], "gpqa": [90_000.0, 120_000.75]}
    cand = {"mmlu-pro": [100_000.5, 260_000.0, 90_000.25], "gpqa": [30_000.0, 150_000.0]}
    got = savings_bootstrap_interval(base, cand)
    lo, hi = expected(base, cand)
    assert (got.lower, got.upper) == pytest.approx((lo, hi), abs=1e-9)


def test_unknown_cost_or_free_baseline_gives_no_interval():
    cand = {**CAND, "gpqa": [0.01, None, 0.005]}
    assert savings_bootstrap_interval(BASE, cand) is None
    assert savings_bootstrap_interval(BASE, {**CAND, "gpqa": [0.01, float("nan"), 0.0]}) is None
    zero = {k: [0.0] * len(v) for k, v in BASE.items()}
    assert savings_bootstrap_interval(zero, CAND) is None
    # Identical costs: every resample saves exactly 0 %.
    same = savings_bootstrap_interval(BASE, BASE)
    assert (same.lower, same.upper) == pytest.approx((0.0, 0.0), abs=1e-9)


def _constructed(candidate_costs):
    qs = b.questions({"mmlu-pro": 6, "gpqa": 3})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    outcome = [True, False, True, True, False, True, False, True, True]
    base_costs = [D(str(x)) for x in BASE["mmlu-pro"] + BASE["gpqa"]]
    r = b.run(
        qs,
        {base: outcome, cand: [True] * 9},
        costs={base: base_costs, cand: candidate_costs},
    )
    return r


@pytest.mark.django_db
def test_comparison_carries_the_interval_of_its_cases():
    r = _constructed([D(str(x)) for x in CAND["mmlu-pro"] + CAND["gpqa"]])
    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])
    (c,) = doc["comparisons"]
    got = c["savings_interval"]
    lo, hi = expected(BASE, CAND)
    assert (got["lower"], got["upper"]) == pytest.approx((lo, hi), abs=1e-9)
    assert got["draws"] == 2000
    assert got["label"] == "diagnostic: stratified paired bootstrap of the cost ratio"
    # The point savings lie inside their own interval here, and a rebuild is identical.
    assert lo <= float(c["savings"]["subject_cost_pct"]) <= hi
    again = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])
    assert again["comparisons"][0]["savings_interval"] == got


@pytest.mark.django_db
def test_one_unknown_case_cost_makes_the_interval_unknown_and_the_card_says_so(client):
    costs = [D(str(x)) for x in CAND["mmlu-pro"] + CAND["gpqa"]]
    costs[7] = None
    r = _constructed(costs)
    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])
    assert doc["comparisons"][0]["savings_interval"] is None

    client.force_login(f.user_create())
    page = client.get(compare_url(baseline=r.pk, candidates=[r.pk], compare=True))
    html = page.content.decode()
    line = html.split('class="savings-interval"', 1)[1].split("</p>", 1)[0]
    assert "unknown" in line and "stratified paired bootstrap" in line


@pytest.mark.django_db
def test_card_shows_the_interval(client):
    r = _constructed([D(str(x)) for x in CAND["mmlu-pro"] + CAND["gpqa"]])
    lo, hi = expected(BASE, CAND)
    client.force_login(f.user_create())
    html = client.get(compare_url(baseline=r.pk, candidates=[r.pk], compare=True)).content
    line = html.decode().split('class="savings-interval"', 1)[1].split("</p>", 1)[0]
    assert f"[{lo:.1f}%, {hi:.1f}%]" in line


@pytest.mark.django_db
def test_card_says_what_the_savings_interval_does_not_cover(client):
    """The demo's headline comparison (third outside probe): the router's measured savings
    were 68.7% with the card's "Subject savings 95% interval" [67.3%, 70.3%]; the same two
    targets re-run on a warm cache measured 60.3% (cache-neutral 59.8% both times). The
    interval resamples questions at the costs one pair of runs measured: the card must not
    read it as a confidence interval for the savings a rerun would see."""
    r = _constructed([D(str(x)) for x in CAND["mmlu-pro"] + CAND["gpqa"]])
    client.force_login(f.user_create())
    html = client.get(compare_url(baseline=r.pk, candidates=[r.pk], compare=True)).content
    line = html.decode().split('class="savings-interval"', 1)[1].split("</p>", 1)[0]
    assert "95% bootstrap interval (diagnostic)" in line
    assert "cache warm-up and other run-to-run changes in cost are not in it" in line
