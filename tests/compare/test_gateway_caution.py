"""A comparison whose baseline or candidate was answered through a LiteLLM gateway that no
target check looked at carries the runs' `usage_caution` to where a user decides on the savings
(fourth outside probe, R5.3/R5.4, docs/decisions.md "jc: a comparison's usage caution"): the
result card, the baseline box, the API's JSON and the headline sentence. The savings stay as
computed from the recorded costs (the report's rule: the costs stay as recorded); the answer's
cost part is "not verified" rather than "Yes".

Constructed: 100 dev questions, the baseline right on 50, the candidate on all (Δ = 0.5, its
lower bound 0.5 − sqrt(2·ln 40 / 100) ≈ 0.228 > 0: better); subject cost $0.001 a case for the
baseline, $0.0004 for the candidate: 60.0% lower."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from compare.api import comparison_csv
from compare.headline import headline_sentence
from compare.views import compare_url
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

D = Decimal
ANSWERED = {"response_headers": {"x-litellm-version": "1.110.2"}}
CAUTION = "were answered through a LiteLLM gateway and the plan froze no target check of it"


def _compared(gateway_side: str | None):
    n = 100
    qs = b.questions({"mmlu-pro": n})
    base_t = b.target(f"gc-base-{next(b._seq)}")
    cand_t = b.target(f"gc-router-{next(b._seq)}", kind="mom")
    base_fields = {base_t: ANSWERED} if gateway_side == "baseline" else None
    cand_fields = {cand_t: ANSWERED} if gateway_side == "candidate" else None
    base_out = [i < 50 for i in range(n)]
    baseline = b.run(qs, {base_t: base_out}, costs={base_t: D("0.001")}, call_fields=base_fields)
    candidate = b.run(
        qs, {cand_t: [True] * n}, costs={cand_t: D("0.0004")}, call_fields=cand_fields
    )
    user = f.user_create()
    api = APIClient()
    api.force_authenticate(user)
    answer = api.post(
        "/api/v1/compare/", {"baseline": baseline.pk, "candidates": [candidate.pk]}, format="json"
    )
    assert answer.status_code == 200, answer.content
    return user, baseline, candidate, answer.json()


def _card(page: str, c: dict) -> str:
    match = re.search(
        rf'<article class="result-card" id="card-{c["run"]}-{c["target"]}".*?</article>',
        page,
        re.S,
    )
    assert match
    return match.group(0)


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_savings_against_a_side_an_unchecked_gateway_answered_carry_its_caution(client, side):
    user, baseline, candidate, doc = _compared(side)
    (c,) = doc["comparisons"]
    # The savings are still computed from the recorded costs ...
    assert c["savings"]["subject_cost_pct"] == "60"
    # ... and say they may be wrong, naming the side, in the API's JSON.
    caution = c["savings"]["caution"]
    entry = baseline if side == "baseline" else candidate
    target = doc["baseline"]["target"] if side == "baseline" else c["target"]
    assert caution.startswith("these savings may be wrong: the ")
    assert f"the {side}'s (run {entry.pk} / {target})" in caution
    assert CAUTION in caution
    usage = doc["baseline"]["usage"] if side == "baseline" else c["usage"]
    other = c["usage"] if side == "baseline" else doc["baseline"]["usage"]
    assert CAUTION in usage["usage_caution"] and other["usage_caution"] is None
    assert caution in comparison_csv(doc)  # the export's `savings_caution` column

    # The card a user decides on says it beside the savings.
    client.force_login(user)
    page = client.get(compare_url(baseline=baseline.pk, candidates=[candidate.pk], compare=True))
    assert page.status_code == 200
    text = page.content.decode()
    card = _card(text, c)
    assert f'id="savings-caution-{c["run"]}-{c["target"]}"' in card
    assert "these savings may be wrong" in card and CAUTION in card
    # The legend under the charts marks the savings it lists, linking to the card's words.
    legend = re.search(r'<table class="[^"]*" id="chart-legend">.*?</table>', text, re.S)
    assert legend and 'class="usage-caution-mark"' in legend.group(0)

    # The headline's answer does not say "Yes" to a lower cost it cannot vouch for.
    sentence = headline_sentence(doc, c["target"], candidate.pk)
    assert "? Better quality; lower cost not verified — better" in sentence
    assert "subject cost 60.0% lower" in sentence and sentence.endswith(f"; {caution}.")


def test_savings_where_no_gateway_answered_carry_no_caution(client):
    user, baseline, candidate, doc = _compared(None)
    (c,) = doc["comparisons"]
    assert c["savings"]["caution"] is None
    assert doc["baseline"]["usage"]["usage_caution"] is None
    client.force_login(user)
    page = client.get(compare_url(baseline=baseline.pk, candidates=[candidate.pk], compare=True))
    assert "savings-caution" not in page.content.decode()
    assert "usage-caution-mark" not in page.content.decode()
    assert "? Yes, and better — better" in headline_sentence(doc, c["target"], candidate.pk)
