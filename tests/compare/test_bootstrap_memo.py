"""The savings intervals kept under the address of their inputs (compare/bootstrap_memo.py,
issue 38 item 5): what a comparison reads back is, bit for bit, what the bootstrap computes
from the same inputs; any change of an input is another address; the comparison reads it."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from compare import bootstrap_memo
from compare.bootstrap_memo import memo_key, savings_intervals
from compare.models import SavingsIntervalMemo
from compare.services import comparison_build
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
    # An unknown cost: no interval, and the memo keeps that too.
    {"mmlu-pro": np.full(30, math.nan), "gpqa": BASE["gpqa"]},
]


def _no_compute(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise AssertionError("the bootstrap ran although every interval was kept")


def test_the_kept_interval_is_the_computed_one_and_is_read_back(monkeypatch) -> None:
    first = savings_intervals(BASE, CANDS, alpha=0.05)
    assert SavingsIntervalMemo.objects.count() == 3
    for cand, got in zip(CANDS[:2], first, strict=False):
        lo, hi = expected(
            {k: v.tolist() for k, v in BASE.items()}, {k: v.tolist() for k, v in cand.items()}
        )
        assert got is not None and (got.lower, got.upper) == pytest.approx((lo, hi), abs=1e-9)
    assert first[2] is None

    # Read back: no draw at all, the same numbers to the last bit, in any order of candidates.
    monkeypatch.setattr(bootstrap_memo, "savings_bootstrap_intervals", _no_compute)
    again = savings_intervals(BASE, list(reversed(CANDS)), alpha=0.05)
    assert again == list(reversed(first))
    assert again[1] is not None and again[1].draws == DEFAULT_BOOTSTRAP_DRAWS
    assert again[1].seed == DEFAULT_BOOTSTRAP_SEED


def test_any_change_of_an_input_is_another_address() -> None:
    key = memo_key(BASE, CANDS[0], draws=2000, seed=1, alpha=0.05)
    moved = {k: v.copy() for k, v in CANDS[0].items()}
    moved["gpqa"][3] += 1e-10  # one question's cost by the ledger's last digit
    other_base = {k: v.copy() for k, v in BASE.items()}
    other_base["mmlu-pro"][0] += 1e-10
    renamed = {("arc" if k == "gpqa" else k): v for k, v in BASE.items()}
    renamed_cand = {("arc" if k == "gpqa" else k): v for k, v in CANDS[0].items()}
    variants = {
        memo_key(BASE, moved, draws=2000, seed=1, alpha=0.05),
        memo_key(other_base, CANDS[0], draws=2000, seed=1, alpha=0.05),
        memo_key(renamed, renamed_cand, draws=2000, seed=1, alpha=0.05),
        memo_key(BASE, CANDS[0], draws=1999, seed=1, alpha=0.05),
        memo_key(BASE, CANDS[0], draws=2000, seed=2, alpha=0.05),
        memo_key(BASE, CANDS[0], draws=2000, seed=1, alpha=0.1),
        memo_key(BASE, CANDS[1], draws=2000, seed=1, alpha=0.05),
    }
    assert key not in variants and len(variants) == 7
    # The same inputs as plain lists or in another dict order: the same address.
    as_lists = {k: v.tolist() for k, v in reversed(CANDS[0].items())}
    assert memo_key(BASE, as_lists, draws=2000, seed=1, alpha=0.05) == key


def test_the_comparison_reads_the_kept_interval(monkeypatch) -> None:
    qs = b.questions({"mmlu-pro": 6})
    base, cand = b.target("base"), b.target("cand")
    run = b.run(
        qs,
        {
            base: [True, True, False, True, False, True],
            cand: [True, False, True, True, False, True],
        },
        costs={
            base: [Decimal("0.01"), Decimal("0.02"), Decimal("0.015")] * 2,
            cand: [Decimal("0.004"), Decimal("0.03"), Decimal("0.001")] * 2,
        },
    )
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    interval = doc["comparisons"][0]["savings_interval"]
    assert interval is not None and SavingsIntervalMemo.objects.count() == 1
    # The comparison draws nothing the second time, and says the same.
    monkeypatch.setattr(bootstrap_memo, "savings_bootstrap_intervals", _no_compute)
    assert comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk]) == doc
    # What it reads is the kept row: a row changed by hand is what it would show (so a wrong
    # key, not a stale value, is the only way to a wrong interval — the test above covers keys).
    SavingsIntervalMemo.objects.update(lower=-1.0, upper=1.0)
    shown = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert shown["comparisons"][0]["savings_interval"]["lower"] == -1.0
