"""Issue 35's browser acceptance for what the run page says, in Chromium:

- a 2-attempt run watched live: after every poll, every live interval equals the interval
  recomputed here from the cells at that moment (Wilson, n = questions), equals the final
  report's once its benchmark is complete, and the header and the Results counters agree;
- a run that left a benchmark out names it with its reason on the run page, and the data
  provenance label sits beside synthetic and fixture scores on the run page, the runs list and
  the comparison — with sources prepared through the real prepare path (a synthetic file, the
  bundled fixture).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from datasets.profiles import DEFAULT_SEED
from datasets.provenance import FIXTURE, SYNTHETIC
from datasets.services import dataset_compose, source_prepare
from datasets.synthetic import write_synthetic
from runs.engine.finish import run_report_keep
from runs.models import Cell, Run
from runs.reporting.export import export_csv, export_matrix
from runs.reporting.report import run_report_compute
from tests.compare import builders as b
from tests.runs.test_live_attempts import expected, two_attempt_run

INTERVAL = re.compile(r"\[([0-9.]+), ([0-9.]+)\]\s*n = (\d+) questions? \((\d+)/(\d+) attempts\)")


def live_rows(page: Any) -> dict[tuple[str, str], tuple[float, float, int, int, int]]:
    """(target, benchmark) → (low, high, n questions, correct, completed) as the page shows."""
    out = {}
    for row in page.locator("tr.partial-row").all():
        text = row.locator("td.partial-interval").inner_text()
        m = INTERVAL.search(text)
        assert m, text
        key = (row.get_attribute("data-target"), row.get_attribute("data-benchmark"))
        out[key] = (float(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5]))
    return out


def counters(page: Any) -> dict[str, int]:
    block = page.locator("#results-counters")
    names = [t.strip() for t in block.locator("dt").all_inner_texts()]
    values = [int(v) for v in block.locator("dd").all_inner_texts()]
    return dict(zip(names, values, strict=True))


def header(page: Any) -> tuple[int, int, int]:
    return (
        int(page.locator("#progress-completed").inner_text()),
        int(page.locator("#progress-planned").inner_text()),
        int(page.locator("#progress-failed").inner_text()),
    )


def check_the_moment(page: Any, run: Run) -> None:
    """What the page shows now against the cells now (the page has caught up: the caller
    waited for the header to show the completed count the database holds)."""
    want = expected(run)
    shown = live_rows(page)
    assert set(shown) == set(want), (shown, want)
    for key, (low, high, n, correct, completed) in shown.items():
        n_q, (w_low, w_high) = want[key]
        assert n == n_q, (key, n, n_q)
        assert (low, high) == (round(w_low, 3), round(w_high, 3)), (key, low, high, w_low, w_high)
        done = Cell.objects.filter(run=run, benchmark=key[1], status="completed")
        assert (completed, correct) == (done.count(), done.filter(correct=True).count())
    counts = counters(page)
    assert header(page) == (counts["Completed"], counts["Denominator"], counts["Failed"])
    # A benchmark whose cells are all in: its live interval is the final report's.
    final = run_report_compute(run=run).target("subject-a")
    for (_slug, bench), (low, high, *_rest) in shown.items():
        if not Cell.objects.filter(run=run, benchmark=bench).exclude(status="completed").exists():
            f_low, f_high = final.benchmarks[bench].wilson_95
            assert (low, high) == (round(f_low, 3), round(f_high, 3)), (bench, low, high)


@pytest.mark.django_db(transaction=True)
def test_a_two_attempt_run_watched_live_shows_the_final_rule_at_every_poll(
    logged_in_page: Any, live_server: Any
) -> None:
    page = logged_in_page
    run = two_attempt_run()
    page.goto(f"{live_server.url}/runs/{run.pk}/?tab=results")
    steps = 0
    while True:
        completed = Cell.objects.filter(run=run, status="completed").count()
        expect(page.locator("#progress-completed")).to_have_text(str(completed))
        check_the_moment(page, run)
        waiting = list(Cell.objects.filter(run=run).exclude(status="completed").order_by("pk")[:5])
        if not waiting:
            break
        # The run moves on: the next five cases get their results, some right, some wrong.
        for i, cell in enumerate(waiting):
            Cell.objects.filter(pk=cell.pk).update(
                status="completed", correct=(cell.pk + i) % 2 == 0, scored=True
            )
        steps += 1
    assert steps >= 2  # the page was checked at three moments or more, the last complete


@pytest.mark.django_db(transaction=True)
def test_not_run_benchmarks_and_data_provenance_are_named_beside_the_scores(
    logged_in_page: Any, live_server: Any, tmp_path: Any
) -> None:
    synthetic = write_synthetic("mmlu-pro", tmp_path / "mmlu-pro", 40, DEFAULT_SEED)
    sources = [
        source_prepare(benchmark="mmlu-pro", profile="smoke", source_path=synthetic),
        source_prepare(benchmark="gpqa", profile="smoke"),  # the bundled fixture
    ]
    dataset = dataset_compose(sources=sources, name="labels")
    qs = list(dataset.questions.order_by("pk"))
    left_out = [
        {
            "benchmark": "scicode",
            "reason": "scicode: SciCode's test data (test_data.h5) is not configured on this "
            "server",
            "questions": 2,
        }
    ]
    strong, router = b.target("label-strong"), b.target("label-router", kind="mom")
    baseline, candidate = (
        b.run(qs, {t: [i % k != 0 for i in range(len(qs))]}, dataset=dataset, not_run=left_out)
        for t, k in ((strong, 3), (router, 2))
    )
    Run.objects.filter(pk=candidate.pk).update(name="labelled run")
    for run in (baseline, candidate):
        run_report_keep(run_id=run.pk)
    # The export carries the label beside every answer, and per benchmark (CSV and JSON).
    matrix = export_matrix(run_id=candidate.pk)
    assert matrix["data_provenance"] == {"mmlu-pro": SYNTHETIC, "gpqa": FIXTURE}
    assert {(r["benchmark"], r["data"]) for r in matrix["rows"]} == {
        ("mmlu-pro", SYNTHETIC),
        ("gpqa", FIXTURE),
    }
    exported = list(csv.DictReader(io.StringIO(export_csv(matrix))))
    assert len(exported) == len(qs)
    assert {(r["benchmark"], r["data"]) for r in exported} == {
        ("mmlu-pro", SYNTHETIC),
        ("gpqa", FIXTURE),
    }
    page = logged_in_page

    page.goto(f"{live_server.url}/runs/{candidate.pk}/")
    left = page.locator('#not-run li[data-benchmark="scicode"]')
    expect(left).to_contain_text("2 questions")
    expect(left).to_contain_text("SciCode's test data (test_data.h5) is not configured")
    expect(page.locator('td.provenance[data-benchmark="mmlu-pro"]')).to_have_text(SYNTHETIC)
    expect(page.locator('td.provenance[data-benchmark="gpqa"]')).to_have_text(FIXTURE)

    page.goto(f"{live_server.url}/")
    row = page.locator("tr", has=page.get_by_role("link", name="labelled run")).first
    # Beside the score: a summary line, and each benchmark's label one click away.
    expect(row.locator("details.provenance summary")).to_contain_text("synthetic or fixture")
    row.locator("details.provenance summary").click()
    labels = row.locator("details.provenance").inner_text()
    assert SYNTHETIC in labels and FIXTURE in labels, labels

    page.goto(
        f"{live_server.url}/compare/?baseline={baseline.pk}&candidates={candidate.pk}&compare=1"
    )
    card = page.locator(f"#card-{candidate.pk}-label-router")
    expect(card.locator('td.provenance[data-benchmark="mmlu-pro"]')).to_have_text(SYNTHETIC)
    expect(card.locator('td.provenance[data-benchmark="gpqa"]')).to_have_text(FIXTURE)
