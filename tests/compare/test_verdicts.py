"""The verdict vocabulary (issue 35, "A verdict vocabulary"; SPEC R5.5, R11.5): every compared
candidate states exactly one of better, non_inferior (with its margin), inconclusive, worse —
decided from the family-wise interval of Δ — and the page, the API, the JSON export, the CLI
and the CSV export state the same word.

Every interval below is recomputed here from the constructed outcomes, never by the product:
one benchmark, so the renormalised weight is 1 and the Bonferroni-widened Hoeffding half-width
over k candidates is sqrt(4 · ln(2k/α) / (2n)) (each question's difference ranges over an
interval of length 2). Each case's expected word is written out, and the independent bounds
are checked to sit on the side of 0 and of −margin that the word claims.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from compare.services import comparison_build, comparison_compute
from compare.verdict import VERDICTS, verdict_decide
from compare.views import compare_url
from runs.models import Run
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

ALPHA = 0.05
LABELS = {"better": "Better", "inconclusive": "Inconclusive", "worse": "Worse"}


def outcomes(
    n: int, right: int, *, loses: int = 0, gains: int = 0
) -> tuple[list[bool], list[bool]]:
    """The baseline answers its first ``right`` of ``n`` questions; the candidate loses the
    first ``loses`` of those and gains the first ``gains`` of the others."""
    base = [i < right for i in range(n)]
    cand = [(right <= i < right + gains) if i >= right else i >= loses for i in range(n)]
    return base, cand


def independent_interval(
    base: list[bool], cand: list[bool], k: int = 1
) -> tuple[float, float, float]:
    """(Δ, lower, upper) of the family-wise interval, from the definition."""
    n = len(base)
    delta = sum(int(c) - int(x) for x, c in zip(base, cand, strict=True)) / n
    r = math.sqrt(4 * math.log(2 * k / ALPHA) / (2 * n))
    return delta, delta - r, delta + r


@dataclass(frozen=True)
class Case:
    name: str
    n: int
    right: int
    loses: int = 0
    gains: int = 0
    split: str = "dev"
    margin: str | None = None
    expected: str = "inconclusive"
    reason_has: tuple[str, ...] = ()


CASES = [
    Case("clear gain", 100, 50, gains=50, expected="better", reason_has=("lies above 0",)),
    # The demo's router (issue 35): Δ ≈ −0.44 with the whole interval ≈ [−0.61, −0.27] below 0.
    Case(
        "demo router",
        256,
        200,
        loses=113,
        expected="worse",
        reason_has=("lies below 0", "no non-inferiority margin was fixed"),
    ),
    Case(
        "holdout within the margin",
        400,
        200,
        loses=20,
        split="holdout",
        margin="0.19",
        expected="non_inferior",
        reason_has=("is above −0.19", "the margin frozen in run"),
    ),
    Case(
        "holdout just outside the margin",
        400,
        200,
        loses=20,
        split="holdout",
        margin="0.18",
        expected="inconclusive",
        reason_has=("includes 0", "non-inferiority not shown", "is not above −0.18"),
    ),
    Case(
        "dev split whatever the margin",
        400,
        200,
        loses=20,
        margin="0.5",
        expected="inconclusive",
        reason_has=("not shown — the cases are the dev split; parity needs holdout cases",),
    ),
    Case(
        "measurably worse but inside the margin",
        400,
        200,
        loses=100,
        split="holdout",
        margin="0.4",
        expected="non_inferior",
        reason_has=("is above −0.4", "measurably worse, by less than the margin"),
    ),
    Case(
        "worse and outside the margin",
        400,
        200,
        loses=100,
        split="holdout",
        margin="0.3",
        expected="worse",
        reason_has=("lies below 0", "is not above −0.3"),
    ),
    Case(
        "positive but crossing zero",
        4,
        2,
        gains=1,
        expected="inconclusive",
        reason_has=("is positive but", "not an improvement"),
    ),
]


def claims_hold(case: Case, lower: float, upper: float) -> None:
    """The independent bounds sit where the expected word says (no product code)."""
    m = None if case.margin is None or case.split != "holdout" else float(case.margin)
    if case.expected == "better":
        assert lower > 0
    elif case.expected == "non_inferior":
        assert lower <= 0 and m is not None and lower > -m
    elif case.expected == "worse":
        assert upper < 0 and (m is None or lower <= -m)
    else:
        assert lower <= 0 <= upper and (m is None or lower <= -m)


@dataclass
class Built:
    baseline: Run
    candidate: Run
    slug: str
    lower: float
    upper: float
    delta: float

    @property
    def shown(self) -> str:
        """The interval as words quote it: a difference of accuracies lies in [−1, 1]."""
        return f"[{max(self.lower, -1):+.4f}, {min(self.upper, 1):+.4f}]"


def build(case: Case) -> Built:
    tag = next(b._seq)
    qs = b.questions({"mmlu-pro": case.n})
    base_out, cand_out = outcomes(case.n, case.right, loses=case.loses, gains=case.gains)
    extra = {} if case.margin is None else {"non_inferiority_margin": case.margin}
    baseline = b.run(qs, {b.target(f"vbase-{tag}"): base_out}, split=case.split, **extra)
    router = b.target(f"vrouter-{tag}", kind="mom")
    candidate = b.run(qs, {router: cand_out}, split=case.split, **extra)
    delta, lower, upper = independent_interval(base_out, cand_out)
    return Built(baseline, candidate, router.slug, lower, upper, delta)


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_authenticate(f.user_create(username="verdict-api"))
    return client


def label(case: Case) -> str:
    return (
        f"Non-inferior (margin {case.margin})"
        if case.expected == "non_inferior"
        else LABELS[case.expected]
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_verdict_word_is_the_same_in_service_api_exports_cli_and_page(
    case: Case,
    api: APIClient,
    client,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    built = build(case)
    claims_hold(case, built.lower, built.upper)
    ids = {"baseline_run_id": built.baseline.pk, "candidate_run_ids": [built.candidate.pk]}

    # Service: the typed result and its JSON.
    (result,) = comparison_compute(**ids).candidates
    assert result.verdict.word == case.expected
    (c,) = comparison_build(**ids)["comparisons"]
    assert c["verdict"] == case.expected and c["verdict"] in VERDICTS
    assert c["verdict_label"] == label(case)
    assert c["delta"] == pytest.approx(built.delta, abs=1e-12)
    assert c["verdict_interval"]["lower"] == pytest.approx(built.lower, abs=1e-12)
    assert c["verdict_interval"]["upper"] == pytest.approx(built.upper, abs=1e-12)
    assert built.shown in c["verdict_reason"]
    assert "95% family-wise interval" in c["verdict_reason"]
    for words in case.reason_has:
        assert words in c["verdict_reason"], (words, c["verdict_reason"])
    # The margin the rule could apply: frozen, and holdout cases on both sides.
    expected_margin = case.margin if case.split == "holdout" else None
    assert c["verdict_margin"] == expected_margin

    # API: THE comparison endpoint and the JSON export.
    body = {"baseline": built.baseline.pk, "candidates": [built.candidate.pk]}
    r = api.post("/api/v1/compare/", body, format="json")
    assert r.status_code == 200, r.content
    (a,) = r.json()["comparisons"]
    assert (a["verdict"], a["verdict_label"], a["verdict_reason"]) == (
        case.expected,
        label(case),
        c["verdict_reason"],
    )
    query = f"baseline={built.baseline.pk}&candidates={built.candidate.pk}"
    (j,) = api.get(f"/api/v1/compare/export.json?{query}").json()["comparisons"]
    assert j["verdict"] == case.expected

    # CSV export: the candidate row.
    r = api.get(f"/api/v1/compare/export.csv?{query}")
    assert r.status_code == 200
    (row,) = [x for x in csv.DictReader(io.StringIO(r.content.decode())) if x["row"] == "candidate"]
    assert row["verdict"] == case.expected and row["verdict_label"] == label(case)
    assert row["verdict_reason"] == c["verdict_reason"]
    assert row["verdict_margin"] == (expected_margin or "")

    # CLI: the table row ends with the label; the next line gives the word and its reason.
    call_command("benchmark", "compare", str(built.baseline.pk), str(built.candidate.pk))
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, x in enumerate(lines) if f"/ {built.slug}" in x)
    assert lines[at].rstrip().endswith(label(case))
    assert lines[at + 1].strip() == f"{case.expected}: {c['verdict_reason']}"

    # Page: the card and the legend.
    client.force_login(f.user_create(username="verdict-page"))
    page = client.get(
        compare_url(baseline=built.baseline.pk, candidates=[built.candidate.pk], compare=True)
    ).content.decode()
    card = re.search(
        r'<p class="verdict (\w+)" data-verdict="(\w+)"><strong class="verdict-word">([^<]+)</strong>',
        page,
    )
    assert card is not None
    assert card.group(2) == case.expected and card.group(3) == label(case)
    legend = re.search(
        r'<td class="verdict-word[^"]*" data-verdict="(\w+)"[^>]*>([^<]+)</td>', page
    )
    assert legend is not None and legend.groups() == (case.expected, label(case))


def test_family_wise_interval_decides_when_several_candidates_are_compared(api: APIClient) -> None:
    """Two candidates: one clears 0 on its own 95% interval but not on the family-wise 97.5%
    one, so it is inconclusive, and the reason names both intervals."""
    n = 100
    qs = b.questions({"mmlu-pro": n})
    base_out, gain_out = outcomes(n, 50, gains=28)  # Δ = +0.28
    _, same_out = outcomes(n, 50)
    baseline = b.run(qs, {b.target("fw-base"): base_out})
    gain = b.run(qs, {b.target("fw-gain", kind="mom"): gain_out})
    same = b.run(qs, {b.target("fw-same", kind="mom"): same_out})

    _, single_lower, _ = independent_interval(base_out, gain_out, k=1)
    _, family_lower, family_upper = independent_interval(base_out, gain_out, k=2)
    assert single_lower > 0 > family_lower  # the constructed case straddles the two

    body = {"baseline": baseline.pk, "candidates": [gain.pk, same.pk]}
    doc = api.post("/api/v1/compare/", body, format="json").json()
    by_target = {c["target"]: c for c in doc["comparisons"]}
    c = by_target["fw-gain"]
    assert c["improvement"] is True  # the single-comparison flag, unchanged
    assert c["verdict"] == "inconclusive"
    assert c["verdict_interval"]["lower"] == pytest.approx(family_lower, abs=1e-12)
    assert c["verdict_interval"]["upper"] == pytest.approx(family_upper, abs=1e-12)
    assert c["verdict_interval"]["level"] == pytest.approx(1 - ALPHA / 2)
    assert "97.5% family-wise interval" in c["verdict_reason"]
    assert "Bonferroni over 2 candidates" in c["verdict_reason"]
    assert "single-comparison 95% interval" in c["verdict_reason"]
    assert by_target["fw-same"]["verdict"] == "inconclusive"


# --- the decision boundaries, on hand-chosen bounds ---------------------------------------------


def decide(lower: float, upper: float, margin: str | None = None, delta: float = 0.0) -> str:
    return verdict_decide(
        delta=Fraction(delta),
        lower=lower,
        upper=upper,
        level=0.95,
        method="weighted Hoeffding, Bonferroni over 1 candidate",
        margin=None if margin is None else Decimal(margin),
        no_margin_reason=None if margin is not None else "no margin",
    ).word


@pytest.mark.parametrize(
    ("lower", "upper", "margin", "word"),
    [
        (0.0, 0.5, None, "inconclusive"),  # a lower bound exactly at 0 is not above it
        (1e-12, 0.5, None, "better"),
        (-0.5, 0.0, None, "inconclusive"),  # an upper bound exactly at 0 is not below it
        (-0.5, -1e-12, None, "worse"),
        (-0.25, 0.1, "0.25", "inconclusive"),  # exactly at −margin is not above it
        (-0.25 + 1e-12, 0.1, "0.25", "non_inferior"),
        (-0.25, -1e-12, "0.25", "worse"),
        (-0.125, -0.0625, "0.25", "non_inferior"),  # inside (−m, 0): non-inferior wins
        (0.01, 0.2, "0.25", "better"),  # better comes first
    ],
)
def test_strict_boundaries(lower: float, upper: float, margin: str | None, word: str) -> None:
    assert decide(lower, upper, margin) == word


def test_a_margin_is_never_a_default() -> None:
    """Without a frozen margin the rule can never say non-inferior, however tight the interval."""
    v = verdict_decide(
        delta=Fraction(0),
        lower=-1e-9,
        upper=1e-9,
        level=0.95,
        method="m",
        margin=None,
        no_margin_reason="no non-inferiority margin was fixed in run 7's plan before the run",
    )
    assert v.word == "inconclusive" and v.margin is None
    assert "no non-inferiority margin was fixed in run 7's plan" in v.reason
