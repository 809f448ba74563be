"""One card, one rounding (outside probe): every figure of a Compare result card that is the
same number is printed the same way. With a single benchmark the weighted Δ *is* that
benchmark's mean Δ, so the card's two cells must read alike; and the family-wise level the card
names is the level its verdict quotes. Expected texts are written out here from the outcomes,
not taken from the product."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from compare.views import compare_url
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def _card(page: str, run: int, target: str) -> str:
    match = re.search(
        rf'<article class="result-card" id="card-{run}-{target}".*?</article>', page, re.S
    )
    assert match, f"no card for run {run} / {target}"
    return match.group(0)


def test_a_lone_benchmarks_mean_difference_reads_as_the_weighted_delta(client) -> None:
    """32 GPQA questions, the candidate wins one: Δ = 1/32 = 0.03125 exactly, a tie at the
    fourth decimal. The card printed "+0.0312" as the weighted Δ and "0.0313" as the same
    benchmark's mean Δ (Django's floatformat rounds half up, the card's other figures half to
    even, and dropped the sign)."""
    client.force_login(f.user_create())
    qs = b.questions({"gpqa": 32})
    base, cand = b.target("base"), b.target("cand", kind="mom")
    run = b.run(qs, {base: [False] * 32, cand: [True] + [False] * 31})

    page = client.get(compare_url(baseline=run.pk, candidates=[run.pk], compare=True))
    card = _card(page.content.decode(), run.pk, "cand")

    assert re.findall(r'<td class="num delta"[^>]*>(.*?)</td>', card) == ["+0.0312"]
    row = re.search(r"<tr><td>gpqa</td>(.*?)</tr>", card, re.S)
    assert row, card
    cells = re.findall(r'<td class="num"[^>]*>(.*?)</td>', row.group(1))
    # questions, weight, mean Δ, W / L / T
    assert cells == ["32", "1", "+0.0312", "1 / 0 / 31"], cells


def test_the_family_wise_level_is_written_as_the_verdict_writes_it(client, capsys) -> None:
    """Two candidates: the family-wise level is 1 − 0.05/2 = 97.5 %. The verdict's reason says
    "97.5%"; the card's row and the CLI's column said "97.50%" for the same interval."""
    ops = f.user_create(username="ops-level", staff=True)
    client.force_login(ops)
    qs = b.questions({"mmlu-pro": 6})
    base, one, two = b.target("base"), b.target("one", kind="mom"), b.target("two", kind="mom")
    run = b.run(qs, {base: [True, False] * 3, one: [True] * 6, two: [False] * 6})

    page = client.get(compare_url(baseline=run.pk, candidates=[run.pk], compare=True))
    card = _card(page.content.decode(), run.pk, "one")
    assert "97.5% family-wise interval" in card
    assert "Family-wise interval (97.5%, Bonferroni over 2)" in card, card
    assert "97.50%" not in card

    capsys.readouterr()
    call_command("benchmark", "compare", str(run.pk), str(run.pk), "--user", "ops-level")
    out = capsys.readouterr().out
    assert "97.5% family " in out.splitlines()[1], out
    assert "97.50%" not in out, out


def test_the_non_inferiority_row_writes_the_level_as_the_verdict_writes_it(client) -> None:
    """A margin frozen on holdout cases, two candidates: the card's non-inferiority row said
    "of the 97.50% weighted Hoeffding … interval" under a verdict that says "97.5%" (the demo's
    headline comparison, third outside probe)."""
    client.force_login(f.user_create(username="ops-ni"))
    qs = b.questions({"mmlu-pro": 6})
    base, one, two = b.target("base"), b.target("one", kind="mom"), b.target("two", kind="mom")
    run = b.run(
        qs,
        {base: [True] * 6, one: [True] * 6, two: [False] * 6},
        split="holdout",
        non_inferiority_margin="0.1",
    )

    page = client.get(compare_url(baseline=run.pk, candidates=[run.pk], compare=True))
    card = _card(page.content.decode(), run.pk, "one")
    row = re.search(r'<td class="non-inferiority">(.*?)</td>', card, re.S)
    assert row, card
    assert "of the 97.5% weighted Hoeffding, Bonferroni over 2 interval" in row.group(1), row
    assert "97.50%" not in card
