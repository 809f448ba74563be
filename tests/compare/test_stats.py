"""Statistics behind reports and comparisons. Each expected value is recomputed here from the
formula in DESIGN §6 (a few lines of numpy or exact fractions), not taken from the code."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from srbench.stats import (
    BaselineCandidate,
    accuracy,
    paired_difference,
    paired_differences,
    savings_pct,
    select_baseline,
    stratified_bootstrap_interval,
    weighted_quality,
    wilson_interval,
)

F = Fraction
R41_WEIGHTS = {
    "mmlu-pro": F(10, 100),
    "simpleqa": F(10, 100),
    "gpqa": F(15, 100),
    "hle": F(15, 100),
    "arc": F(10, 100),
    "livecodebench": F(10, 100),
    "scicode": F(10, 100),
    "terminal-bench": F(10, 100),
    "tau3": F(10, 100),
}


def hoeffding(weights: dict[str, float], sizes: dict[str, int], alpha: float) -> float:
    total = sum(weights.values())
    return math.sqrt(
        2 * math.log(2 / alpha) * sum((weights[b] / total) ** 2 / sizes[b] for b in sizes)
    )


# --- accuracy and Wilson ---------------------------------------------------------------------


def wilson_by_quadratic(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    # The Wilson bounds are the p solving (k/n − p)² = z² p (1 − p) / n.
    p_hat = k / n
    a = 1 + z * z / n
    b = -(2 * p_hat + z * z / n)
    c = p_hat * p_hat
    roots = sorted(np.roots([a, b, c]).real)
    return max(roots[0], 0.0), min(roots[1], 1.0)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (10, 10), (5, 10), (1, 3), (37, 500), (0, 1)])
def test_wilson_interval_matches_the_quadratic_solution(k: int, n: int) -> None:
    lo, hi = wilson_interval(k, n)  # type: ignore[misc]
    exp_lo, exp_hi = wilson_by_quadratic(k, n)
    assert lo == pytest.approx(exp_lo, abs=1e-12)
    assert hi == pytest.approx(exp_hi, abs=1e-12)


def test_wilson_interval_has_width_at_the_extremes_and_published_values() -> None:
    lo, hi = wilson_interval(0, 10)  # type: ignore[misc]
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(10, 10)  # type: ignore[misc]
    assert lo == pytest.approx(0.7225, abs=1e-4) and hi == 1.0


def test_wilson_interval_is_none_without_cases() -> None:
    assert wilson_interval(0, 0) is None


def test_wilson_interval_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    with pytest.raises(ValueError):
        wilson_interval(-1, 10)


def test_accuracy_divides_by_planned_cases() -> None:
    # 7 correct, 2 failed and 1 missing out of 10 planned: failures count as wrong.
    assert accuracy(7, 10) == F(7, 10)
    with pytest.raises(ValueError):
        accuracy(1, 0)


# --- weighted quality --------------------------------------------------------------------------


def test_weighted_quality_of_the_full_suite_is_exact() -> None:
    acc = {b: F(i + 1, 10) for i, b in enumerate(R41_WEIGHTS)}
    expected = sum(R41_WEIGHTS[b] * acc[b] for b in R41_WEIGHTS)
    assert expected == F(
        1 * 10 + 2 * 10 + 3 * 15 + 4 * 15 + 5 * 10 + 6 * 10 + 7 * 10 + 8 * 10 + 9 * 10, 1000
    )
    assert weighted_quality(acc, R41_WEIGHTS) == expected


def test_subset_weights_are_renormalised() -> None:
    acc = {"mmlu-pro": F(1, 2), "gpqa": F(1, 4)}
    # 0.10 and 0.15 renormalise to 2/5 and 3/5: 2/5 · 1/2 + 3/5 · 1/4 = 1/5 + 3/20 = 7/20.
    assert weighted_quality(acc, R41_WEIGHTS) == F(7, 20)


def test_weighted_quality_needs_a_weight_for_every_benchmark() -> None:
    with pytest.raises(ValueError, match="no weight"):
        weighted_quality({"unknown-bench": F(1)}, R41_WEIGHTS)
    with pytest.raises(ValueError):
        weighted_quality({}, R41_WEIGHTS)


# --- paired difference -------------------------------------------------------------------------


def test_identical_pairs_still_get_a_non_zero_width_interval() -> None:
    diffs = {"mmlu-pro": np.zeros(14, dtype=np.int8), "gpqa": np.zeros(4, dtype=np.int8)}
    result = paired_difference(diffs, R41_WEIGHTS)
    r = hoeffding({"mmlu-pro": 0.10, "gpqa": 0.15}, {"mmlu-pro": 14, "gpqa": 4}, 0.05)
    assert result.delta == 0
    assert result.half_width == pytest.approx(r, rel=1e-12)
    assert result.half_width > 0
    assert (result.lower, result.upper) == pytest.approx((-r, r))
    assert not result.improvement
    assert result.not_an_improvement_reason is None
    # The diagnostic bootstrap does collapse to [0, 0]; it proves nothing (R6.2).
    assert result.bootstrap is not None
    assert (result.bootstrap.lower, result.bootstrap.upper) == (0.0, 0.0)


def test_candidate_wrong_where_baseline_right_everywhere() -> None:
    diffs = {"arc": -np.ones(12, dtype=np.int8)}
    result = paired_difference(diffs, R41_WEIGHTS)
    r = math.sqrt(2 * math.log(2 / 0.05) / 12)
    assert result.delta == -1
    assert result.half_width == pytest.approx(r)
    assert result.lower == pytest.approx(-1 - r)  # not silently clipped...
    assert result.display_lower == -1.0  # ...but the display copy is, and says so
    assert result.clipped
    assert (result.wins, result.losses, result.ties) == (0, 12, 0)


def test_one_benchmark_only_uses_its_whole_weight() -> None:
    d = np.array([1, 1, 0, -1, 1, 0, 0, 1, 1, 0], dtype=np.int8)
    result = paired_difference({"hle": d}, R41_WEIGHTS, bootstrap_draws=None)
    assert result.benchmarks[0].weight == 1
    assert result.delta == F(int(d.sum()), d.size) == F(4, 10)
    assert result.micro_delta == result.delta
    assert result.half_width == pytest.approx(math.sqrt(2 * math.log(40) / 10))
    assert result.bootstrap is None


def test_unequal_sample_sizes_weight_means_not_cases() -> None:
    rng = np.random.default_rng(7)
    big = rng.choice([-1, 0, 1], size=50, p=[0.2, 0.5, 0.3]).astype(np.int8)
    small = rng.choice([-1, 0, 1], size=10, p=[0.1, 0.6, 0.3]).astype(np.int8)
    result = paired_difference({"mmlu-pro": big, "gpqa": small}, R41_WEIGHTS)
    w_big, w_small = F(2, 5), F(3, 5)  # 0.10 and 0.15 renormalised
    expected_delta = w_big * F(int(big.sum()), 50) + w_small * F(int(small.sum()), 10)
    assert result.delta == expected_delta
    assert result.micro_delta == F(int(big.sum() + small.sum()), 60)
    expected_r = math.sqrt(2 * math.log(2 / 0.05) * (0.4**2 / 50 + 0.6**2 / 10))
    assert result.half_width == pytest.approx(expected_r, rel=1e-12)
    by_name = {b.benchmark: b for b in result.benchmarks}
    assert by_name["mmlu-pro"].wins == int((big == 1).sum())
    assert by_name["mmlu-pro"].losses == int((big == -1).sum())
    assert by_name["mmlu-pro"].ties == int((big == 0).sum())
    assert result.wins == int((big == 1).sum() + (small == 1).sum())


def test_positive_estimate_crossing_zero_is_not_an_improvement() -> None:
    d = np.array([1] * 6 + [-1] * 2 + [0] * 12, dtype=np.int8)
    result = paired_difference({"mmlu-pro": d}, R41_WEIGHTS)
    assert result.delta == F(4, 20)
    assert result.lower < 0 < result.upper
    assert not result.improvement
    assert result.not_an_improvement_reason is not None
    assert "not an improvement" in result.not_an_improvement_reason


def test_clear_win_is_an_improvement() -> None:
    d = np.array([1] * 900 + [0] * 100, dtype=np.int8)
    result = paired_difference({"mmlu-pro": d}, R41_WEIGHTS, bootstrap_draws=None)
    r = math.sqrt(2 * math.log(40) / 1000)
    assert result.lower == pytest.approx(0.9 - r)
    assert result.improvement
    assert result.not_an_improvement_reason is None


def test_non_inferiority_uses_the_lower_bound_against_the_margin() -> None:
    d = np.array([0] * 990 + [-1] * 10, dtype=np.int8)
    r = math.sqrt(2 * math.log(40) / 1000)  # ≈ 0.0859
    lower = -0.01 - r
    wide = paired_difference({"gpqa": d}, R41_WEIGHTS, margin=0.10, bootstrap_draws=None)
    assert wide.non_inferiority is not None
    assert wide.non_inferiority.lower == pytest.approx(lower)
    assert wide.non_inferiority.non_inferior is (lower > -0.10) is True
    tight = paired_difference({"gpqa": d}, R41_WEIGHTS, margin=0.05, bootstrap_draws=None)
    assert tight.non_inferiority is not None and not tight.non_inferiority.non_inferior
    assert paired_difference({"gpqa": d}, R41_WEIGHTS, bootstrap_draws=None).non_inferiority is None


def test_bonferroni_family_interval_uses_alpha_over_k() -> None:
    d = np.array([1] * 60 + [0] * 40, dtype=np.int8)
    result = paired_difference({"arc": d}, R41_WEIGHTS, family_size=4, bootstrap_draws=None)
    assert result.family_alpha == pytest.approx(0.05 / 4)
    assert result.family_half_width == pytest.approx(math.sqrt(2 * math.log(2 / 0.0125) / 100))
    assert result.family_half_width > result.half_width
    assert result.family_lower == pytest.approx(0.6 - result.family_half_width)
    assert result.family_improvement is (0.6 - result.family_half_width > 0)


def test_differences_must_be_minus_one_zero_or_one() -> None:
    with pytest.raises(ValueError):
        paired_difference({"arc": np.array([2, 0])}, R41_WEIGHTS)
    with pytest.raises(ValueError):
        paired_difference({"arc": np.array([], dtype=np.int8)}, R41_WEIGHTS)
    with pytest.raises(ValueError):
        paired_difference({"arc": np.array([True, False])}, R41_WEIGHTS)


def test_paired_differences_from_correctness_vectors() -> None:
    d = paired_differences([1, 0, 1, 0], [True, True, False, False])
    assert d.tolist() == [0, -1, 1, 0]


# --- bootstrap ---------------------------------------------------------------------------------


def naive_bootstrap(
    diffs: dict[str, np.ndarray], weights: dict[str, float], draws: int, seed: int
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    total_w = sum(weights[b] for b in diffs)
    est = np.zeros(draws)
    for b, d in diffs.items():
        idx = rng.integers(0, d.size, size=(draws, d.size))
        est += weights[b] / total_w * d[idx].mean(axis=1)
    lo, hi = np.quantile(est, [0.025, 0.975])
    return float(lo), float(hi)


def bootstrap_sample() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "mmlu-pro": rng.choice([-1, 0, 1], size=80, p=[0.2, 0.5, 0.3]).astype(np.int8),
        "gpqa": rng.choice([-1, 0, 1], size=25, p=[0.3, 0.4, 0.3]).astype(np.int8),
    }


def test_bootstrap_is_reproducible_with_the_fixed_seed_and_any_dict_order() -> None:
    diffs = bootstrap_sample()
    first = stratified_bootstrap_interval(diffs, R41_WEIGHTS)
    again = stratified_bootstrap_interval(diffs, R41_WEIGHTS)
    reordered = stratified_bootstrap_interval(dict(reversed(diffs.items())), R41_WEIGHTS)
    assert first == again == reordered
    assert (first.draws, first.seed) == (2000, 20260918)
    other_seed = stratified_bootstrap_interval(diffs, R41_WEIGHTS, seed=1)
    assert (other_seed.lower, other_seed.upper) != (first.lower, first.upper)


def test_bootstrap_agrees_with_resampling_case_indices() -> None:
    diffs = bootstrap_sample()
    ours = stratified_bootstrap_interval(diffs, R41_WEIGHTS, draws=40_000)
    lo, hi = naive_bootstrap(diffs, {"mmlu-pro": 0.10, "gpqa": 0.15}, 40_000, seed=3)
    assert ours.lower == pytest.approx(lo, abs=0.01)
    assert ours.upper == pytest.approx(hi, abs=0.01)
    # It is narrower than the conservative Hoeffding interval, which is why it is diagnostic.
    conservative = paired_difference(diffs, R41_WEIGHTS, bootstrap_draws=None)
    assert conservative.upper - conservative.lower > ours.upper - ours.lower


# --- baseline and savings ----------------------------------------------------------------------


def test_highest_exact_quality_wins() -> None:
    choice = select_baseline(
        [
            BaselineCandidate("a", F(1, 3), Decimal(5)),
            BaselineCandidate("b", F(333_333, 1_000_000), Decimal(1)),
        ]
    )
    assert choice.slug == "a"
    assert choice.tied_slugs == ("a",)
    assert choice.savings_known


def test_exact_tie_that_floats_would_break_goes_to_the_cheaper_model() -> None:
    # A: 0.10 + 0.10 + 0.10; B: 0.15 + 0.15. In floats A is 0.30000000000000004 > 0.3.
    qa = weighted_quality(
        {b: F(int(b in {"mmlu-pro", "simpleqa", "arc"})) for b in R41_WEIGHTS}, R41_WEIGHTS
    )
    qb = weighted_quality({b: F(int(b in {"gpqa", "hle"})) for b in R41_WEIGHTS}, R41_WEIGHTS)
    assert 0.1 + 0.1 + 0.1 > 0.15 + 0.15
    assert qa == qb == F(3, 10)
    choice = select_baseline(
        [
            BaselineCandidate("model-a", qa, Decimal("2.00")),
            BaselineCandidate("model-b", qb, Decimal("1.50")),
            BaselineCandidate("model-c", F(1, 10), Decimal("0.01")),
        ]
    )
    assert choice.slug == "model-b"
    assert choice.subject_cost == Decimal("1.50")
    assert choice.tied_slugs == ("model-a", "model-b")
    assert choice.savings_known
    # savings % = 100 × (1 − 0.90 / 1.50) = 40
    assert choice.savings_pct(Decimal("0.90")) == Decimal(40)


def test_equal_cost_tie_goes_to_the_slug_order() -> None:
    choice = select_baseline(
        [
            BaselineCandidate("zeta", F(1, 2), Decimal(1)),
            BaselineCandidate("alpha", F(1, 2), Decimal(1)),
        ]
    )
    assert choice.slug == "alpha"


def test_tied_model_with_incomplete_cost_makes_savings_unknown() -> None:
    choice = select_baseline(
        [
            BaselineCandidate("a-unpriced", F(4, 5), None),
            BaselineCandidate("b-priced", F(4, 5), Decimal(3)),
        ]
    )
    # The model with complete cost is preferred over one without...
    assert choice.slug == "b-priced"
    assert choice.tied_slugs == ("a-unpriced", "b-priced")
    # ...but a tied model with unknown cost might be the cheaper one, so no rate is stated.
    assert not choice.savings_known
    assert choice.savings_pct(Decimal(1)) is None


def test_untied_unpriced_model_does_not_block_savings() -> None:
    choice = select_baseline(
        [BaselineCandidate("best", F(9, 10), Decimal(3)), BaselineCandidate("x", F(1, 2), None)]
    )
    assert choice.savings_known
    # 100 × (1 − 4 / 3) = −100/3: the candidate costs a third more.
    savings = choice.savings_pct(Decimal(4))
    assert savings is not None
    assert abs(savings - Decimal(-100) / 3) < Decimal("1e-25")


def test_baseline_needs_candidates() -> None:
    with pytest.raises(ValueError):
        select_baseline([])


@pytest.mark.parametrize(
    ("candidate", "baseline", "expected"),
    [
        (Decimal("0.6"), Decimal("0.8"), Decimal(25)),  # 100 × (1 − 0.75)
        (Decimal(0), Decimal("0.8"), Decimal(100)),
        (Decimal("1.2"), Decimal("0.8"), Decimal(-50)),  # 100 × (1 − 1.5)
        (None, Decimal("0.8"), None),
        (Decimal("0.6"), None, None),
        (Decimal("0.6"), Decimal(0), None),
    ],
)
def test_savings_percent(
    candidate: Decimal | None, baseline: Decimal | None, expected: Decimal | None
) -> None:
    result = savings_pct(candidate, baseline)
    assert result == expected
    if result is not None:
        assert isinstance(result, Decimal)
