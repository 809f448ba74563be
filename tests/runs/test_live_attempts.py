"""Live and final numbers follow one rule (issue 35 item 4).

A 2-attempt run part-way through: every live interval equals the final report's interval of the
cells completed so far, recomputed here from the cells (Wilson from its formula, n = questions);
once a benchmark's cells are all completed it equals `run_report_compute`'s; the header's
progress and the Results section's counts are the same numbers, and the poll refreshes both;
the page and the CLI say the interval's n in questions."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from fractions import Fraction

import pytest
from django.utils import timezone

from runs.interfaces.cli import report_text
from runs.models import Cell, Run
from runs.reporting.report import run_report, run_report_compute
from srbench.figures_text import figure_text
from tests import factories as f
from tests.runs.test_pages import manifest_for

pytestmark = pytest.mark.django_db(transaction=True)

Z = 1.959963984540054
POLL = {"HX-Request": "true", "HX-Target": "run-live"}
ROW = re.compile(
    r'<tr class="partial-row" data-benchmark="([a-z-]+)" data-target="([^"]+)">.*?'
    r'<td class="num partial-interval">\[([0-9.]+), ([0-9.]+)\]'
    r' <span class="meta n-questions">n = (\d+) questions? \((\d+)/(\d+) attempts\)</span>',
    re.S,
)


def wilson(score: Fraction, n: int) -> tuple[float, float]:
    p = float(score / n)
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return (0.0 if score == 0 else centre - half, 1.0 if score == n else centre + half)


def expected(run: Run) -> dict[tuple[str, str], tuple[int, tuple[float, float]]]:
    """Per (target, benchmark): n = questions with a completed attempt, and Wilson on the sum
    of their scores (each the mean over its completed attempts), counted here from the cells."""
    per_q: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    for slug, bench, qid, correct in Cell.objects.filter(
        run_id=run.pk, status="completed"
    ).values_list("target__slug", "benchmark", "question_id", "correct"):
        per_q[(slug, bench, qid)][0] += correct is True
        per_q[(slug, bench, qid)][1] += 1
    sums: dict[tuple[str, str], list] = defaultdict(lambda: [0, Fraction(0)])
    for (slug, bench, _), (c, k) in per_q.items():
        sums[(slug, bench)][0] += 1
        sums[(slug, bench)][1] += Fraction(c, k)
    return {key: (n, wilson(s, n)) for key, (n, s) in sums.items()}


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    client.force_login(f.user_create(username="alice"))
    return client


def two_attempt_run() -> Run:
    """12 mmlu-pro questions and 6 arc questions, 2 attempts each, for one target: part-way
    through, arc complete and mmlu-pro with some questions half done and some not started."""
    target = f.target_create(slug="subject-a")
    manifest = {**manifest_for([target], benchmarks=("mmlu-pro", "arc")), "slots": 2}
    run = f.run_create(status="running", started_at=timezone.now(), manifest=manifest)
    cells = []
    for bench, n in (("mmlu-pro", 12), ("arc", 6)):
        for i in range(n):
            q = f.question_create(benchmark=bench)
            for slot in (0, 1):
                done = bench == "arc" or i < 6 or (i < 9 and slot == 0)
                status = "completed" if done else ("running" if i == 11 else "pending")
                correct = (i + slot) % 3 != 0 if done else None
                cells.append(
                    Cell(
                        run=run,
                        question=q,
                        target=target,
                        benchmark=bench,
                        slot=slot,
                        status=status,
                        correct=correct,
                        scored=done,
                    )
                )
    Cell.objects.bulk_create(cells)
    return run


def test_live_intervals_are_the_final_reports_and_say_n_in_questions(member):
    run = two_attempt_run()
    want = expected(run)
    assert want[("subject-a", "mmlu-pro")][0] == 9  # 6 questions whole, 3 half done
    html = member.get(f"/runs/{run.pk}/?tab=results").content.decode()
    poll = member.get(f"/runs/{run.pk}/?tab=results&was=active", headers=POLL).content.decode()
    for page in (html, poll):
        rows = ROW.findall(page)
        assert len(rows) == 2, page[:2000]
        for bench, slug, low, high, n, correct, completed in rows:
            n_q, (w_low, w_high) = want[(slug, bench)]
            assert int(n) == n_q
            assert (float(low), float(high)) == (round(w_low, 3), round(w_high, 3))
            done = Cell.objects.filter(run=run, benchmark=bench, status="completed")
            assert int(completed) == done.count()
            assert int(correct) == done.filter(correct=True).count()
    # arc is complete: its live interval is exactly the final report's at this moment.
    final = run_report_compute(run=run).target("subject-a").benchmarks["arc"]
    assert final.questions == 6 and final.wilson_95 == pytest.approx(want[("subject-a", "arc")][1])


def counters_of(html: str) -> dict[str, int]:
    block = re.search(r'<div id="results-counters"[^>]*>(.*?)</div>', html, re.S).group(1)
    return {
        k: int(v) for k, v in re.findall(r"<dt>([^<]+)</dt><dd class=\"num\">(\d+)</dd>", block)
    }


def header_of(html: str) -> tuple[int, int, int]:
    m = re.search(
        r'id="progress-completed">(\d+)</strong> / <span id="progress-planned">(\d+)</span>'
        r'.*?id="progress-failed">(\d+)<',
        html,
        re.S,
    )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def test_header_and_results_counters_agree_and_the_poll_refreshes_both(member):
    run = two_attempt_run()
    html = member.get(f"/runs/{run.pk}/?tab=results").content.decode()
    counts = counters_of(html)
    assert header_of(html) == (counts["Completed"], counts["Denominator"], counts["Failed"])
    assert counts["Denominator"] == 36 and counts["Completed"] == 12 + 12 + 3
    assert "run is running" in html and "run is queued" not in html
    # Cells move on: the poll carries the header and the Results counts, the same numbers.
    Cell.objects.filter(run=run, status="pending").update(status="failed")
    poll = member.get(f"/runs/{run.pk}/?tab=results&was=active", headers=POLL).content.decode()
    assert 'id="results-counters" hx-swap-oob="true"' in poll
    counts = counters_of(poll)
    assert header_of(poll) == (counts["Completed"], counts["Denominator"], counts["Failed"])
    assert counts["Failed"] == Cell.objects.filter(run=run, status="failed").count() > 0


def test_a_queued_runs_header_and_results_agree(member):
    run = two_attempt_run()
    Run.objects.filter(pk=run.pk).update(status="queued", started_at=None)
    html = member.get(f"/runs/{run.pk}/?tab=results").content.decode()
    counts = counters_of(html)
    assert header_of(html) == (counts["Completed"], counts["Denominator"], counts["Failed"])
    assert "run is queued" in html


def test_the_ended_runs_results_and_cli_say_n_in_questions(member):
    run = two_attempt_run()
    Cell.objects.filter(run=run).exclude(status="completed").update(status="completed")
    Run.objects.filter(pk=run.pk).update(status="completed", finished_at=timezone.now())
    run.refresh_from_db()
    doc = run_report(run=run)
    row = doc["targets"][0]["benchmarks"]["mmlu-pro"]
    assert (row["planned"], row["questions"]) == (24, 12)
    low, high = row["wilson_95"]
    text = report_text(doc)
    assert (
        f"{row['correct']}/24 attempts = {figure_text(row['accuracy'], 3)} [{low:.3f}, {high:.3f}], "
        "n = 12 questions" in text
    )
    html = member.get(f"/runs/{run.pk}/?tab=results").content.decode()
    assert f"n = 12 questions ({row['correct']}/24 attempts)" in html
    assert "n = 6 questions" in html  # arc
