"""The question is the statistical unit (issue 21 point 1; DESIGN §6; SPEC R5, R6).

With several attempt slots per question, every interval counts questions, never cells: a
question's score is the mean over its attempts (a failed or unfinished attempt counts as wrong,
as in the accuracy), n and n_b are numbers of questions, and the bootstraps resample questions.
Every expected value here is recomputed from the formulas of docs/statistics.md with a few
lines of plain Python (exact fractions, ``math``), never by calling the product's functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from compare.services import comparison_build
from datasets.models import Question
from runs.models import Call, Cell, Run, Target
from runs.reporting.report import run_report
from srbench.stats import (
    paired_difference,
    paired_differences,
    question_differences,
    stratified_bootstrap_interval,
    wilson_interval,
)
from tests import factories as f
from tests.compare import builders as b

F = Fraction
Z = 1.959963984540054
WEIGHT = {"mmlu-pro": F(10, 100), "gpqa": F(15, 100), "arc": F(10, 100)}

# An attempt outcome: True/False a completed cell, None a failed one, "pending" an unfinished one.
Attempt = bool | None | str


# --- independent formulas -----------------------------------------------------------------------


def wilson(successes: float, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson score interval from the textbook closed form, p̂ = successes / n."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def question_score(attempts: Sequence[Attempt]) -> Fraction:
    """A question's score: the share of its planned attempts that are correct."""
    return F(sum(1 for a in attempts if a is True), len(attempts))


def hoeffding(sizes: dict[str, int], alpha: float = 0.05) -> float:
    total = sum(WEIGHT[k] for k in sizes)
    return math.sqrt(
        2 * math.log(2 / alpha) * sum(float((WEIGHT[k] / total) ** 2) / n for k, n in sizes.items())
    )


def question_delta(
    bench: list[str], cand: list[list[Attempt]], base: list[list[Attempt]]
) -> Fraction:
    """Δ = Σ_b w_b · mean over the questions of b of (candidate score − baseline score)."""
    sizes = {k: bench.count(k) for k in dict.fromkeys(bench)}
    total = sum(WEIGHT[k] for k in sizes)
    out = F(0)
    for k, n in sizes.items():
        gap = sum(
            (
                question_score(c) - question_score(x)
                for c, x, kk in zip(cand, base, bench, strict=True)
                if kk == k
            ),
            F(0),
        )
        out += WEIGHT[k] / total * gap / n
    return out


# --- constructed runs with several attempt slots ------------------------------------------------


def slotted_run(
    qs: Sequence[Question],
    outcomes: dict[Target, list[list[Attempt]]],
    *,
    costs: dict[Target, Sequence[Decimal]] | None = None,
    status: str = "completed",
) -> Run:
    """A run whose plan has ``len(outcomes[t][i])`` attempt slots per question; every
    completed or failed cell gets one subject call costing ``costs[t][slot]`` (0.001 USD by
    default)."""
    targets = list(outcomes)
    slots = len(outcomes[targets[0]][0])
    doc = b.manifest(qs, targets, slots=slots)
    run = f.run_create(
        manifest=doc,
        status=status,
        dataset=f.dataset_create(split="dev"),
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )

    def state(a: Attempt) -> str:
        return "pending" if a == "pending" else "failed" if a is None else "completed"

    cells = Cell.objects.bulk_create(
        Cell(
            run=run,
            question=q,
            target=t,
            slot=s,
            benchmark=q.benchmark,
            status=state(a),
            correct=a if isinstance(a, bool) else None,
            scored=isinstance(a, bool),
            final_answer="The answer is B" if a is True else "The answer is A",
        )
        for t in targets
        for i, q in enumerate(qs)
        for s, a in enumerate(outcomes[t][i])
    )
    now = timezone.now()

    def cost(cell: Cell) -> Decimal:
        return (costs or {}).get(cell.target, [Decimal("0.001")] * slots)[cell.slot]

    f.calls_insert(
        list(
            Call(
                cell=cell,
                target=cell.target,
                role="subject",
                sequence=0,
                request={"model": cell.target.model},
                status="completed",
                sent_at=now,
                served_model=cell.target.model,
                finish_reason="stop",
                input_tokens=100,
                cached_input_tokens=0,
                cache_write_tokens=0,
                output_tokens=10,
                cost_usd=cost(cell),
                cache_neutral_cost_usd=cost(cell),
                duration_ms=100.0,
                ttft_ms=10.0,
            )
            for cell in cells
            if cell.status != "pending"
        )
    )
    return run


def target_block(report: dict[str, Any], slug: str) -> dict[str, Any]:
    return next(t for t in report["targets"] if t["slug"] == slug)


# --- (a) the example: 14 questions × 3 identical attempts, 12 right ---------------------


