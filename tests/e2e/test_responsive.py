"""Every page at a phone's width and a desktop's (issue 23; issue 35 item 7; SPEC R7): at 390 px
and at 1280 px no page scrolls sideways (document.documentElement.scrollWidth <= clientWidth),
also when runs have ordinary 60-character names — the navigation stays one compact line and
wide tables scroll inside themselves — and every page still loads its favicon. Every page is
screenshotted at both widths into var/screenshots/ (git-ignored; `make screenshots` runs this
file alone)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from datasets.services import source_prepare
from runs.engine.finish import run_report_keep
from runs.models import Call, Cell, Run, RunEvent
from tests.compare import builders as b
from tests.e2e.conftest import SCREENSHOTS, screenshot
from tests.runs import engine_support as es

pytestmark = pytest.mark.e2e

WIDTHS = (390, 1280)
# Ordinary run names of 60 characters: one without a space to break at, one of words.
LONG_NAMES = (
    "router-vs-strong-mmlu-pro-simpleqa-dev-seed-20260918-retry-3",
    "Nightly regression of the cheap model on the smoke profile 2",
)

LONG_MODEL = "TheBloke_Mixtral_8x7B_Instruct_v0.1_GPTQ_4bit_128g_actorder_True"


def overflow(page) -> dict:
    """The page's scroll width, its viewport width and (to say why) the first elements that
    stick out of the viewport without a scrolling box of their own around them."""
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
            client: WIDTH,
            wide: [...document.querySelectorAll('body *')]
                .filter((e) => e.getBoundingClientRect().right > WIDTH + 1
                    && !clipped(e.parentElement))
                .slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + (e.name || '')),
        }; }"""
    )


def _long_named_runs() -> dict[str, Run]:
    """Two ended runs with 60-character names and stored reports (the runs list shows their
    score, provenance and spend), one over other benchmarks, and a queued one."""
    assert all(len(name) == 60 for name in LONG_NAMES)
    dataset = es.fixture_dataset(["mmlu-pro", "simpleqa"], name="phone set", per_benchmark=3)
    qs = list(dataset.questions.order_by("pk"))
    # A served model's name of one long word, as Hugging Face names them (outside probe jf:
    # the run page's target heading and Compare's baseline line were 429-549 px wide).
    base = b.target("baseline-with-a-long-slug", model=LONG_MODEL)
    cand = b.target("candidate-with-a-long-slug", model=f"{LONG_MODEL}_2")
    baseline = b.run(qs, {base: [True, True, False, True, False, True]})
    candidate = b.run(
        qs, {cand: [True, False, False, True, True, True]}, costs={cand: Decimal("0.0004")}
    )
    other = b.run(qs[:3], {base: [True, False, True]})
    for run, name in ((baseline, LONG_NAMES[0]), (candidate, LONG_NAMES[1]), (other, "x" * 60)):
        Run.objects.filter(pk=run.pk).update(name=name)
        run_report_keep(run_id=run.pk)
    return {"dataset": dataset, "baseline": baseline, "candidate": candidate}


def _pages(made: dict) -> dict[str, str]:
    candidate, baseline, dataset = made["candidate"], made["baseline"], made["dataset"]
    cell = Cell.objects.filter(run=candidate).first()
    call = Call.objects.filter(cell=cell).first()
    question = dataset.questions.first()
    run = f"/runs/{candidate.pk}"
    return {
        "runs": "/",
        "runs-by-score": "/?sort=score",
        "runs-refused-filter": "/?status=bogus&name=Nightly",
        "create": "/runs/new/",
        "create-smoke": "/runs/new/?profile=smoke",
        "results": f"{run}/",
        "questions": f"{run}/?tab=questions",
        "calls": f"{run}/?tab=calls",
        "evidence": f"{run}/?tab=evidence",
        "recipe": f"{run}/?tab=recipe",
        "run-recipe": f"/recipes/runs/{candidate.pk}/",
        "question": f"{run}/questions/{cell.pk}/",
        "call": f"{run}/calls/{call.pk}/",
        "recovery": f"{run}/recovery/",
        "datasets": "/datasets/",
        "dataset": f"/datasets/{dataset.pk}/",
        "dataset-question": f"/datasets/{dataset.pk}/questions/{question.pk}/",
        "compare": "/compare/",
        "compare-results": f"/compare/?baseline={baseline.pk}&candidates={candidate.pk}&compare=1",
        "targets": "/targets/",
        "recipes": "/recipes/",
    }


