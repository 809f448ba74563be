"""The fourth outside probe (a newcomer at a phone's 390 px): the runs list and the Compare
page's table of every compared candidate scrolled sideways, and the answers a user came for —
a run's status, score and spend; a candidate's Δ quality, savings and verdict — sat behind the
scroll; so were a run's per-benchmark accuracy and interval and Compare's "Use as baseline".
At 390 px each row of those tables stacks into a block whose cells are named (their column's
heading, from data-label), nothing needs sideways scrolling, and every key cell is in sight; at
1280 px they stay ordinary tables, one line per row (SPEC R7, R11.4)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from compare.views import compare_url
from runs.engine.finish import run_report_keep
from runs.models import Run
from tests.compare import builders as b
from tests.e2e.conftest import SCREENSHOTS

pytestmark = pytest.mark.e2e

# For each wanted column (found by its heading's text, so the same cells are measured whatever
# the markup around them), each body row's cell: its text, the name shown before it at a
# phone's width (the ::before content), and whether a reader sees it without scrolling: inside
# the viewport and inside every scrolling box around it.
CELLS = """(table, wanted) => {
  const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
  const width = document.documentElement.clientWidth;
  const seen = (e) => {
    const r = e.getBoundingClientRect();
    if (r.width <= 0 || r.left < -1 || r.right > width + 1) return false;
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX === 'visible') continue;
      const b = p.getBoundingClientRect();
      if (r.left < b.left - 1 || r.right > b.right + 1) return false;
    }
    return true;
  };
  const rows = [...table.querySelectorAll('tbody tr')].filter((tr) => !tr.classList.contains('set-head'));
  return rows.flatMap((tr) => wanted.map((name) => {
    const td = tr.children[heads.indexOf(name)];
    const label = td ? getComputedStyle(td, '::before').content : '';
    return {column: name, text: td ? td.textContent.trim().slice(0, 40) : null,
            label: label, seen: !!td && seen(td), top: td ? td.getBoundingClientRect().top : null,
            row_top: tr.getBoundingClientRect().top};
  }));
}"""
# The table's and the page's scroll widths against their visible widths.
WIDTHS = """(table) => ({table: [table.scrollWidth, table.clientWidth],
  page: [document.documentElement.scrollWidth, document.documentElement.clientWidth]})"""
RUNS_KEYS = ["Name", "Status", "Score", "Known spend (USD)"]
COMPARE_KEYS = ["Run", "Δ quality", "Subject savings", "Cache-neutral savings", "Verdict"]
BASELINE_KEYS = ["Name", "Status", "Comparable runs", ""]  # "": the Use as baseline button
CANDIDATE_KEYS = ["Select", "Name", "Status", "Targets"]
RESULTS_KEYS = ["Benchmark", "Accuracy", "95% Wilson interval"]
# The cells that open a stacked row (ID and name, # and run, the checkbox, the benchmark): no
# name before them.
UNNAMED = {"Name", "Run", "Select", "Benchmark", ""}


def _runs() -> tuple[Run, Run]:
    qs = b.questions({"mmlu-pro": 4})
    base, router = b.target("strong-baseline-model"), b.target("cheap-router", kind="mom")
    baseline = b.run(qs, {base: [True, True, False, True]}, costs={base: Decimal("0.30594")})
    candidate = b.run(
        qs, {router: [True, False, False, True]}, costs={router: Decimal("0.0956633375")}
    )
    for run, name in (
        (baseline, "router-vs-strong-mmlu-pro-simpleqa-dev-seed-20260918-retry-3"),
        (candidate, "Nightly regression of the cheap model on the smoke profile 2"),
    ):
        Run.objects.filter(pk=run.pk).update(name=name)
        run_report_keep(run_id=run.pk)
    return baseline, candidate


def _measure(page: Any, selector: str, keys: list[str]) -> tuple[list[dict], dict]:
    table = page.locator(selector)
    expect(table).to_be_visible()
    return table.evaluate(CELLS, keys), table.evaluate(WIDTHS)


def test_runs_results_and_compare_tables_need_no_sideways_scroll_at_390px(
    logged_in_page: Any, live_server: Any
) -> None:
    page = logged_in_page
    baseline, candidate = _runs()
    pages = {
        "runs": ("/", "#runs-table table.runs", RUNS_KEYS),
        "run-results": (f"/runs/{candidate.pk}/", "table.per-benchmark >> nth=0", RESULTS_KEYS),
        "compare-baselines": ("/compare/", "#baselines", BASELINE_KEYS),
        "compare-pick": (compare_url(baseline=baseline.pk), "#candidates", CANDIDATE_KEYS),
        "compare-candidates": (
            compare_url(baseline=baseline.pk, candidates=[candidate.pk], compare=True),
            "#chart-legend",
            COMPARE_KEYS,
        ),
    }
    for name, (url, selector, keys) in pages.items():
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(live_server.url + url)
        cells, widths = _measure(page, selector, keys)
        assert len(cells) >= len(keys), (name, cells)
        assert [c for c in cells if not c["seen"]] == [], (name, cells)
        assert widths["page"][0] <= widths["page"][1], (name, widths)
        assert widths["table"][0] <= widths["table"][1], (name, widths)
        # Each figure is named: the column's heading stands before it (the heading row is gone).
        for c in cells:
            if c["column"] not in UNNAMED:
                assert c["label"] == f'"{c["column"]}"', (name, c)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator(selector).screenshot(path=str(SCREENSHOTS / f"390-{name}-table.png"))

        # A desktop's width is unchanged: the heading row shows, each row is one line of cells
        # without names before them, and the table fits.
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(live_server.url + url)
        expect(page.locator(selector).locator("thead")).to_be_visible()
        cells, widths = _measure(page, selector, keys)
        assert [c for c in cells if not c["seen"]] == [], (name, cells)
        assert all(abs(c["top"] - c["row_top"]) < 2 for c in cells), (name, cells)
        assert {c["label"] for c in cells} <= {"none", "normal"}, (name, cells)
        assert widths["page"][0] <= widths["page"][1], (name, widths)