def test_wilson_on_repeated_identical_attempts_counts_questions_not_cells() -> None:
    """R5/R6, DESIGN §6: 36/42 cells from 14 deterministic questions is 12/14, not 36/42."""
    cells = np.repeat([1] * 12 + [0] * 2, 3)  # question-major, three identical attempts each
    per_question = cells.reshape(14, 3).sum(axis=1)
    score_sum = sum((F(int(c), 3) for c in per_question), F(0))
    got = wilson_interval(score_sum, 14)
    assert got is not None
    assert got == pytest.approx(wilson(12, 14), abs=1e-9)
    assert got == pytest.approx((0.601, 0.960), abs=5e-4)  # the figures quoted in issue 21
    # The cell-as-unit interval the old code gave is visibly narrower: this test fails on it.
    assert wilson(36, 42) == pytest.approx((0.722, 0.933), abs=5e-4)
    assert got[1] - got[0] > wilson(36, 42)[1] - wilson(36, 42)[0] + 0.1


@pytest.mark.django_db
def test_report_interval_of_repeated_identical_attempts_is_the_question_wilson() -> None:
    """R5, DESIGN §6: through the real report; accuracy stays correct/planned = 36/42."""
    qs = b.questions({"mmlu-pro": 14})
    model = b.target("det")
    run = slotted_run(qs, {model: [[i < 12] * 3 for i in range(14)]})

    entry = target_block(run_report(run=run), "det")["benchmarks"]["mmlu-pro"]

    assert (entry["planned"], entry["correct"], entry["questions"]) == (42, 36, 14)
    assert entry["accuracy"] == float(F(36, 42))
    assert entry["wilson_95"] == pytest.approx(list(wilson(12, 14)), abs=1e-9)
    assert entry["wilson_95"] != pytest.approx(list(wilson(36, 42)), abs=1e-3)


# --- (b) one attempt per question: nothing changes ----------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(0, 7), (3, 7), (7, 7), (12, 14), (1, 1), (40, 97)])
def test_one_attempt_per_question_is_the_plain_wilson_interval(k: int, n: int) -> None:
    """R5: a Fraction sum of one-attempt question scores is exactly the integer count."""
    assert wilson_interval(F(k), n) == wilson_interval(k, n)
    got = wilson_interval(k, n)
    assert got is not None
    exp_lo, exp_hi = wilson(k, n)
    assert got == pytest.approx((0.0 if k == 0 else exp_lo, 1.0 if k == n else exp_hi), abs=1e-12)


def test_one_attempt_per_question_keeps_the_cell_level_paired_result() -> None:
    """R6.1: with one attempt a question is a case: Δ, n_b, r and the bootstrap are as before."""
    rng = np.random.default_rng(5)
    cand, base = rng.integers(0, 2, 30), rng.integers(0, 2, 30)
    d = question_differences(cand, base, 1)
    assert d.tolist() == paired_differences(cand, base).tolist()
    diffs = {"mmlu-pro": d[:18], "gpqa": d[18:]}
    result = paired_difference(diffs, WEIGHT)
    total = WEIGHT["mmlu-pro"] + WEIGHT["gpqa"]
    delta = WEIGHT["mmlu-pro"] / total * F(int((cand[:18] - base[:18]).sum()), 18) + WEIGHT[
        "gpqa"
    ] / total * F(int((cand[18:] - base[18:]).sum()), 12)
    assert result.delta == delta
    assert [x.n for x in result.benchmarks] == [18, 12]
    assert result.half_width == pytest.approx(hoeffding({"mmlu-pro": 18, "gpqa": 12}), abs=1e-12)
    # The bootstrap draws exactly the multinomials it drew before questions were the unit.
    draws, seed = 500, 20260918
    rng = np.random.default_rng(seed)
    est = np.zeros(draws)
    for k in sorted(diffs):
        x = diffs[k]
        shares = np.array([np.count_nonzero(x == v) for v in (-1, 0, 1)]) / x.size
        counts = rng.multinomial(x.size, shares, size=draws)
        est += float(WEIGHT[k] / total) * (counts[:, 2] - counts[:, 0]) / x.size
    boot = stratified_bootstrap_interval(diffs, WEIGHT, draws=draws, seed=seed)
    assert (boot.lower, boot.upper) == tuple(np.quantile(est, [0.025, 0.975]))


@pytest.mark.django_db
def test_report_with_one_attempt_per_question_is_unchanged() -> None:
    """R5: one slot: the report's interval is Wilson(correct, planned), the old value."""
    qs = b.questions({"gpqa": 9})
    model = b.target("one")
    outcome: list[list[Attempt]] = [
        [x] for x in (True, False, True, None, True, True, False, True, True)
    ]
    run = slotted_run(qs, {model: outcome})

    entry = target_block(run_report(run=run), "one")["benchmarks"]["gpqa"]

    assert (entry["planned"], entry["correct"], entry["questions"]) == (9, 6, 9)
    assert entry["wilson_95"] == pytest.approx(list(wilson(6, 9)), abs=1e-12)


