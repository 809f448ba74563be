"""The Compare page and the API document show the same numbers (issue 36 item 3): every figure
a result card, the legend and the baseline box print is the API's value worded by the one set of
presenters (srbench/presenters.py, srbench/money.py) — known, unknown and partial costs alike —
and the headline sentence is worded by the same presenters."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from compare.headline import headline_sentence
from srbench.figures_text import signed_interval_text
from srbench.money import percent_text, usd_text
from srbench.presenters import (
    UNKNOWN_HTML,
    percent_html,
    signed_text,
    usd_html,
)
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def _card(page: str, c: dict) -> str:
    match = re.search(
        rf'<article class="result-card" id="card-{c["run"]}-{c["target"]}".*?</article>',
        page,
        re.S,
    )
    assert match, f"no card for run {c['run']} / {c['target']}"
    return match.group(0)


def _cells(card: str, cls: str) -> list[str]:
    return re.findall(rf'<td class="num {cls}"[^>]*>(.*?)</td>', card, re.S)


def _cost_rows(card: str) -> list[list[str]]:
    rows = re.findall(r'<tr class="cost-row">(.*?)</tr>', card, re.S)
    return [re.findall(r'<td class="num[^"]*"[^>]*>(.*?)</td>', row, re.S) for row in rows]


def test_the_page_and_the_api_document_show_the_same_numbers(client) -> None:
    user = f.user_create()
    client.force_login(user)
    api = APIClient()
    api.force_authenticate(user)
    qs = b.questions({"mmlu-pro": 4})
    base = b.target("base")
    a = b.run(qs, {base: [True, False, True, False]}, costs={base: Decimal("0.01")})
    router = b.target("router", kind="mom")
    cheap = b.run(qs, {router: [True, True, True, False]}, costs={router: Decimal("0.004")})
    unknown = b.run(qs, {router: [True, False, True, True]}, costs={router: [None] * 4})
    selection = [cheap.pk, unknown.pk]

    answer = api.post(
        "/api/v1/compare/", {"baseline": a.pk, "candidates": selection}, format="json"
    )
    assert answer.status_code == 200, answer.content
    doc = answer.json()
    from compare.views import compare_url

    page = client.get(compare_url(baseline=a.pk, candidates=selection, compare=True))
    assert page.status_code == 200
    text = page.content.decode()

    assert len(doc["comparisons"]) == 2
    for c in doc["comparisons"]:
        card = _card(text, c)
        assert _cells(card, "delta") == [signed_text(c["delta"])]
        lo, hi = c["interval"]["display_lower"], c["interval"]["display_upper"]
        clipped = " (clipped to [−1, +1])" if c["interval"].get("clipped") else ""
        assert _cells(card, "interval") == [signed_interval_text(lo, hi) + clipped]
        assert f"{c['quality']:.4f}" in card
        assert f'data-verdict="{c["verdict"]}"' in card and c["verdict_label"] in card
        base_usage, usage, savings = doc["baseline"]["usage"], c["usage"], c["savings"]
        costs = _cost_rows(card)
        assert [row[:2] for row in costs] == [
            [usd_html(base_usage[k]), usd_html(usage[k])]
            for k in ("subject_cost_usd", "total_spend_usd", "cache_neutral_cost_usd")
        ]
        assert [row[2] for row in costs] == [
            percent_html(savings[k])
            for k in ("subject_cost_pct", "total_spend_pct", "cache_neutral_pct")
        ]
        # The headline sentence says the same figures in words.
        sentence = headline_sentence(doc, c["target"], c["run"])
        assert (
            signed_interval_text(
                c["family_interval"]["display_lower"], c["family_interval"]["display_upper"]
            )
            in sentence
        )
        if savings["subject_cost_pct"] is not None:
            assert percent_text(savings["subject_cost_pct"]) in sentence

    by_run = {c["run"]: c for c in doc["comparisons"]}
    # A known saving and an unknown one: the page never shows the unknown as 0.
    assert percent_html(by_run[cheap.pk]["savings"]["subject_cost_pct"]) == "60.0%"
    assert by_run[unknown.pk]["savings"]["subject_cost_pct"] is None
    assert _cost_rows(_card(text, by_run[unknown.pk]))[0][2] == UNKNOWN_HTML
    # The baseline box: its quality and cost are the document's.
    assert f"{doc['baseline']['quality']:.4f}" in text
    assert usd_text(doc["baseline"]["subject_cost_usd"]) in text
