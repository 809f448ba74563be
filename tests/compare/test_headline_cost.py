"""The headline asks two things — does the candidate keep the baseline's quality, and at lower
cost? — so its first words answer both (outside probe). A candidate that keeps the quality but
costs more, the same, or an unknown amount is not a "Yes": the sentence used to open with "Yes"
(or "Yes, and better") and end with "subject cost 50.0% higher". The quality part still follows
the verdict alone; nothing here changes a verdict.

Outcomes and costs are constructed; the expected words are written out from them: 400
holdout questions, the baseline right on 200, the candidate losing 20 of those, so
Δ = −0.05, the 95% Hoeffding half-width sqrt(2·ln 40 / 400) ≈ 0.1358, lower bound ≈ −0.1858,
above −0.19 (the frozen margin): non-inferior. Better: 100 dev questions, the baseline right
on 50, the candidate on all: Δ = 0.5, lower ≈ 0.5 − 0.2716 > 0.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from compare.headline import headline_sentence
from compare.services import comparison_build
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

D = Decimal


def _doc(n: int, right: int, cand_right: set[int], router_cost: Decimal | None, **extra: str):
    qs = b.questions({"mmlu-pro": n})
    base_out = [i < right for i in range(n)]
    cand_out = [i in cand_right for i in range(n)]
    strong = b.target(f"hc-strong-{next(b._seq)}")
    router = b.target(f"hc-router-{next(b._seq)}", kind="mom")
    split = "holdout" if extra else "dev"
    baseline = b.run(qs, {strong: base_out}, costs={strong: D("0.001")}, split=split, **extra)
    costs = {router: router_cost if router_cost is not None else [None] * n}
    candidate = b.run(qs, {router: cand_out}, costs=costs, split=split, **extra)
    doc = comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=[candidate.pk])
    return doc, router.slug


def _non_inferior(router_cost: Decimal | None):
    # Independent check of the constructed case: Δ − r above −0.19, Δ + r above 0.
    r = math.sqrt(2 * math.log(2 / 0.05) / 400)
    assert -0.05 - r > -0.19 and -0.05 + r > 0
    return _doc(400, 200, set(range(20, 200)), router_cost, non_inferiority_margin="0.19")


def _better(router_cost: Decimal | None):
    assert 0.5 - math.sqrt(2 * math.log(2 / 0.05) / 100) > 0
    return _doc(100, 50, set(range(100)), router_cost)


@pytest.mark.parametrize(
    ("make", "cost", "opening", "tail"),
    [
        (_non_inferior, D("0.0004"), "Yes — non-inferior", "subject cost 60.0% lower"),
        (_better, D("0.0004"), "Yes, and better — better", "subject cost 60.0% lower"),
        (
            _non_inferior,
            D("0.0015"),
            "Quality kept, but not at lower cost — non-inferior",
            "subject cost 50.0% higher",
        ),
        (
            _better,
            D("0.0015"),
            "Better quality, but not at lower cost — better",
            "subject cost 50.0% higher",
        ),
        (
            _non_inferior,
            D("0.001"),
            "Quality kept, but not at lower cost — non-inferior",
            "the same subject cost",
        ),
        (
            _non_inferior,
            None,
            "Quality kept; lower cost not shown — non-inferior",
            "savings unknown: the candidate's cost is incomplete",
        ),
        (
            _better,
            None,
            "Better quality; lower cost not shown — better",
            "savings unknown: the candidate's cost is incomplete",
        ),
    ],
)
def test_the_answer_says_yes_only_when_the_quality_is_kept_at_a_lower_cost(
    make, cost, opening, tail
) -> None:
    doc, slug = make(cost)
    sentence = headline_sentence(doc, slug)
    question = f"Does {slug} keep {doc['baseline']['target']}'s quality at lower cost? "
    assert sentence.startswith(question + opening), sentence
    assert tail in sentence, sentence