# --- (c) paired Δ, Hoeffding and bootstraps on repeated attempts --------------------------------


def mixed_outcomes(rng: np.random.Generator, n: int, slots: int, p: float) -> list[list[Attempt]]:
    """Attempts that mostly agree within a question (a question is easy or hard), with the odd
    disagreement and the odd failed attempt (None, counted wrong)."""
    out: list[list[Attempt]] = []
    for _ in range(n):
        easy = bool(rng.random() < p)
        row: list[Attempt] = []
        for _ in range(slots):
            u = rng.random()
            row.append(None if u < 0.05 else (not easy) if u < 0.2 else easy)
        out.append(row)
    return out


@pytest.mark.django_db
def test_paired_delta_and_hoeffding_radius_count_questions_on_repeated_attempts() -> None:
    """R6.1, R6.2, DESIGN §6: Δ pairs question scores; n_b, r, the family-wise interval and
    the bootstrap count questions, not the three cells of each."""
    slots = 3
    qs = b.questions({"mmlu-pro": 11, "gpqa": 7})
    bench = [q.benchmark for q in qs]
    rng = np.random.default_rng(21)
    base_o = mixed_outcomes(rng, 18, slots, 0.5)
    cand_o = mixed_outcomes(rng, 18, slots, 0.7)
    base, cand = b.target("base"), b.target("cand", kind="mom")
    base_o = [[bool(a) for a in row] for row in base_o]  # the baseline needs every result
    run = slotted_run(qs, {base: base_o, cand: cand_o})
    other = b.target("other", kind="mom")
    run2 = slotted_run(qs, {base: base_o, other: [[True] * slots for _ in qs]})

    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk, run2.pk])
    c = next(x for x in doc["comparisons"] if x["target"] == "cand")

    sizes = {"mmlu-pro": 11, "gpqa": 7}  # questions, not 33 and 21 cells
    delta = question_delta(bench, cand_o, base_o)
    half = hoeffding(sizes)
    assert (c["cases"], c["questions"], c["attempts_per_question"]) == (54, 18, 3)
    assert F(c["delta_exact"]) == delta
    gaps = [question_score(x) - question_score(y) for x, y in zip(cand_o, base_o, strict=True)]
    assert F(c["micro_delta_exact"]) == sum(gaps, F(0)) / 18
    assert {x["benchmark"]: x["n"] for x in c["benchmarks"]} == sizes
    assert c["interval"]["half_width"] == pytest.approx(half, abs=1e-9)
    assert c["interval"]["lower"] == pytest.approx(float(delta) - half, abs=1e-9)
    assert c["interval"]["upper"] == pytest.approx(float(delta) + half, abs=1e-9)
    # The cell-as-unit radius (n_b = 33 and 21) is narrower; this test fails on it.
    assert half > hoeffding({"mmlu-pro": 33, "gpqa": 21}) + 0.05
    # Family-wise (Bonferroni over the three candidates: cand, and base and other of run2)
    # with the same question counts.
    fam = c["family_interval"]
    assert fam["family_size"] == len(doc["comparisons"]) == 3
    assert fam["half_width"] == pytest.approx(hoeffding(sizes, 0.05 / 3), abs=1e-9)
    # Wins, losses and ties count questions by the sign of the score gap.
    assert (c["wins"], c["losses"], c["ties"]) == (
        sum(g > 0 for g in gaps),
        sum(g < 0 for g in gaps),
        sum(g == 0 for g in gaps),
    )
    assert c["wins"] + c["losses"] + c["ties"] == 18
    # The diagnostic bootstrap resamples whole questions: compare with a plain resampling of
    # question indices (a different generator, so only to Monte Carlo precision).
    lo, hi = naive_question_bootstrap(bench, gaps, draws=40_000, seed=3)
    got = stratified_bootstrap_interval(
        {
            k: np.array([int(g * slots) for g, kk in zip(gaps, bench, strict=True) if kk == k])
            for k in sizes
        },
        WEIGHT,
        draws=40_000,
        attempts=slots,
    )
    assert (got.lower, got.upper) == pytest.approx((lo, hi), abs=0.01)
    assert (c["bootstrap"]["lower"], c["bootstrap"]["upper"]) == pytest.approx((lo, hi), abs=0.03)
    # The CSV export carries the unit, so an auditor recomputes n_b from it (docs/statistics.md).
    import csv
    import io

    from compare.api import comparison_csv

    row = next(r for r in csv.DictReader(io.StringIO(comparison_csv(doc))) if r["target"] == "cand")
    assert (row["cases"], row["questions"], row["attempts_per_question"]) == ("54", "18", "3")


