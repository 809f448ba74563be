"""The headline's numbers recomputed from the ledger, outside the product (outside probe "ka",
2026-12-07): does the router keep the strongest single model's quality at lower cost, how
sure, at what cost?

A holdout run of three targets (a strong and a cheap single model, a router) on two
benchmarks, a margin frozen in its plan. This test reads the run's Cell and Call rows itself
and computes, with its own code: each benchmark's paired mean difference, Δ with sr-bench's
weights renormalised over the two benchmarks (as fractions), the family-wise weighted
Hoeffding interval at α = 0.05/2, the verdict by the documented rule, wins/losses/ties, the
subject-cost and cache-neutral savings from the exact cost sums, and n. Every surface that
states the headline must say the same: the API document, the JSON and CSV exports, the Compare
page's card, the CLI (`--json` and its table) and the headline sentence."""

from __future__ import annotations

import csv
import html
import io
import json
import math
import random
import re
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from compare.headline import headline_sentence
from runs.models import Call, Cell
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

# sr-bench's weights of the two benchmarks (SPEC's table: MMLU-Pro 10%, GPQA-Diamond 15%),
# written here rather than read from the product.
SRBENCH_WEIGHTS = {"mmlu-pro": Fraction(1, 10), "gpqa": Fraction(3, 20)}
ALPHA = 0.05
MARGIN = Fraction(3, 10)


def _outcomes(rng: random.Random, n: int, p: float) -> list[bool]:
    return [rng.random() < p for _ in range(n)]


def _build():
    rng = random.Random(20261207)
    qs = b.questions({"mmlu-pro": 200, "gpqa": 100})
    strong = b.target("hr-strong")
    cheap = b.target("hr-cheap")
    router = b.target("hr-router", kind="mom")
    base_out = _outcomes(rng, len(qs), 0.85)
    # The router agrees with the strong model but on a few cases; the cheap one is far worse.
    router_out = [o if rng.random() < 0.9 else not o for o in base_out]
    cheap_out = _outcomes(rng, len(qs), 0.55)
    cost = {
        strong: [Decimal(rng.randint(900, 1500)) / Decimal(10**6) for _ in qs],
        cheap: [Decimal(rng.randint(50, 90)) / Decimal(10**6) for _ in qs],
        router: [Decimal(rng.randint(200, 1400)) / Decimal(10**6) for _ in qs],
    }
    neutral = {strong: Decimal("0.0015"), cheap: Decimal("0.0001"), router: Decimal("0.0009")}
    run = b.run(
        qs,
        {strong: base_out, cheap: cheap_out, router: router_out},
        costs=cost,
        neutral=neutral,
        split="holdout",
        non_inferiority_margin="0.3",
    )
    return run


def _recompute(run) -> dict[str, dict]:
    """Everything the headline states, from the run's Cell and Call rows alone."""
    correct: dict[str, dict[int, bool]] = defaultdict(dict)
    bench: dict[int, str] = {}
    for cell in Cell.objects.filter(run=run).values(
        "target__slug", "target__kind", "question_id", "benchmark", "correct"
    ):
        correct[cell["target__slug"]][cell["question_id"]] = bool(cell["correct"])
        bench[cell["question_id"]] = cell["benchmark"]
    cost: dict[str, Decimal] = defaultdict(Decimal)
    neutral: dict[str, Decimal] = defaultdict(Decimal)
    for call in Call.objects.filter(cell__run=run, role="subject").values(
        "cell__target__slug", "cost_usd", "cache_neutral_cost_usd"
    ):
        cost[call["cell__target__slug"]] += call["cost_usd"]
        neutral[call["cell__target__slug"]] += call["cache_neutral_cost_usd"]

    benchmarks = sorted(set(bench.values()))
    total = sum(SRBENCH_WEIGHTS[x] for x in benchmarks)
    w = {x: SRBENCH_WEIGHTS[x] / total for x in benchmarks}
    n = {x: sum(1 for q in bench if bench[q] == x) for x in benchmarks}

    def quality(slug: str) -> Fraction:
        return sum(
            (
                w[x] * Fraction(sum(correct[slug][q] for q in bench if bench[q] == x), n[x])
                for x in benchmarks
            ),
            Fraction(0),
        )

    base = max(("hr-strong", "hr-cheap"), key=quality)
    k = 2  # candidates compared against the baseline: the router and the other single model
    alpha = ALPHA / k
    radius = math.sqrt(2 * math.log(2 / alpha) * float(sum(w[x] ** 2 / n[x] for x in w)))
    out = {}
    for slug in ("hr-cheap", "hr-router"):
        diffs = {q: int(correct[slug][q]) - int(correct[base][q]) for q in bench}
        delta = sum(
            (
                w[x] * Fraction(sum(diffs[q] for q in bench if bench[q] == x), n[x])
                for x in benchmarks
            ),
            Fraction(0),
        )
        lower, upper = float(delta) - radius, float(delta) + radius
        if lower > 0:
            verdict = "better"
        elif lower > -float(MARGIN):
            verdict = "non_inferior"
        elif upper < 0:
            verdict = "worse"
        else:
            verdict = "inconclusive"
        out[slug] = {
            "baseline": base,
            "quality": quality(slug),
            "delta": delta,
            "lower": lower,
            "upper": upper,
            "level": 1 - alpha,
            "verdict": verdict,
            "wins": sum(d > 0 for d in diffs.values()),
            "losses": sum(d < 0 for d in diffs.values()),
            "ties": sum(d == 0 for d in diffs.values()),
            "n": len(bench),
            "cost": cost[slug],
            "base_cost": cost[base],
            # Exact ratios: the product states a rate with 34 significant digits.
            "savings": (1 - Fraction(cost[slug]) / Fraction(cost[base])) * 100,
            "neutral_savings": (1 - Fraction(neutral[slug]) / Fraction(neutral[base])) * 100,
        }
    return out


