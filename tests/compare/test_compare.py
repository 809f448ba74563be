"""Comparisons on constructed runs. Every Δ, interval, savings rate and verdict is recomputed
here from the formulas (DESIGN §6, SPEC R5, R6) with exact fractions or a few lines of numpy."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from compare.compatibility import IncomparableRuns, baseline_refusal, runs_differences
from compare.results import STATEMENTS
from compare.selectors import comparable_pool
from compare.services import ComparisonError, comparison_build
from runs.models import CELL_OUTCOMES, CellStatus, UsageCorrection
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

F = Fraction
D = Decimal
WEIGHT = {"mmlu-pro": F(10, 100), "gpqa": F(15, 100), "arc": F(10, 100)}


def hoeffding(sizes: dict[str, int], alpha: float = 0.05) -> float:
    total = sum(WEIGHT[k] for k in sizes)
    return math.sqrt(
        2 * math.log(2 / alpha) * sum(float((WEIGHT[k] / total) ** 2) / n for k, n in sizes.items())
    )


def exact_delta(bench: list[str], cand: list[bool | None], base: list[bool | None]) -> Fraction:
    sizes = {k: bench.count(k) for k in dict.fromkeys(bench)}
    total = sum(WEIGHT[k] for k in sizes)
    out = F(0)
    for k, n in sizes.items():
        diff = sum(
            int(bool(c)) - int(bool(x))
            for c, x, kk in zip(cand, base, bench, strict=True)
            if kk == k
        )
        out += WEIGHT[k] / total * F(diff, n)
    return out


def only(doc: dict) -> dict:
    (c,) = doc["comparisons"]
    return c


# --- intervals and Δ -------------------------------------------------------------------------


def test_identical_pairs_give_zero_delta_with_a_hoeffding_interval_that_keeps_its_width():
    qs = b.questions({"mmlu-pro": 6, "gpqa": 4})
    outcome = [True, False, True, True, False, True, False, False, True, True]
    base, cand = b.target("base"), b.target("cand")
    r = b.run(qs, {base: outcome, cand: outcome})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    r_expected = hoeffding({"mmlu-pro": 6, "gpqa": 4})
    assert c["delta_exact"] == "0" and c["micro_delta_exact"] == "0"
    assert c["interval"]["lower"] == pytest.approx(-r_expected)
    assert c["interval"]["upper"] == pytest.approx(r_expected)
    assert c["interval"]["half_width"] > 0
    assert (c["wins"], c["losses"], c["ties"]) == (0, 0, 10)
    assert c["improvement"] is False and c["not_an_improvement"] is None
    assert (c["bootstrap"]["lower"], c["bootstrap"]["upper"]) == (0.0, 0.0)
    assert c["bootstrap"]["label"] == "diagnostic only"


def test_all_wrong_on_both_sides_still_has_a_nonzero_interval():
    qs = b.questions({"arc": 5})
    base, cand = b.target("base"), b.target("cand")
    r = b.run(qs, {base: [False] * 5, cand: [False] * 5})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert c["quality"] == 0.0 and c["delta"] == 0.0
    # One benchmark: the renormalised weight is 1, so r = sqrt(2 ln(2/α) / n).
    assert c["interval"]["half_width"] == pytest.approx(math.sqrt(2 * math.log(40) / 5))
    assert c["interval"]["clipped"] is True  # ±1.22 reaches past [−1, 1]
    assert c["interval"]["display_lower"] == -1.0 and c["interval"]["display_upper"] == 1.0


def test_one_benchmark_only_uses_its_whole_weight():
    qs = b.questions({"gpqa": 8})
    base_o = [True, True, False, False, True, False, True, False]
    cand_o = [True, False, True, True, True, True, True, False]
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(qs, {base: base_o, cand: cand_o})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert F(c["delta_exact"]) == F(sum(cand_o) - sum(base_o), 8)
    assert c["interval"]["half_width"] == pytest.approx(math.sqrt(2 * math.log(40) / 8))
    assert c["benchmarks"][0]["weight"] == "1"
    assert (c["wins"], c["losses"], c["ties"]) == (3, 1, 4)


def test_unequal_benchmark_sizes_weight_each_benchmark_mean_not_each_case():
    qs = b.questions({"mmlu-pro": 7, "gpqa": 13})
    bench = [q.benchmark for q in qs]
    rng = np.random.default_rng(7)
    base_o = [bool(x) for x in rng.integers(0, 2, 20)]
    cand_o = [bool(x) for x in rng.integers(0, 2, 20)]
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(qs, {base: base_o, cand: cand_o})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    delta = exact_delta(bench, cand_o, base_o)
    assert F(c["delta_exact"]) == delta
    assert F(c["micro_delta_exact"]) == F(sum(cand_o) - sum(base_o), 20)
    half = hoeffding({"mmlu-pro": 7, "gpqa": 13})
    assert c["interval"]["lower"] == pytest.approx(float(delta) - half)
    assert c["interval"]["upper"] == pytest.approx(float(delta) + half)
    per = {x["benchmark"]: x for x in c["benchmarks"]}
    assert F(per["mmlu-pro"]["weight"]) == F(10, 25) and F(per["gpqa"]["weight"]) == F(15, 25)
    # Candidate quality minus baseline quality is Δ: both use the same renormalised weights.
    assert F(c["quality_exact"]) - F(comparison_baseline_quality(r)) == delta
    # The bootstrap diagnostic: a plain within-benchmark resampling lands close to it.
    d = np.array(cand_o, dtype=int) - np.array(base_o, dtype=int)
    mask = np.array([k == "mmlu-pro" for k in bench])
    draws = np.random.default_rng(1)
    est = [
        0.4 * draws.choice(d[mask], mask.sum()).mean()
        + 0.6 * draws.choice(d[~mask], (~mask).sum()).mean()
        for _ in range(4000)
    ]
    lo, hi = np.quantile(est, [0.025, 0.975])
    assert c["bootstrap"]["lower"] == pytest.approx(lo, abs=0.06)
    assert c["bootstrap"]["upper"] == pytest.approx(hi, abs=0.06)


def comparison_baseline_quality(r) -> str:  # type: ignore[no-untyped-def]
    return comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])["baseline"][
        "quality_exact"
    ]


def test_positive_estimate_whose_interval_crosses_zero_is_not_an_improvement():
    qs = b.questions({"mmlu-pro": 10})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(qs, {base: [True] * 5 + [False] * 5, cand: [True] * 7 + [False] * 3})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert F(c["delta_exact"]) == F(2, 10)
    assert c["improvement"] is False
    assert "not an improvement" in c["not_an_improvement"]
    assert (
        STATEMENTS["improvement"]
        in comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])["statements"].values()
    )


def test_a_large_clear_gain_is_an_improvement():
    qs = b.questions({"mmlu-pro": 400})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(qs, {base: [False] * 400, cand: [True] * 400})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert c["delta"] == 1.0 and c["improvement"] is True and c["not_an_improvement"] is None


def test_several_candidates_get_a_bonferroni_family_interval():
    qs = b.questions({"mmlu-pro": 9, "arc": 6})
    base = b.target("base")
    c1, c2, c3 = (b.target(s, kind="mom") for s in ("c1", "c2", "c3"))
    out = [True, False] * 7 + [True]
    r = b.run(qs, {base: out, c1: out, c2: out[::-1], c3: [True] * 15})

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])

    assert doc["family_size"] == 3
    for c in doc["comparisons"]:
        fam = c["family_interval"]
        assert fam["alpha"] == pytest.approx(0.05 / 3)
        assert fam["half_width"] == pytest.approx(hoeffding({"mmlu-pro": 9, "arc": 6}, 0.05 / 3))
        assert fam["half_width"] > c["interval"]["half_width"]


# --- failed and missing cases ------------------------------------------------------------------


def test_failed_candidate_cases_count_as_wrong():
    qs = b.questions({"mmlu-pro": 4})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(qs, {base: [True, True, False, False], cand: [None, True, None, True]})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert F(c["delta_exact"]) == F(0)  # (0+1+0+1) − (1+1+0+0)
    assert c["cases_without_result"] == 0  # failed cells have an outcome: wrong
    assert (c["wins"], c["losses"]) == (1, 1)


def test_a_single_model_with_failed_cells_is_still_a_baseline_but_pending_ones_are_not():
    """The comparison's baseline pool and the Compare page's offer of baseline targets apply
    one rule (compatibility.baseline_refusal) and agree, before and after a cell loses its
    outcome."""
    qs = b.questions({"mmlu-pro": 3})
    strong, weak = b.target("strong"), b.target("weak")
    r = b.run(qs, {strong: [True, True, None], weak: [True, False, False]})
    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])
    assert doc["baseline"]["target"] == "strong"
    assert comparable_pool()[r.pk].baseline_targets == ("strong", "weak")

    r.cells.filter(target=strong, correct__isnull=True).update(status="sent_unknown")
    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])
    assert doc["baseline"]["target"] == "weak"
    listed = {x["target"]: x for x in doc["baseline"]["candidates"]}
    assert listed["strong"]["eligible"] is False
    assert "1 case(s) without a result" in listed["strong"]["reason"]
    assert comparable_pool()[r.pk].baseline_targets == ("weak",)


def test_the_baseline_rule_names_the_first_thing_that_keeps_a_target_out():
    """R5.1 in one function: a single model, planned on every case, an outcome for each."""
    assert baseline_refusal(kind="mom", planned=3, with_outcome=3, cases=3) == "not a single model"
    assert baseline_refusal(kind="single", planned=2, with_outcome=2, cases=3) == (
        "2 cells planned for 3 cases"
    )
    assert baseline_refusal(kind="single", planned=3, with_outcome=1, cases=3) == (
        "2 case(s) without a result"
    )
    assert baseline_refusal(kind="single", planned=3, with_outcome=3, cases=3) is None
    # An outcome is completed or failed; every other cell state is a case without a result.
    assert set(CELL_OUTCOMES) == {CellStatus.COMPLETED, CellStatus.FAILED}


# --- baseline, ties and savings ----------------------------------------------------------------


def test_baseline_is_the_strongest_single_model_not_the_router():
    qs = b.questions({"mmlu-pro": 4})
    strong, weak, router = b.target("strong"), b.target("weak"), b.target("router", kind="mom")
    r = b.run(
        qs,
        {
            strong: [True, True, True, False],
            weak: [True, False, False, False],
            router: [True, True, True, True],
        },
    )

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])

    assert doc["baseline"]["target"] == "strong"
    assert F(doc["baseline"]["quality_exact"]) == F(3, 4)
    assert [c["target"] for c in doc["comparisons"]] == ["router", "weak"]


def test_exact_quality_tie_prefers_the_cheaper_model_and_lists_every_tied_one():
    qs = b.questions({"mmlu-pro": 4, "gpqa": 2})
    # Same weighted quality through different cases: 2/4 on mmlu-pro and 1/2 on gpqa each.
    pricey, cheap = b.target("a-pricey"), b.target("z-cheap")
    router = b.target("router", kind="mom")
    r = b.run(
        qs,
        {
            pricey: [True, True, False, False, True, False],
            cheap: [False, False, True, True, False, True],
            router: [True, True, True, False, True, False],
        },
        costs={pricey: D("0.004"), cheap: D("0.001"), router: D("0.0005")},
    )

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])

    base = doc["baseline"]
    assert base["target"] == "z-cheap"  # the cheaper wins although "a-pricey" sorts first
    assert base["tied"] == ["a-pricey", "z-cheap"] and base["savings_known"] is True
    assert D(base["subject_cost_usd"]) == D("0.006")
    router_row = next(c for c in doc["comparisons"] if c["target"] == "router")
    # savings % = 100 × (1 − candidate / baseline) on the subject costs: 6 × 0.0005 vs 6 × 0.001.
    assert D(router_row["savings"]["subject_cost_pct"]) == 100 * (1 - D("0.003") / D("0.006"))
    pricey_row = next(c for c in doc["comparisons"] if c["target"] == "a-pricey")
    assert D(pricey_row["savings"]["subject_cost_pct"]) == D(-300)


def test_equal_quality_and_cost_fall_back_to_the_slug_order():
    qs = b.questions({"arc": 2})
    t_b, t_a = b.target("bbb"), b.target("aaa")
    r = b.run(qs, {t_b: [True, False], t_a: [False, True]})

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])

    assert doc["baseline"]["target"] == "aaa" and doc["baseline"]["tied"] == ["aaa", "bbb"]


def test_a_tied_strongest_model_with_incomplete_cost_makes_savings_unknown():
    qs = b.questions({"mmlu-pro": 2})
    known, unknown = b.target("known"), b.target("unknown")
    router = b.target("router", kind="mom")
    r = b.run(
        qs,
        {known: [True, False], unknown: [False, True], router: [True, False]},
        costs={known: D("0.002"), unknown: [D("0.001"), None], router: D("0.0001")},
    )

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])

    assert doc["baseline"]["target"] == "known"  # complete cost before incomplete
    assert doc["baseline"]["savings_known"] is False
    row = next(c for c in doc["comparisons"] if c["target"] == "router")
    assert row["savings"]["subject_cost_pct"] is None
    assert row["savings"]["cache_neutral_pct"] is None
    assert "incomplete cost" in row["savings"]["subject_cost_unknown_reason"]


def test_cache_neutral_savings_sit_beside_the_measured_savings_with_their_label():
    qs = b.questions({"mmlu-pro": 2})
    base, router = b.target("base"), b.target("router", kind="mom")
    r = b.run(
        qs,
        {base: [True, True], router: [True, True]},
        costs={base: D("0.01"), router: D("0.002")},
        neutral={base: D("0.01"), router: D("0.008")},
    )

    row = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert D(row["savings"]["subject_cost_pct"]) == D(80)
    assert D(row["savings"]["cache_neutral_pct"]) == D(20)
    assert (
        "neither a bill nor a measured cache-free execution"
        in row["savings"]["cache_neutral_label"]
    )


def test_candidate_with_incomplete_cost_has_unknown_savings():
    qs = b.questions({"mmlu-pro": 2})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(qs, {base: [True, True], cand: [True, True]}, costs={cand: [D("0.001"), None]})

    row = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert row["savings"]["subject_cost_pct"] is None
    assert row["savings"]["subject_cost_unknown_reason"] == "the candidate's cost is incomplete"
    assert row["usage"]["known_cost_usd"] == "0.001"


def test_baseline_target_may_only_pick_among_the_tied_strongest():
    qs = b.questions({"arc": 2})
    a, bb, weak = b.target("aa"), b.target("bb"), b.target("weak")
    r = b.run(qs, {a: [True, False], bb: [False, True], weak: [False, False]})

    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk], baseline_target="bb")
    assert doc["baseline"]["target"] == "bb"
    with pytest.raises(ComparisonError, match="not among the strongest"):
        comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk], baseline_target="weak")


# --- across runs -------------------------------------------------------------------------------


def test_candidate_runs_are_paired_with_the_baseline_by_question_and_slot():
    qs = b.questions({"mmlu-pro": 5})
    base = b.target("base")
    router = b.target("router", kind="mom")
    baseline_run = b.run(qs, {base: [True, True, False, False, True]})
    # The candidate run lists the same cases in another order: pairing is by question.
    cand_run = b.run(
        qs[::-1],
        {router: [True, True, False, True, True]},  # reversed order: q5..q1
    )

    c = only(comparison_build(baseline_run_id=baseline_run.pk, candidate_run_ids=[cand_run.pk]))

    cand_in_q_order = [True, True, False, True, True][::-1]
    assert F(c["delta_exact"]) == F(sum(cand_in_q_order) - sum([True, True, False, False, True]), 5)
    assert (c["wins"], c["losses"]) == (
        sum(1 for x, y in zip(cand_in_q_order, [1, 1, 0, 0, 1], strict=True) if x and not y),
        sum(1 for x, y in zip(cand_in_q_order, [1, 1, 0, 0, 1], strict=True) if y and not x),
    )


def test_incompatible_runs_are_refused_with_every_difference_listed():
    qs = b.questions({"mmlu-pro": 3})
    base = b.target("base")
    baseline_run = b.run(qs, {base: [True] * 3})
    benchmarks = b.manifest(qs, [base])["benchmarks"]
    benchmarks["mmlu-pro"]["grader_version"] = "mcq-strict/2"
    dearer = {"m-strong": {"input": "3", "cached_input": "0.3", "output": "16"}}
    other = b.run(
        qs[:2] + b.questions({"mmlu-pro": 1}),
        {b.target("router", kind="mom", prices=dearer): [True] * 3},
        sampling={"temperature": 0.7},
        limits={"concurrency": 8, "max_output_tokens": 1024},
        benchmarks=benchmarks,
    )

    with pytest.raises(IncomparableRuns) as caught:
        comparison_build(baseline_run_id=baseline_run.pk, candidate_run_ids=[other.pk])

    texts = [d.text for d in caught.value.differences]
    fields = {d.field for d in caught.value.differences}
    assert "sampling.temperature" in fields
    assert "limits.max_output_tokens" in fields
    assert "benchmarks.mmlu-pro.grader_version" in fields
    assert "prices[m-strong].output" in fields
    assert any(t.startswith("cases: 1 case(s) only in the baseline and 1 only") for t in texts)
    assert "0 in the baseline, 0.7 in the candidate" in " ".join(texts)


def test_preview_runs_are_never_comparable():
    qs = b.questions({"arc": 2})
    base, cand = b.target("base"), b.target("cand")
    live = b.run(qs, {base: [True, True]})
    preview = b.run(qs, {cand: [True, True]}, mode="preview")

    with pytest.raises(IncomparableRuns, match="preview runs are never comparable"):
        comparison_build(baseline_run_id=live.pk, candidate_run_ids=[preview.pk])
    assert runs_differences(preview, preview)  # not even with itself


def test_a_running_run_is_refused():
    qs = b.questions({"arc": 2})
    base = b.target("base")
    r = b.run(qs, {base: [True, True], b.target("x"): [True, False]}, status="running")
    with pytest.raises(IncomparableRuns, match="not final"):
        comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])


# --- non-inferiority ---------------------------------------------------------------------------


def _parity_run(split: str, margin: str | None, n: int = 400):  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": n})
    base, cand = (
        b.target(f"base-{split}-{margin or 0}"),
        b.target(f"cand-{split}-{margin or 0}", kind="mom"),
    )
    out = [True] * (n // 2) + [False] * (n - n // 2)
    extra = {} if margin is None else {"non_inferiority_margin": margin}
    return b.run(qs, {base: out, cand: out}, split=split, **extra)


def test_non_inferiority_is_shown_only_with_a_fixed_margin_on_holdout_cases():
    holdout = _parity_run("holdout", "0.2")
    c = only(comparison_build(baseline_run_id=holdout.pk, candidate_run_ids=[holdout.pk]))
    r = math.sqrt(2 * math.log(40) / 400)  # 0.136 < 0.2
    assert c["non_inferiority"]["lower_bound"] == pytest.approx(-r)
    assert c["non_inferiority"]["verdict"] == "non-inferior"

    tight = _parity_run("holdout", "0.1")
    c = only(comparison_build(baseline_run_id=tight.pk, candidate_run_ids=[tight.pk]))
    assert c["non_inferiority"]["verdict"] == "not shown"

    dev = _parity_run("dev", "0.2")
    c = only(comparison_build(baseline_run_id=dev.pk, candidate_run_ids=[dev.pk]))
    assert c["non_inferiority"]["verdict"] == "not shown"
    assert "holdout" in c["non_inferiority"]["reason"]

    none = _parity_run("holdout", None)
    c = only(comparison_build(baseline_run_id=none.pk, candidate_run_ids=[none.pk]))
    assert c["non_inferiority"]["verdict"] == "not shown"
    assert "no non-inferiority margin" in c["non_inferiority"]["reason"]


def test_every_comparison_carries_the_fixed_statements():
    qs = b.questions({"arc": 2})
    r = b.run(qs, {b.target("x"): [True, True], b.target("y"): [True, False]})
    doc = comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk])
    assert "choosing the strongest baseline" in doc["statements"]["intervals_scope"]
    assert "contamination" in doc["statements"]["intervals_scope"]
    assert "Small samples show direction only" in doc["statements"]["small_samples"]
    assert doc["model_requests"] == 0
    json.dumps(doc)  # JSON-serialisable as it stands


# --- effective usage -----------------------------------------------------------------------


def test_comparison_reads_the_effective_usage_of_the_latest_correction():
    qs = b.questions({"mmlu-pro": 2})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    r = b.run(
        qs, {base: [True, True], cand: [True, True]}, costs={base: D("0.01"), cand: D("0.01")}
    )
    cand_calls = list(r.cells.filter(target=cand).values_list("calls__pk", flat=True))
    UsageCorrection.objects.create(
        run=r,
        version=1,
        evidence_sha256="e" * 64,
        verified_count=2,
        changed_count=2,
        unverifiable_count=0,
        old_known_cost_usd=D("0.04"),
        new_known_cost_usd=D("0.03"),
        corrections={
            "rules_version": "test",
            "calls": [
                {
                    "call_id": pk,
                    "outcome": "changed",
                    "input_tokens": 100,
                    "cached_input_tokens": 0,
                    "cache_write_tokens": 0,
                    "output_tokens": 10,
                    "cost_usd": "0.005",
                    "cache_neutral_cost_usd": "0.005",
                }
                for pk in cand_calls
            ],
        },
    )

    row = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    assert D(row["savings"]["subject_cost_pct"]) == D(50)
    assert row["usage"]["usage_correction"]["changed"] == 2


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_compare_prints_json_and_a_table(capsys):
    qs = b.questions({"mmlu-pro": 3})
    r = b.run(qs, {b.target("base"): [True, True, False], b.target("cand"): [True, False, False]})

    call_command("benchmark", "compare", str(r.pk), str(r.pk), "--json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"]["target"] == "base"

    call_command("benchmark", "compare", str(r.pk), str(r.pk))
    out = capsys.readouterr().out
    assert "Baseline: run" in out and "cand" in out and "Neither interval covers" in out
    # The table's words are the page's (issue 36 item 3): the same signed Δ and interval text,
    # the baseline's cost as money text, the family level as the comparison states it.
    c = doc["comparisons"][0]
    # The page's bounds: clipped to the possible range [−1, 1] (display_*), as the verdict says.
    lo, hi = c["interval"]["display_lower"], c["interval"]["display_upper"]
    assert (lo, hi) == (max(c["interval"]["lower"], -1), min(c["interval"]["upper"], 1))
    row = next(line for line in out.splitlines() if line.startswith(f"run {r.pk} / cand"))
    assert f"{c['delta']:+.4f}" in row and f"[{lo:+.4f}, {hi:+.4f}]" in row
    cost = doc["baseline"]["subject_cost_usd"]
    assert f"subject cost {'unknown' if cost is None else '$' + cost}  tied: base" in out
    assert f"{c['family_interval']['level']:.2%}".replace(".00%", "%") + " family" in out


def test_cli_compare_fails_with_one_line_listing_the_differences(capsys):
    qs = b.questions({"arc": 2})
    one = b.run(qs, {b.target("base"): [True, True]})
    two = b.run(qs, {b.target("cand"): [True, True]}, sampling={"temperature": 1})

    with pytest.raises(SystemExit) as exited:
        call_command("benchmark", "compare", str(one.pk), str(two.pk))

    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sampling.temperature" in err


def test_a_router_whose_whole_interval_is_below_zero_is_named_worse(capsys):
    qs = b.questions({"mmlu-pro": 30})
    base, router = b.target("base"), b.target("router", kind="mom")
    r = b.run(qs, {base: [True] * 30, router: [False] * 30})

    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))

    # Independently: Δ = −1 with a half-width of sqrt(2 ln(2/α) / 30) ≈ 0.50, so the upper
    # bound is below zero.
    assert c["delta"] == -1.0
    assert c["interval"]["upper"] == pytest.approx(-1 + hoeffding({"mmlu-pro": 30}), abs=1e-12)
    assert c["interval"]["upper"] < 0
    assert c["worse"] is True and c["improvement"] is False and c["not_an_improvement"] is None
    call_command("benchmark", "compare", str(r.pk), str(r.pk))
    line = next(x for x in capsys.readouterr().out.splitlines() if "router" in x)
    assert line.rstrip().endswith("Worse")
    assert c["verdict"] == "worse" and "lies below 0" in c["verdict_reason"]


def test_an_interval_reaching_zero_is_not_called_worse():
    qs = b.questions({"mmlu-pro": 4})
    base, router = b.target("base"), b.target("router", kind="mom")
    r = b.run(qs, {base: [True] * 4, router: [True, True, True, False]})
    c = only(comparison_build(baseline_run_id=r.pk, candidate_run_ids=[r.pk]))
    assert c["delta"] < 0 < c["interval"]["upper"] and c["worse"] is False


def test_execution_limits_do_not_make_runs_incomparable_and_are_named():
    """Issue 23 point 4 (R11.2): concurrency, timeouts and a cost cap decide how a run is
    driven, not what it asks; a pair differing only there is compared, offered on the page
    (the database fingerprint agrees with the re-verification) and the differences named."""
    from compare.compatibility import execution_differences, runs_differences
    from compare.selectors import candidate_options

    qs = b.questions({"mmlu-pro": 3})
    base, cand = b.target("base"), b.target("cand")
    baseline_run = b.run(qs, {base: [True, False, True]})
    other = b.run(
        qs,
        {cand: [True, True, False]},
        limits={
            "concurrency": 64,
            "max_output_tokens": 4096,
            "total_timeout_s": 30,
            "max_cost_usd": "2.50",
        },
    )
    assert runs_differences(baseline_run, other) == []
    named = {d.field: (d.baseline, d.candidate) for d in execution_differences(baseline_run, other)}
    assert named == {
        "limits.concurrency": (8, 64),
        "limits.total_timeout_s": (None, 30),
        "limits.max_cost_usd": (None, "2.50"),
    }
    doc = comparison_build(baseline_run_id=baseline_run.pk, candidate_run_ids=[other.pk])
    assert [e["run"] for e in doc["execution_differences"]] == [other.pk]
    assert {d["field"] for d in doc["execution_differences"][0]["differences"]} == set(named)
    offered = [o.id for o in candidate_options(baseline_run.pk)]
    assert other.pk in offered

    # A limit that changes what is asked still refuses the pair, in both places.
    shorter = b.run(qs, {cand: [True] * 3}, limits={"concurrency": 8, "max_output_tokens": 512})
    assert {d.field for d in runs_differences(baseline_run, shorter)} == {
        "limits.max_output_tokens"
    }
    assert shorter.pk not in [o.id for o in candidate_options(baseline_run.pk)]


def test_a_baselines_pool_is_its_group_of_the_whole_pool():
    """Issue 38 (10,000 runs): step 2 of the page reads the baseline's fingerprint group only.
    What it offers is exactly the whole pool's options of that group — the same runs, counts,
    prices and baseline targets — and nothing of the other groups (none is ever comparable)."""
    from compare.selectors import candidate_options, comparable_pool

    qs = b.questions({"mmlu-pro": 3})
    other_qs = b.questions({"mmlu-pro": 4})
    base, cand, weak = b.target("base"), b.target("cand"), b.target("weak")
    baseline_run = b.run(qs, {base: [True, False, True], weak: [False, False, True]})
    partner = b.run(qs, {cand: [True, True, False]})
    lacking = b.run(qs, {base: [True, None, True]})
    lacking.cells.filter(correct__isnull=True).update(
        status="sent_unknown"
    )  # no result: no baseline
    elsewhere = [b.run(other_qs, {cand: [True] * 4}) for _ in range(2)]
    whole = comparable_pool()
    with CaptureQueriesContext(connection) as read:
        group = comparable_pool(baseline_run.pk)
    fingerprint = whole[baseline_run.pk].fingerprint
    assert {elsewhere[0].pk, elsewhere[1].pk} <= set(whole)
    assert set(group) == {pk for pk, o in whole.items() if o.fingerprint == fingerprint}
    assert {baseline_run.pk, partner.pk, lacking.pk} <= set(group)
    assert not set(group) & {r.pk for r in elsewhere}
    for pk, option in group.items():
        assert option == whole[pk]
    assert group[baseline_run.pk].compatible_count == whole[baseline_run.pk].compatible_count >= 2
    assert [o.id for o in candidate_options(baseline_run.pk)] == [
        o.id for o in candidate_options(baseline_run.pk, pool=whole)
    ]
    # Only a run whose summary counts a cell without an outcome has its cells read (one run).
    cells = [q["sql"] for q in read.captured_queries if 'FROM "runs_cell"' in q["sql"]]
    assert len(cells) == 1 and f"IN ({lacking.pk})" in cells[0]
    assert group[lacking.pk].baseline_targets == ()
    assert group[partner.pk].baseline_targets == ("cand",)
    assert group[baseline_run.pk].baseline_targets == ("base", "weak")
    # A baseline that cannot take part has an empty group, as its absence from the whole pool.
    running = b.run(qs, {base: [True, True, True]}, status="running")
    assert running.pk not in comparable_pool() and comparable_pool(running.pk) == {}


def test_a_group_pricing_a_model_two_ways_offers_each_run_only_its_agreeing_partners():
    """Prices are matched inside a fingerprint group (`compare.selectors._PriceIndex`): a run
    that prices a model another way is comparable with neither of the runs that price it the
    first way, which stay comparable with each other; a group with one price per model (the
    usual case) counts every other member."""
    from compare.selectors import candidate_options, comparable_pool

    qs = b.questions({"mmlu-pro": 3})
    first = b.run(qs, {b.target("p-one"): [True, False, True]})
    second = b.run(qs, {b.target("p-two"): [True, True, False]})
    dearer = {model: {**row, "output": "99"} for model, row in b.PRICES.items()}
    dear = b.run(qs, {b.target("p-dear", prices=dearer): [False, True, True]})
    pool = comparable_pool()
    assert pool[first.pk].fingerprint == pool[dear.pk].fingerprint
    assert (pool[first.pk].compatible_count, pool[second.pk].compatible_count) == (1, 1)
    assert pool[dear.pk].compatible_count == 0
    assert [o.id for o in candidate_options(first.pk)] == [second.pk]
    assert candidate_options(dear.pk) == []
    for run in (first, dear):
        differences = {d.field for d in runs_differences(run, second)}
        assert (run is dear) == any(f.startswith("prices") for f in differences)