def naive_question_bootstrap(
    bench: list[str], gaps: list[Fraction], draws: int, seed: int
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    sizes = {k: bench.count(k) for k in dict.fromkeys(bench)}
    total = sum(WEIGHT[k] for k in sizes)
    est = np.zeros(draws)
    for k in sizes:
        x = np.array([float(g) for g, kk in zip(gaps, bench, strict=True) if kk == k])
        idx = rng.integers(0, x.size, size=(draws, x.size))
        est += float(WEIGHT[k] / total) * x[idx].mean(axis=1)
    low, high = np.quantile(est, [0.025, 0.975])
    return float(low), float(high)


def test_identical_attempts_give_the_interval_of_the_questions_alone() -> None:
    """R6.1: asking each question three times with the same outcome changes no statistic."""
    rng = np.random.default_rng(9)
    cand, base = rng.integers(0, 2, 20), rng.integers(0, 2, 20)
    once = paired_difference({"arc": cand - base}, WEIGHT, bootstrap_draws=None)
    thrice = paired_difference(
        {"arc": question_differences(np.repeat(cand, 3), np.repeat(base, 3), 3)},
        WEIGHT,
        bootstrap_draws=None,
        attempts=3,
    )
    assert thrice.delta == once.delta == F(int((cand - base).sum()), 20)
    assert (
        thrice.half_width
        == once.half_width
        == pytest.approx(math.sqrt(2 * math.log(40) / 20), abs=1e-12)
    )
    assert (thrice.wins, thrice.losses, thrice.ties) == (once.wins, once.losses, once.ties)


@pytest.mark.django_db
def test_savings_bootstrap_resamples_questions_with_their_attempts() -> None:
    """R5.4, R6.2: the savings interval resamples questions; each question's attempts are
    summed first. Every question costs the baseline 0.001 + 0.003 and the candidate
    0.002 + 0.002 USD, so every resample of questions has savings exactly 0: a zero-width
    interval at 0. Resampling cells (the old unit) would pair 0.001 with 0.002 and 0.003
    with 0.002 in varying numbers and give a wide interval."""
    qs = b.questions({"arc": 6})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    d = Decimal
    run = slotted_run(
        qs,
        {base: [[True, False]] * 6, cand: [[True, True]] * 6},
        costs={base: [d("0.001"), d("0.003")], cand: [d("0.002"), d("0.002")]},
    )

    c = only_target(comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk]), "cand")

    assert Decimal(c["savings"]["subject_cost_pct"]) == 0
    assert c["savings_interval"]["lower"] == pytest.approx(0.0, abs=1e-9)
    assert c["savings_interval"]["upper"] == pytest.approx(0.0, abs=1e-9)


def only_target(doc: dict[str, Any], slug: str) -> dict[str, Any]:
    (c,) = [x for x in doc["comparisons"] if x["target"] == slug]
    return c


# --- (d) end to end through the report with uneven attempts -------------------------------------


@pytest.mark.django_db
def test_report_interval_is_the_question_level_wilson_with_failed_and_unfinished_attempts() -> None:
    """R5, DESIGN §6: attempts that disagree, a failed attempt (wrong) and a pending one (wrong,
    as in the accuracy): p̂ = mean question score, n = questions."""
    qs = b.questions({"hle": 8, "arc": 5})
    model = b.target("mix")
    hle: list[list[Attempt]] = [
        [True, True, True],
        [True, False, True],
        [False, False, True],
        [None, True, True],
        [False, False, False],
        ["pending", True, False],
        [True, True, True],
        [False, None, "pending"],
    ]
    arc: list[list[Attempt]] = [[True, True, True]] * 4 + [[True, False, False]]
    run = slotted_run(qs, {model: hle + arc}, status="failed")

    report = target_block(run_report(run=run), "mix")

    for key, rows in (("hle", hle), ("arc", arc)):
        entry = report["benchmarks"][key]
        scores = [question_score(r) for r in rows]
        correct = sum(1 for r in rows for a in r if a is True)
        assert entry["accuracy"] == float(F(correct, 3 * len(rows)))
        assert entry["questions"] == len(rows)
        expected = wilson(float(sum(scores, F(0))), len(rows))
        assert entry["wilson_95"] == pytest.approx(list(expected), abs=1e-9)
    # The cell-as-unit interval (n = 24 cells) is narrower; this test fails on it.
    old = wilson(13, 24)
    assert (
        report["benchmarks"]["hle"]["wilson_95"][1] - report["benchmarks"]["hle"]["wilson_95"][0]
        > old[1] - old[0] + 0.05
    )