def _close(a: float, b_: float) -> bool:
    return abs(a - b_) < 1e-9


def _same_rate(text: str, exact: Fraction) -> bool:
    """A rate the product wrote (34 significant digits) is the exact ratio, to its digits."""
    return abs(Fraction(Decimal(text)) - exact) < Fraction(1, 10**28)


def _pct(value: Fraction) -> str:
    return f"{float(value):.1f}%"


def test_every_surface_states_the_recomputed_headline(client, capsys):
    run = _build()
    want = _recompute(run)
    # The scenario is the one the headline is for: a router kept, a cheap model worse.
    assert want["hr-router"]["verdict"] == "non_inferior"
    assert want["hr-cheap"]["verdict"] == "worse"
    assert want["hr-router"]["savings"] > 0

    user = f.user_create()
    api = APIClient()
    api.force_authenticate(user)
    body = {"baseline": run.pk, "candidates": [run.pk]}
    doc = api.post("/api/v1/compare/", body, format="json").json()
    exported = api.get(f"/api/v1/compare/export.json?baseline={run.pk}&candidates={run.pk}").json()
    rows = list(
        csv.DictReader(
            io.StringIO(
                api.get(
                    f"/api/v1/compare/export.csv?baseline={run.pk}&candidates={run.pk}"
                ).content.decode()
            )
        )
    )
    call_command("benchmark", "compare", str(run.pk), str(run.pk), "--json")
    cli_doc = json.loads(capsys.readouterr().out)
    call_command("benchmark", "compare", str(run.pk), str(run.pk))
    cli_text = capsys.readouterr().out
    client.force_login(user)
    page = client.get(f"/compare/?baseline={run.pk}&candidates={run.pk}&compare=1")
    assert page.status_code == 200
    page_text = page.content.decode()

    for source in (doc, exported, cli_doc):
        assert source["baseline"]["target"] == "hr-strong"
        assert Decimal(source["baseline"]["subject_cost_usd"]) == want["hr-router"]["base_cost"]
    for slug, w in want.items():
        for source in (doc, exported, cli_doc):
            c = next(x for x in source["comparisons"] if x["target"] == slug)
            assert Fraction(c["delta_exact"]) == w["delta"]
            assert Fraction(c["quality_exact"]) == w["quality"]
            fam = c["family_interval"]
            assert _close(fam["lower"], w["lower"]) and _close(fam["upper"], w["upper"])
            assert _close(fam["level"], w["level"])
            assert c["verdict"] == w["verdict"]
            assert (c["wins"], c["losses"], c["ties"]) == (w["wins"], w["losses"], w["ties"])
            assert c["questions"] == w["n"]
            assert Decimal(c["usage"]["subject_cost_usd"]) == w["cost"]
            assert _same_rate(c["savings"]["subject_cost_pct"], w["savings"])
            assert _same_rate(c["savings"]["cache_neutral_pct"], w["neutral_savings"])

        row = next(r for r in rows if r["row"] == "candidate" and r["target"] == slug)
        assert Fraction(row["delta_exact"]) == w["delta"]
        assert _close(float(row["family_lower"]), w["lower"])
        assert _close(float(row["family_upper"]), w["upper"])
        assert row["verdict"] == w["verdict"]
        assert (int(row["wins"]), int(row["losses"]), int(row["ties"])) == (
            w["wins"],
            w["losses"],
            w["ties"],
        )
        assert int(row["questions"]) == w["n"]
        assert Decimal(row["subject_cost_usd"]) == w["cost"]
        assert _same_rate(row["subject_savings_pct"], w["savings"])
        assert _same_rate(row["cache_neutral_savings_pct"], w["neutral_savings"])

        family = f"[{w['lower']:+.4f}, {w['upper']:+.4f}]"
        line = next(x for x in cli_text.splitlines() if x.startswith(f"run {run.pk} / {slug} "))
        assert f"{float(w['delta']):+.4f}" in line and family in line
        assert f"{w['wins']}/{w['losses']}/{w['ties']}" in line
        assert _pct(w["savings"]) in line and _pct(w["neutral_savings"]) in line

        card = re.search(
            rf'<article class="result-card" id="card-{run.pk}-{slug}".*?</article>',
            page_text,
            re.S,
        ).group(0)
        assert f'data-verdict="{w["verdict"]}"' in card
        assert f"{float(w['delta']):+.4f}" in card and family in card
        assert _pct(w["savings"]) in card and _pct(w["neutral_savings"]) in card
        assert f"paired on {w['n']} identical questions" in card

    r = want["hr-router"]
    sentence = headline_sentence(doc, "hr-router", run.pk)
    assert sentence.startswith("Does hr-router keep hr-strong's quality at lower cost? Yes — ")
    assert f"Δ {float(r['delta']):+.4f}" in sentence
    assert f"97.5% family-wise interval [{r['lower']:+.4f}, {r['upper']:+.4f}]" in sentence
    assert f"on {r['n']:,} holdout questions" in sentence
    assert f"subject cost {_pct(r['savings'])} lower" in sentence
    assert f"cache-neutral {_pct(r['neutral_savings'])} lower" in sentence
    # The same sentence on the Compare page's card and in the CLI's table (it was the demo's
    # only: a newcomer comparing two runs had to assemble it from the figures).
    card = re.search(
        rf'<article class="result-card" id="card-{run.pk}-hr-router".*?</article>', page_text, re.S
    ).group(0)
    assert sentence in html.unescape(card)
    assert f"    {sentence}" in cli_text.splitlines()
