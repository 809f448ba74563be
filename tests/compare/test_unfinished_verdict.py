"""A candidate's cases that never ended do not make it "worse" (an outside probe, 2026-12-06:
a run cancelled before its router was ever called was compared as "worse" with a 98.75%
interval). Such cases have no outcome and are counted wrong in Δ; were they right instead, Δ
would rise by the weight they carry, and "worse" must hold then too (compare/verdict.py). A
failed cell has an outcome — its target was asked — and stays wrong.

Every figure is recomputed here from the constructed outcomes: one benchmark (weight 1), n
questions, one attempt, the Hoeffding half-width sqrt(4 · ln(2/α) / (2n)); each unfinished case
raises Δ by 1/n."""

from __future__ import annotations

import math

import pytest

from compare.services import comparison_compute
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

ALPHA = 0.05
N = 40


def compared(candidate_outcomes: list) -> tuple[str, str, float]:
    """(verdict word, reason, upper bound) of a candidate with these outcomes against a
    baseline right on every question."""
    tag = next(b._seq)
    qs = b.questions({"mmlu-pro": N})
    baseline = b.run(qs, {b.target(f"ubase-{tag}"): [True] * N})
    router = b.target(f"urouter-{tag}", kind="mom")
    candidate = b.run(qs, {router: candidate_outcomes}, status="cancelled")
    (result,) = comparison_compute(
        baseline_run_id=baseline.pk, candidate_run_ids=[candidate.pk]
    ).candidates
    return result.verdict.word, result.verdict.reason, result.verdict.upper


def independent_upper(candidate_outcomes: list) -> tuple[float, float]:
    """(upper bound of Δ's interval, Δ's rise were the unfinished cases right)."""
    delta = sum(int(o is True) - 1 for o in candidate_outcomes) / N
    r = math.sqrt(4 * math.log(2 / ALPHA) / (2 * N))
    rise = sum(o == "cancelled" for o in candidate_outcomes) / N
    return delta + r, rise


def test_a_candidate_never_asked_is_not_worse():
    outcomes = ["cancelled"] * N
    upper, rise = independent_upper(outcomes)
    assert upper < 0 < upper + rise  # worse as counted, not were its cases right
    word, reason, got_upper = compared(outcomes)
    assert word == "inconclusive", reason
    assert got_upper == pytest.approx(upper)
    assert f"{N} of the candidate's cases never ended" in reason
    assert f"rise by {rise:.4f}" in reason and "worse is not shown" in reason


def test_a_few_unfinished_cases_leave_a_clear_worse_worse():
    outcomes = [False] * (N - 2) + ["cancelled"] * 2
    upper, rise = independent_upper(outcomes)
    assert upper + rise < 0
    word, reason, _ = compared(outcomes)
    assert word == "worse", reason


def test_unfinished_cases_that_could_lift_the_interval_past_zero_block_worse():
    # Δ = −1 and its upper bound ≈ −0.57 whatever the mix; 16 wrong and 24 never ended: a
    # rise of 0.6 would lift the interval past 0 (20 and 20, a rise of 0.5, would not).
    outcomes = [False] * 16 + ["cancelled"] * 24
    upper, rise = independent_upper(outcomes)
    assert upper < 0 < upper + rise
    word, reason, _ = compared(outcomes)
    assert word == "inconclusive", reason


def test_failed_cells_were_asked_and_stay_wrong():
    outcomes = [None] * N  # every call failed: the target was asked
    upper, _ = independent_upper([False] * N)
    assert upper < 0
    word, reason, _ = compared(outcomes)
    assert word == "worse", reason
