"""The savings bootstrap's resampled sums kept per side under the address of their inputs
(compare/bootstrap_memo.py, issue 38 item 5): the interval a comparison shows from kept sums
is, bit for bit, what the bootstrap computes from the same costs; any change of an input is
another address; a run's end keeps its targets' sums, so a comparison of ended runs draws
nothing."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from compare import bootstrap_memo
from compare.bootstrap_memo import resampled_sums_kept, savings_intervals, sums_key
from compare.models import ResampledCostSums
from compare.services import comparison_build, savings_sums_keep
from srbench.savings_bootstrap import savings_bootstrap_intervals
from srbench.stats import DEFAULT_BOOTSTRAP_DRAWS, DEFAULT_BOOTSTRAP_SEED
from tests.compare import builders as b
from tests.compare.test_savings_interval import expected

pytestmark = pytest.mark.django_db

rng = np.random.default_rng(11)
BASE = {
    "mmlu-pro": np.round(rng.uniform(0.001, 0.02, 30), 10),
    "gpqa": np.round(rng.uniform(0.01, 0.05, 7), 10),
}
CANDS = [
    {k: np.round(v * rng.uniform(0.2, 1.4, v.size), 10) for k, v in BASE.items()},
    {k: np.round(v * rng.uniform(0.5, 0.9, v.size), 10) for k, v in BASE.items()},
    # An unknown cost: no interval, and nothing is kept or drawn for it.
    {"mmlu-pro": np.full(30, math.nan), "gpqa": BASE["gpqa"]},
]


def _no_compute(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise AssertionError("the bootstrap drew although every side's sums were kept")


def test_intervals_from_kept_sums_are_the_computed_ones_and_are_read_back(monkeypatch) -> None:
    first = savings_intervals(BASE, CANDS, alpha=0.05)
    assert ResampledCostSums.objects.count() == 3  # the baseline and the two known candidates
    for cand, got in zip(CANDS[:2], first, strict=False):
        lo, hi = expected(
            {k: v.tolist() for k, v in BASE.items()}, {k: v.tolist() for k, v in cand.items()}
        )
        assert got is not None and (got.lower, got.upper) == pytest.approx((lo, hi), abs=1e-9)
    assert first[2] is None
    # Bit for bit what one computation of the whole batch gives, at another α too.
    assert first == savings_bootstrap_intervals(BASE, CANDS, alpha=0.05)

    # Read back: no draw at all, the same numbers to the last bit, in any order of candidates,
    # and at another α (α is applied to the kept sums, never part of their address).
    monkeypatch.setattr(bootstrap_memo, "resampled_cost_sums", _no_compute)
    again = savings_intervals(BASE, list(reversed(CANDS)), alpha=0.05)
    assert again == list(reversed(first))
    assert again[1] is not None and again[1].draws == DEFAULT_BOOTSTRAP_DRAWS
    assert again[1].seed == DEFAULT_BOOTSTRAP_SEED
    monkeypatch.undo()
    at_ten = savings_bootstrap_intervals(BASE, CANDS, alpha=0.1)
    monkeypatch.setattr(bootstrap_memo, "resampled_cost_sums", _no_compute)
    assert savings_intervals(BASE, CANDS, alpha=0.1) == at_ten
    # A candidate paired with another baseline reuses its own kept sums: only that baseline
    # is drawn (one side).
    monkeypatch.undo()
    drawn: list[int] = []
    real = bootstrap_memo.resampled_cost_sums

    def counted(sides, **kwargs):  # type: ignore[no-untyped-def]
        drawn.append(len(sides))
        return real(sides, **kwargs)

    monkeypatch.setattr(bootstrap_memo, "resampled_cost_sums", counted)
    other = {k: v * 1.5 for k, v in BASE.items()}
    assert savings_intervals(other, CANDS[:1], alpha=0.05) == savings_bootstrap_intervals(
        other, CANDS[:1], alpha=0.05
    )
    assert drawn == [1]


def test_any_change_of_an_input_is_another_address() -> None:
    key = sums_key(CANDS[0], draws=2000, seed=1)
    moved = {k: v.copy() for k, v in CANDS[0].items()}
    moved["gpqa"][3] += 1e-10  # one question's cost by the ledger's last digit
    renamed = {("arc" if k == "gpqa" else k): v for k, v in CANDS[0].items()}
    shorter = {k: v[:-1] for k, v in CANDS[0].items()}
    variants = {
        sums_key(moved, draws=2000, seed=1),
        sums_key(renamed, draws=2000, seed=1),
        sums_key(shorter, draws=2000, seed=1),
        sums_key(CANDS[0], draws=1999, seed=1),
        sums_key(CANDS[0], draws=2000, seed=2),
        sums_key(CANDS[1], draws=2000, seed=1),
    }
    assert key not in variants and len(variants) == 6
    # The same inputs as plain lists or in another dict order: the same address.
    as_lists = {k: v.tolist() for k, v in reversed(CANDS[0].items())}
    assert sums_key(as_lists, draws=2000, seed=1) == key


def test_kept_sums_are_what_is_read_not_recomputed() -> None:
    (sums,) = resampled_sums_kept([BASE], draws=50, seed=3)
    assert sums is not None and sums.shape == (50,)
    ResampledCostSums.objects.update(sums=np.arange(1, 51, dtype="<i8").tobytes())
    (read,) = resampled_sums_kept([BASE], draws=50, seed=3)
    assert read is not None and read.tolist() == list(range(1, 51))


def _run():  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": 6})
    base, cand = b.target("base"), b.target("cand")
    return b.run(
        qs,
        {
            base: [True, True, False, True, False, True],
            cand: [True, False, True, False, False, True],
        },
        costs={
            base: [Decimal("0.01"), Decimal("0.02"), Decimal("0.015")] * 2,
            cand: [Decimal("0.004"), Decimal("0.03"), Decimal("0.001")] * 2,
        },
    )


def test_the_comparison_reads_the_kept_sums(monkeypatch) -> None:
    run = _run()
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    interval = doc["comparisons"][0]["savings_interval"]
    assert interval is not None and ResampledCostSums.objects.count() == 2
    # The comparison draws nothing the second time, and says the same.
    monkeypatch.setattr(bootstrap_memo, "resampled_cost_sums", _no_compute)
    assert comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk]) == doc
    # What it reads is the kept rows: constant sums 1:2 are a 50 % saving at every draw.
    ResampledCostSums.objects.update(sums=np.full(2000, 0, dtype="<i8").tobytes())
    by_hand = {"base": 2, "cand": 1}
    for row in ResampledCostSums.objects.all():
        side = "base" if row.key == _key_of(run, "base") else "cand"
        row.sums = np.full(2000, by_hand[side], dtype="<i8").tobytes()
        row.save()
    shown = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert shown["comparisons"][0]["savings_interval"]["lower"] == 50.0
    assert shown["comparisons"][0]["savings_interval"]["upper"] == 50.0


def _key_of(run, slug: str) -> str:  # type: ignore[no-untyped-def]
    costs = {"base": [0.01, 0.02, 0.015] * 2, "cand": [0.004, 0.03, 0.001] * 2}[slug]
    return sums_key({"mmlu-pro": costs}, draws=2000, seed=DEFAULT_BOOTSTRAP_SEED)


def test_a_run_end_keeps_its_targets_sums_so_its_comparison_draws_nothing(monkeypatch) -> None:
    run = _run()
    ResampledCostSums.objects.all().delete()
    savings_sums_keep(run_id=run.pk)
    assert set(ResampledCostSums.objects.values_list("key", flat=True)) == {
        _key_of(run, "base"),
        _key_of(run, "cand"),
    }
    savings_sums_keep(run_id=run.pk)  # idempotent
    assert ResampledCostSums.objects.count() == 2
    monkeypatch.setattr(bootstrap_memo, "resampled_cost_sums", _no_compute)
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    monkeypatch.undo()
    lo, hi = expected({"mmlu-pro": [0.01, 0.02, 0.015] * 2}, {"mmlu-pro": [0.004, 0.03, 0.001] * 2})
    got = doc["comparisons"][0]["savings_interval"]
    assert (got["lower"], got["upper"]) == pytest.approx((lo, hi), abs=1e-9)
