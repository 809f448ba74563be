"""A difference of accuracies lies in [−1, 1], so every interval of Δ is quoted clipped to that
range, the same numbers in the card's table and in the sentences beside it (outside probe,
session 5: the verdict quoted −1.1748 next to the table's −1.0000). On four questions the
Hoeffding interval reaches past both ends."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from compare.headline import headline_sentence
from compare.views import compare_url
from tests import factories as f
from tests.compare import builders as b
from tests.compare.test_page_matches_api import _card

pytestmark = pytest.mark.django_db

BOUND = re.compile(r"[+\-−]\d+\.\d{4}")


def bounds_in(text: str) -> list[float]:
    return [float(m.replace("−", "-")) for m in BOUND.findall(text)]


def test_the_verdict_sentence_quotes_the_tables_clipped_interval(client) -> None:
    user = f.user_create()
    client.force_login(user)
    api = APIClient()
    api.force_authenticate(user)
    qs = b.questions({"mmlu-pro": 4})
    base = b.target("base")
    a = b.run(qs, {base: [True, False, True, False]}, costs={base: Decimal("0.01")})
    router = b.target("router", kind="mom")
    cand = b.run(qs, {router: [True, True, True, False]}, costs={router: Decimal("0.004")})

    doc = api.post(
        "/api/v1/compare/", {"baseline": a.pk, "candidates": [cand.pk]}, format="json"
    ).json()
    c = doc["comparisons"][0]
    assert c["family_interval"]["lower"] < -1 and c["family_interval"]["upper"] > 1  # raw
    html = client.get(compare_url(baseline=a.pk, candidates=[cand.pk], compare=True))
    card = _card(html.content.decode(), c)

    table = re.search(r'<td class="num interval">(.*?)</td>', card, re.S).group(1)
    assert table.startswith("[-1.0000, +1.0000]"), table
    sentence = re.search(r'<p class="verdict.*?</p>', card, re.S).group(0)
    assert "[-1.0000, +1.0000]" in sentence, sentence
    non_inferiority = re.search(r'<td class="non-inferiority">(.*?)</td>', card, re.S).group(1)
    legend = html.content.decode().split('id="card-')[0]
    for text in (sentence, non_inferiority, c["verdict_reason"], legend):
        assert all(-1 <= v <= 1 for v in bounds_in(text)), text
    assert "[-1.0000, +1.0000]" in c["verdict_reason"]
    assert "[-1.0000, +1.0000]" in headline_sentence(doc, c["target"], c["run"])
