"""What the outside probe saw in Chromium (session 5): at a phone's 390 px the run header's
labels and values wrapped apart (a label at the end of one line, its value on the next), and
the Compare scatter's point numbers overlapped each other and the baseline's label when
candidates sat close together."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from compare.views import compare_url
from tests.compare import builders as b
from tests.e2e.conftest import SCREENSHOTS
from tests.security.test_permissions import completed_run

pytestmark = pytest.mark.e2e

# Each <dt> of the run header with the <dd> after it: their boxes' vertical centres.
PAIRS = """(dl) => [...dl.querySelectorAll(':scope > dt')].map((dt) => {
  const dd = dt.nextElementSibling, a = dt.getBoundingClientRect(), v = dd.getBoundingClientRect();
  return {label: dt.textContent.trim(), dt_top: a.top, dd_top: v.top, dt_right: a.right, dd_left: v.left};
})"""

BOXES = """(svg) => [...svg.querySelectorAll('g.mark > text.num, g.baseline-marker > text')]
  .map((t) => { const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; })"""
# The points themselves (circles, squares for unknown savings, the baseline's diamond).
POINTS = """(svg) => [...svg.querySelectorAll(
    'g.mark > circle.point, g.mark > rect.point-unknown, polygon.baseline-mark')]
  .map((t) => { const r = t.getBoundingClientRect(), g = t.closest('g');
    return {text: 'point of ' + (g.dataset.run || 'baseline'), left: r.left, right: r.right,
            top: r.top, bottom: r.bottom}; })"""


def test_the_run_headers_labels_stay_beside_their_values_at_390px(
    logged_in_page: Any, live_server: Any, member: Any
) -> None:
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 900})
    run = completed_run(member)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    header = page.locator("dl.facts.inline-facts").first
    expect(header).to_be_visible()
    pairs = header.evaluate(PAIRS)
    assert len(pairs) >= 6
    for p in pairs:
        # On one line: the value starts where its label's line is, right of the label.
        assert abs(p["dd_top"] - p["dt_top"]) < 8, p
        assert p["dd_left"] >= p["dt_right"] - 1, p


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(boxes):
        for c in boxes[i + 1 :]:
            if (
                a["left"] < c["right"] - 0.5
                and c["left"] < a["right"] - 0.5
                and a["top"] < c["bottom"] - 0.5
                and c["top"] < a["bottom"] - 0.5
            ):
                out.append((a["text"], c["text"]))
    return out


def test_the_scatters_point_numbers_do_not_overlap(
    logged_in_page: Any, live_server: Any, member: Any
) -> None:
    page = logged_in_page
    qs = b.questions({"mmlu-pro": 4})
    base = b.target("base")
    baseline = b.run(qs, {base: [True, False, True, False]}, costs={base: Decimal("0.01")})
    router = b.target("router", kind="mom")
    # Twelve candidates at nearly the same Δ and savings, next to the baseline's diamond, and
    # twelve at exactly the same point.
    candidates = [
        b.run(
            qs,
            {router: [True, False, True, i % 4 == 0]},
            costs={router: Decimal("0.01") - Decimal(i) / 10_000},
        )
        for i in range(12)
    ] + [
        b.run(qs, {router: [True, True, True, False]}, costs={router: Decimal("0.005")})
        for _ in range(12)
    ]
    url = compare_url(baseline=baseline.pk, candidates=[r.pk for r in candidates], compare=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(live_server.url + url)
        svg = page.locator("#chart-quality-cost svg")
        expect(svg).to_be_visible()
        boxes = svg.evaluate(BOXES)
        assert len(boxes) == 25, boxes  # 24 numbers and the baseline's label
        assert overlapping(boxes) == [], (width, overlapping(boxes))
        # Nor does a number or the baseline's label cover a point.
        points = svg.evaluate(POINTS)
        covered = [
            pair
            for pair in overlapping(boxes + points)
            if not (pair[0].startswith("point of") and pair[1].startswith("point of"))
        ]
        assert covered == [], (width, covered)


# Each figure cell of a Compare card's cost table: its text, its box, and whether a reader sees
# it without scrolling the table sideways (inside the table's own box and the viewport).
COST_CELLS = """(table) => [...table.querySelectorAll('tr.cost-row td.num')].map((td) => {
  const r = td.getBoundingClientRect(), t = table.getBoundingClientRect();
  return {text: td.textContent.trim(), label: td.dataset.label || '',
          seen: r.width > 0 && r.left >= t.left - 1 && r.right <= t.right + 1
                && r.right <= document.documentElement.clientWidth + 1};
})"""


def test_a_cards_savings_are_seen_at_390px_without_scrolling_sideways(
    logged_in_page: Any, live_server: Any, member: Any
) -> None:
    """The third outside probe, at 390 px on the demo's headline comparison: the card's cost
    table scrolled inside itself and its Savings column — the answer to "at lower cost?" —
    started at 357 px of a 337 px box, out of sight. Every figure of that table, each named
    (baseline, candidate, savings), is seen at a phone's width and at a desktop's."""
    page = logged_in_page
    qs = b.questions({"mmlu-pro": 4})
    base, router = b.target("strong-base"), b.target("cheap-router", kind="mom")
    run = b.run(
        qs,
        {base: [True, True, False, True], router: [True, False, False, True]},
        costs={base: Decimal("0.30594"), router: Decimal("0.0956633375")},
    )
    url = compare_url(baseline=run.pk, candidates=[run.pk], compare=True)
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(live_server.url + url)
        table = page.locator(f"#card-{run.pk}-cheap-router table.costs")
        expect(table).to_be_visible()
        cells = table.evaluate(COST_CELLS)
        assert len(cells) == 9, cells  # subject cost, total spend, cache-neutral × 3 figures
        assert [c for c in cells if not c["seen"]] == [], (width, cells)
        savings = [c["text"] for c in cells if c["label"] == "Savings"]
        assert savings[0] == "68.7%", (width, cells)
        # For people to look at (gitignored): the card's costs at this width.
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        table.screenshot(path=str(SCREENSHOTS / f"{width}-compare-card-costs.png"))


# Each checkbox of Create evaluation's official-scoring and official-prompting choices, with the
# box of the words it ticks (a Range over the label's text).
CHOICES = """() => [...document.querySelectorAll(
    '#official-scoring label, #official-prompting label')].map((label) => {
  const box = label.querySelector('input').getBoundingClientRect();
  const range = document.createRange();
  range.selectNodeContents(label.lastChild);
  const text = range.getBoundingClientRect();
  return {text: label.textContent.trim(), box_mid: (box.top + box.bottom) / 2,
          text_mid: (text.top + text.bottom) / 2, box_right: box.right, text_left: text.left};
})"""


def test_create_evaluations_official_choices_sit_beside_their_names(
    logged_in_page: Any, live_server: Any
) -> None:
    """The third outside probe: under "Official scoring beside sr-bench's" each checkbox stood
    centred on a line of its own, above its name, so the HLE box sat between "SimpleQA" and
    "HLE" and read as either's. Each box is on its name's line, left of it, at both widths."""
    page = logged_in_page
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/runs/new/")
        choices = page.evaluate(CHOICES)
        names = [c["text"] for c in choices]
        assert names == ["SimpleQA", "HLE", "LiveCodeBench", "SciCode"], names
        for c in choices:
            assert abs(c["box_mid"] - c["text_mid"]) < 6, (width, c)
            assert c["box_right"] <= c["text_left"] + 1, (width, c)
        # Beside them, the margin says what it is for: without it, never "quality kept".
        margin = page.locator("#task-limits label", has=page.locator("#id_non_inferiority_margin"))
        expect(margin).to_contain_text("the only way a comparison can call a candidate")
