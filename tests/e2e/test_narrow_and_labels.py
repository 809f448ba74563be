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