def _form_pages(page, live_server) -> Iterator[str]:
    """Pages reached by submitting Create evaluation: its error summary and the review."""
    page.goto(f"{live_server.url}/runs/new/?profile=smoke")
    page.get_by_role("button", name="Review plan").click()
    expect(page.locator("#error-summary")).to_be_visible()
    yield "create-errors"
    page.goto(f"{live_server.url}/runs/new/?profile=smoke")
    page.locator("#bench-mmlu-pro").check()
    page.locator("#target-candidate-with-a-long-slug").check()
    page.get_by_role("button", name="Review plan").click()
    expect(page.get_by_role("heading", name="Review plan")).to_be_visible()
    yield "review"


def _check(page, name: str, width: int, too_wide: dict) -> None:
    expect(page.locator("main")).to_be_visible()
    if width == 390 and name != "login":
        # The navigation is one line, not four: its links share one row.
        tops = page.locator("header.top nav a").evaluate_all(
            "els => [...new Set(els.map((e) => Math.round(e.getBoundingClientRect().top)))]"
        )
        assert len(tops) == 1, (name, tops)
    found = overflow(page)
    if found["scroll"] > found["client"]:
        too_wide[f"{width}-{name}"] = found
    screenshot(page, f"{width}-{name}")


def test_every_page_fits_390_and_1280_px_with_60_character_run_names(browser, live_server, member):
    """issue 35 item 7: no horizontal page scroll at 390 px or 1280 px on any page, with
    60-character run names; at 1280 px the runs table fits without scrolling inside itself."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    made = _long_named_runs()
    RunEvent.objects.create(
        run=made["candidate"],
        seq=1,
        type="call.finished",
        payload={"usage": {"prompt_tokens": 12, "completion_tokens": 30}, "note": "x" * 300},
    )
    pages = _pages(made)

    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(member)
    cookie = {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": live_server.url,
    }
    too_wide: dict[str, dict] = {}
    names = ["login", *pages, "create-errors", "review"]
    for stale in (SCREENSHOTS / f"{w}-{n}.png" for w in WIDTHS for n in names):
        stale.unlink(missing_ok=True)
    for width in WIDTHS:
        context = browser.new_context(
            viewport={"width": width, "height": 844 if width == 390 else 900},
            timezone_id="UTC",
            is_mobile=width == 390,
        )
        context.set_default_timeout(20_000)
        page = context.new_page()
        try:
            page.goto(f"{live_server.url}/login/")  # logged out first
            _check(page, "login", width, too_wide)
            context.add_cookies([cookie])
            for name, path in pages.items():
                response = page.goto(f"{live_server.url}{path}")
                assert response is not None and response.status == 200, (name, path)
                _check(page, name, width, too_wide)
                if width == 1280 and name.startswith("runs"):
                    wrap = page.locator("#runs-table .table-wrap")
                    fits = wrap.evaluate("e => e.scrollWidth <= e.clientWidth")
                    assert fits, (name, "the runs table scrolls inside itself at 1280 px")
            for name in _form_pages(page, live_server):
                _check(page, name, width, too_wide)
            if width == 390:
                icon = page.request.get(f"{live_server.url}/favicon.ico")
                assert icon.status == 200 and "svg" in icon.headers["content-type"]
        finally:
            context.close()
    assert too_wide == {}, too_wide
    shots = {p.name for p in SCREENSHOTS.glob("*.png") if p.stat().st_size > 1000}
    missing = [f"{w}-{n}.png" for w in WIDTHS for n in names if f"{w}-{n}.png" not in shots]
    assert missing == [], missing
