"""The Compare page's table of every compared candidate shows the interval its verdict stands
on (outside probe "ka", 2026-12-07). With two or more candidates the verdict reads the
family-wise interval (Bonferroni), but the table put only the single-comparison 95% interval
beside it: a router whose 95% interval lay wholly below 0 read "[-0.2758, -0.0042] …
Inconclusive", a verdict the row itself seemed to contradict, while the CLI's table prints both
intervals. The row now carries the family-wise interval too, at its level."""

from __future__ import annotations

import math
import re

import pytest

from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

N = 400
LOSSES = 56  # Δ = −0.14: outside the 95% radius (0.1358), inside the 97.5% one (0.1480)


def test_the_legend_row_shows_the_family_interval_the_verdict_reads(client):
    qs = b.questions({"mmlu-pro": N})
    base, other, router = b.target("lf-base"), b.target("lf-other"), b.target("lf-r", kind="mom")
    run = b.run(
        qs,
        {
            base: [True] * N,
            other: [i % 2 == 0 for i in range(N)],
            router: [i >= LOSSES for i in range(N)],
        },
    )
    client.force_login(f.user_create())
    page = client.get(f"/compare/?baseline={run.pk}&candidates={run.pk}&compare=1")
    assert page.status_code == 200
    text = page.content.decode()
    legend = re.search(r'<table class="[^"]*" id="chart-legend">.*?</table>', text, re.S).group(0)
    row = re.search(r'<tr data-run="\d+" data-target="lf-r">.*?</tr>', legend, re.S).group(0)

    delta = -LOSSES / N
    single = math.sqrt(2 * math.log(2 / 0.05) / N)
    family = math.sqrt(2 * math.log(2 / 0.025) / N)
    assert delta + single < 0 < delta + family  # the case this test is about
    assert f"[{delta - single:+.4f}, {delta + single:+.4f}]" in row
    assert 'data-verdict="inconclusive"' in row
    # The interval the verdict reads, at its level, in the same row and the table's heading.
    assert f"[{delta - family:+.4f}, {delta + family:+.4f}]" in row
    assert "97.5% family-wise interval" in legend
