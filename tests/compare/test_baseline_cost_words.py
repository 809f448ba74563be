"""Savings unknown because the baseline's own cost is incomplete say so (outside probe "kb",
2026-12-07): the strongest single model, alone at its quality, had calls without usage, and
the savings, the CSV, the CLI and the headline said "a tied strongest single model has
incomplete cost" — naming a tie there was none of, and not the baseline."""

from __future__ import annotations

from decimal import Decimal

import pytest

from compare.api import comparison_csv
from compare.headline import headline_sentence
from compare.services import comparison_build
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

N = 4


def test_a_baseline_with_incomplete_cost_is_named_as_the_baseline():
    qs = b.questions({"mmlu-pro": N})
    strong, router = b.target("strong"), b.target("router", kind="mom")
    run = b.run(
        qs,
        {strong: [True] * N, router: [True, True, True, False]},
        costs={
            strong: [Decimal("0.002"), None, Decimal("0.002"), Decimal("0.002")],
            router: Decimal("0.001"),
        },
    )
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert doc["baseline"]["tied"] == ["strong"]  # no tie
    assert doc["baseline"]["subject_cost_usd"] is None
    [c] = doc["comparisons"]
    assert c["savings"]["subject_cost_pct"] is None
    reason = c["savings"]["subject_cost_unknown_reason"]
    assert reason == "the baseline's cost is incomplete"
    assert "savings unknown: the baseline's cost is incomplete" in headline_sentence(doc, "router")
    assert "the baseline's cost is incomplete" in comparison_csv(doc)


def test_a_tied_model_with_incomplete_cost_is_named():
    qs = b.questions({"mmlu-pro": N})
    billed, unbilled = b.target("a-billed"), b.target("b-unbilled")
    router = b.target("router", kind="mom")
    run = b.run(
        qs,
        {billed: [True] * N, unbilled: [True] * N, router: [True, True, True, False]},
        costs={billed: Decimal("0.002"), unbilled: None, router: Decimal("0.001")},
    )
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert doc["baseline"]["target"] == "a-billed"
    c = next(c for c in doc["comparisons"] if c["target"] == "router")
    assert c["savings"]["subject_cost_unknown_reason"] == (
        "a tied strongest single model has incomplete cost"
    )
