"""The CLI's report says a run's score and wall time with the page's digits (fourth outside
probe, item 3: it printed `0.9202380952380952` and `wall 36.142329s`), rounded as the page
rounds them (half up: 0.03125 → 0.0313 on both); `--json` keeps the full values."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from runs.models import Run
from tests import factories as f
from tests.cli_support import bench
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

WALL = 36.25  # a tie at one decimal: the page says 36.3


def scored_run() -> Run:
    """32 MMLU-Pro questions: one target 1 of 32 right (0.03125), the other 29 (0.90625) —
    both ties at four decimals."""
    qs = b.questions({"mmlu-pro": 32})
    low, high = b.target("m-low"), b.target("m-high")
    run = b.run(qs, {low: [True] + [False] * 31, high: [True] * 29 + [False] * 3})
    Run.objects.filter(pk=run.pk).update(started_at=run.finished_at - timedelta(seconds=WALL))
    return run


def test_the_cli_report_says_the_pages_digits_and_json_keeps_full_precision(client, capsys):
    ops = f.user_create(username="ops", staff=True)
    client.force_login(ops)
    run = scored_run()

    page = client.get(f"/runs/{run.pk}/", {"tab": "results"}).content.decode()
    code, out, err = bench(capsys, "report", str(run.pk), "--user", "ops")
    assert code == 0, err

    assert "<strong>0.0313</strong>" in page and "<strong>0.9063</strong>" in page
    assert re.search(r"m-low \(single\): [a-z -]+ 0\.0313  ", out), out
    assert re.search(r"m-high \(single\): [a-z -]+ 0\.9063  ", out), out
    assert "36.3 s" in page and "  wall 36.3s" in out
    # A benchmark's accuracy: three decimals on both (0.03125 → 0.031, 0.90625 → 0.906).
    assert len(re.findall(r'<td class="num"[^>]*>0\.031</td>', page)) == 1
    assert "1/32 = 0.031 [" in out
    assert len(re.findall(r'<td class="num"[^>]*>0\.906</td>', page)) == 1
    assert "29/32 = 0.906 [" in out
    assert "0.03125" not in out and "36.25" not in out

    code, out, err = bench(capsys, "report", str(run.pk), "--user", "ops", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run"]["wall_seconds"] == WALL
    assert {t["slug"]: t["score"]["value"] for t in doc["targets"]} == {
        "m-low": 0.03125,
        "m-high": 0.90625,
    }
