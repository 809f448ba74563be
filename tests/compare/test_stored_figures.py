"""A comparison read from stored figures equals one recomputed from the ledger (issue 25).

`compare.figures` keeps each settled run's report and per-cell figures under the run's
fingerprint. These tests compare the stored read with a fresh computation (stored rows
deleted) field for field, and check that a usage correction or a regrade — anything that
changes what a comparison reads — is seen on the next read, never a stale stored figure.
"""

from __future__ import annotations

from decimal import Decimal as D

import numpy as np
import pytest

from compare.figures import cells_pack
from compare.models import CaseFigures
from compare.services import comparison_build
from runs.ledger.selectors import run_settled_fingerprint, runs_settled_fingerprints
from runs.models import Cell, Run, RunReport, UsageCorrection
from runs.settlement.regrade import run_regrade
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def _fresh(baseline: int, candidates: list[int]) -> dict:
    """The comparison computed from the ledger: nothing stored is read (and the result is
    stored again)."""
    CaseFigures.objects.all().delete()
    RunReport.objects.all().delete()
    return comparison_build(baseline_run_id=baseline, candidate_run_ids=candidates)


def _stored(baseline: int, candidates: list[int]) -> dict:
    assert CaseFigures.objects.count() and RunReport.objects.count()
    return comparison_build(baseline_run_id=baseline, candidate_run_ids=candidates)


def _runs():
    qs = b.questions({"mmlu-pro": 6, "gpqa": 4})
    base, other = b.target("base-s"), b.target("other-s")
    rng = np.random.default_rng(7)
    costs = [D("0.001") * (i + 1) for i in range(10)]
    baseline = b.run(
        qs,
        {base: [True] * 7 + [False, True, False], other: [bool(x) for x in rng.random(10) < 0.5]},
        costs={base: costs, other: D("0.002")},
    )
    router = b.target("router-s", kind="mom")
    candidates = [
        b.run(
            qs,
            {router: [bool(x) for x in rng.random(10) < 0.6]},
            costs={router: [D("0.0005") * (i % 3 + 1) for i in range(10)]},
        )
        for _ in range(3)
    ]
    return baseline, candidates


def test_stored_figures_give_the_recomputed_comparison_exactly():
    baseline, candidates = _runs()
    ids = [c.pk for c in candidates]
    fresh = _fresh(baseline.pk, ids)
    stored = _stored(baseline.pk, ids)
    assert stored == fresh
    # Both were really read from the stored rows: they hold every run, keyed by fingerprint.
    assert CaseFigures.objects.count() == RunReport.objects.count() == 4
    # And the packed cells are the ledger's, cell for cell.
    row = CaseFigures.objects.get(run=candidates[0])
    packed = np.frombuffer(
        bytes(row.cells), dtype=cells_pack([candidates[0].pk])[candidates[0].pk].dtype
    )
    assert packed.tobytes() == cells_pack([candidates[0].pk])[candidates[0].pk].tobytes()
    assert (
        int(packed["correct"].sum()) == Cell.objects.filter(run=candidates[0], correct=True).count()
    )


def test_batched_fingerprints_equal_the_single_run_ones():
    baseline, candidates = _runs()
    running = b.run(b.questions({"mmlu-pro": 2}), {b.target("x"): [True, None]}, status="running")
    runs = list(Run.objects.filter(pk__in=[baseline.pk, running.pk, *(c.pk for c in candidates)]))
    batched = runs_settled_fingerprints(runs)
    for run in runs:
        assert batched[run.pk] == run_settled_fingerprint(run)
    assert batched[running.pk] is None and batched[baseline.pk] is not None


def _correct(run: Run, cost: str) -> None:
    calls = list(Cell.objects.filter(run=run).values_list("calls__pk", flat=True))
    UsageCorrection.objects.create(
        run=run,
        version=1 + UsageCorrection.objects.filter(run=run).count(),
        evidence_sha256="e" * 64,
        verified_count=len(calls),
        changed_count=len(calls),
        unverifiable_count=0,
        old_known_cost_usd=None,
        new_known_cost_usd=None,
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
                    "cost_usd": cost,
                    "cache_neutral_cost_usd": cost,
                }
                for pk in calls
            ],
        },
    )


def test_a_usage_correction_changes_the_fingerprint_and_the_comparison_is_recomputed():
    baseline, candidates = _runs()
    ids = [c.pk for c in candidates]
    before = comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=ids)
    old_key = CaseFigures.objects.get(run=candidates[1]).fingerprint

    _correct(candidates[1], "0.0001")  # every call of candidate 1 now costs 0.0001
    after = comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=ids)

    assert CaseFigures.objects.get(run=candidates[1]).fingerprint != old_key
    row = next(c for c in after["comparisons"] if c["run"] == candidates[1].pk)
    old = next(c for c in before["comparisons"] if c["run"] == candidates[1].pk)
    # Independently: 10 calls at 0.0001 against the baseline's 0.001 × (1 + … + 10) = 0.055.
    assert row["usage"]["subject_cost_usd"] == "0.001"
    assert after["baseline"]["target"] == "base-s"
    expected = 100 * (1 - D(1) / D(55))
    assert abs(D(row["savings"]["subject_cost_pct"]) - expected) < D("1e-24")
    assert row["savings"] != old["savings"] and row["savings_interval"] != old["savings_interval"]
    assert row["usage"]["usage_correction"]["changed"] == 10
    # The stored read after the correction is the fresh computation, exactly.
    assert _stored(baseline.pk, ids) == after == _fresh(baseline.pk, ids)


def test_a_changed_cell_of_a_settled_run_is_seen_and_a_regrade_changes_nothing_read():
    baseline, candidates = _runs()
    ids = [c.pk for c in candidates]
    comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=ids)
    # A baseline cell marked outcome-unknown: the summary counts move, so does the key.
    Cell.objects.filter(run=baseline, target__slug="base-s", correct=False).update(
        status="sent_unknown"
    )
    after = comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=ids)
    assert after["baseline"]["target"] == "other-s"
    assert after == _fresh(baseline.pk, ids)

    # A regrade is a separate record: cells, reports and comparisons read the same as before.
    run_regrade(run_id=candidates[0].pk)
    assert _stored(baseline.pk, ids) == after == _fresh(baseline.pk, ids)
