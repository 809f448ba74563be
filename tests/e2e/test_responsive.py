"""The main pages at a phone's width (issue 23; SPEC R7 dashboard): at 390 px no page is wider
than the screen — the navigation stays one compact line and wide tables scroll inside
themselves — and every page still loads its favicon. Every page is screenshotted at 390 px and
1280 px into var/screenshots/ (git-ignored; `make screenshots` runs this file alone)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from datasets.services import source_prepare
from runs.models import Call, Cell, RunEvent
from tests.compare import builders as b
from tests.e2e.conftest import SCREENSHOTS, screenshot
from tests.runs import engine_support as es

pytestmark = pytest.mark.e2e

WIDTH = 390


def overflow(page) -> dict:
    return page.evaluate(
        """() => {
          const clipped = (e) => {
            for (; e && e !== document.body; e = e.parentElement)
              if (getComputedStyle(e).overflowX !== 'visible') return true;
            return false;
          };
          const WIDTH = document.documentElement.clientWidth;
          return {
            scroll: document.documentElement.scrollWidth,
            wide: [...document.querySelectorAll('body *')]
                .filter((e) => e.getBoundingClientRect().right > WIDTH + 1
                    && !clipped(e.parentElement))
                .slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + (e.name || '')),
        }; }"""
    )


def test_the_main_pages_fit_a_390_px_screen(browser, live_server, member):
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    dataset = es.fixture_dataset(["mmlu-pro", "simpleqa"], name="phone set", per_benchmark=3)
    qs = list(dataset.questions.order_by("pk"))
    base, cand = b.target("baseline-with-a-long-slug"), b.target("candidate-with-a-long-slug")
    baseline = b.run(qs, {base: [True, True, False, True, False, True]})
    candidate = b.run(
        qs, {cand: [True, False, False, True, True, True]}, costs={cand: Decimal("0.0004")}
    )
    RunEvent.objects.create(
        run=candidate,
        seq=1,
        type="call.finished",
        payload={"usage": {"prompt_tokens": 12, "completion_tokens": 30}, "note": "x" * 300},
    )
    cell = Cell.objects.filter(run=candidate).first()
    call = Call.objects.filter(cell=cell).first()
    question = dataset.questions.first()

    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(member)
    context = browser.new_context(
        viewport={"width": WIDTH, "height": 844}, timezone_id="UTC", is_mobile=True
    )
    context.set_default_timeout(20_000)
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    page = context.new_page()
    pages = {
        "runs": "/",
        "create": "/runs/new/?profile=smoke",
        "results": f"/runs/{candidate.pk}/",
        "questions": f"/runs/{candidate.pk}/?tab=questions",
        "calls": f"/runs/{candidate.pk}/?tab=calls",
        "evidence": f"/runs/{candidate.pk}/?tab=evidence",
        "question": f"/runs/{candidate.pk}/questions/{cell.pk}/",
        "call": f"/runs/{candidate.pk}/calls/{call.pk}/",
        "recovery": f"/runs/{candidate.pk}/recovery/",
        "datasets": "/datasets/",
        "dataset": f"/datasets/{dataset.pk}/",
        "dataset-question": f"/datasets/{dataset.pk}/questions/{question.pk}/",
        "compare": "/compare/",
        "compare-results": f"/compare/?baseline={baseline.pk}&candidates={candidate.pk}&compare=1",
        "targets": "/targets/",
        "recipes": "/recipes/",
    }
    try:
        too_wide = {}
        for name, path in pages.items():
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None and response.status == 200, (name, path)
            expect(page.locator("main")).to_be_visible()
            # The navigation is one line, not four: its links share one row.
            tops = page.locator("header.top nav a").evaluate_all(
                "els => [...new Set(els.map((e) => Math.round(e.getBoundingClientRect().top)))]"
            )
            assert len(tops) == 1, (name, tops)
            found = overflow(page)
            if found["scroll"] > WIDTH:
                too_wide[name] = found
            screenshot(page, f"390-{name}")
        assert too_wide == {}, too_wide
        icon = page.request.get(f"{live_server.url}/favicon.ico")
        assert icon.status == 200 and "svg" in icon.headers["content-type"]
        # The same pages at a desktop width, for people to look at (`make screenshots`).
        page.set_viewport_size({"width": 1280, "height": 900})
        for name, path in pages.items():
            page.goto(f"{live_server.url}{path}")
            expect(page.locator("main")).to_be_visible()
            screenshot(page, f"1280-{name}")
        shots = {p.name for p in SCREENSHOTS.glob("*.png") if p.stat().st_size > 1000}
        missing = [
            f"{w}-{n}.png" for w in (390, 1280) for n in pages if f"{w}-{n}.png" not in shots
        ]
        assert missing == [], missing
    finally:
        context.close()
