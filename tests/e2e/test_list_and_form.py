"""What people expect, in Chromium (issue 35 item 7): the phone-width menu shows that it has
more links and scrolls to them; Create evaluation opens on a profile, keeps a source without
questions unselectable and, when it cannot review, lists every error at the top with links
that move the focus to the field; the Runs page names a refused filter value and keeps the
others."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from datasets.models import Source
from datasets.profiles import DEFAULT_SEED
from datasets.services import source_prepare
from tests import factories as f
from tests.e2e.conftest import screenshot

pytestmark = pytest.mark.e2e


def box(locator) -> dict:
    return locator.evaluate(
        "e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right}; }"
    )


def nav_state(page) -> dict:
    return page.locator("header.top nav").evaluate(
        "n => ({scroll: n.scrollLeft, hidden: n.scrollWidth - n.clientWidth})"
    )


def test_the_phone_menu_shows_it_has_more_links_and_scrolls_to_them(logged_in_page, live_server):
    """issue 35 item 7: at 390 px the menu scrolls sideways; a "More ›" button at its right
    edge says so while links are hidden there, a "‹" at the left once scrolled, and the
    current page's link starts in view. At 1280 px nothing is hidden and no button shows."""
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/")
    nav = page.locator("header.top nav")
    more, back = page.locator(".nav-more.next"), page.locator(".nav-more.prev")
    assert nav_state(page)["hidden"] > 50, "the premise: the links do not fit at 390 px"
    expect(more).to_be_visible()
    expect(more).to_have_accessible_name("Show more menu links")
    expect(back).to_be_hidden()
    # The cue sits on the menu's right edge, inside the screen.
    assert abs(box(more)["right"] - box(nav)["right"]) <= 1 and box(more)["right"] <= 390
    last = nav.locator("a").last
    assert box(last)["right"] > box(nav)["right"], "the last link starts hidden"
    screenshot(page, "390-nav-more")

    for _ in range(10):  # each press scrolls most of a screen, smoothly
        if more.is_hidden():
            break
        before = nav_state(page)["scroll"]
        more.click()
        # Moved on, and settled: the same position in two animation frames running.
        page.wait_for_function(
            """(before) => {
              const s = document.querySelector("header.top nav").scrollLeft;
              const settled = window.__navLast === s;
              window.__navLast = s;
              return s > before + 5 && settled;
            }""",
            arg=before,
        )
    expect(more).to_be_hidden()
    expect(back).to_be_visible()
    state = nav_state(page)
    assert state["scroll"] >= state["hidden"] - 1, state
    assert box(last)["right"] <= box(nav)["right"] + 1, "the last link is reachable"
    back.click()
    expect(more).to_be_visible()

    page.goto(f"{live_server.url}/targets/")
    active = nav.locator("a.active")
    expect(active).to_have_text("Targets")
    assert box(nav)["left"] <= box(active)["left"] and box(active)["right"] <= box(nav)["right"]

    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/")
    expect(more).to_be_hidden()
    expect(back).to_be_hidden()


def test_create_opens_on_a_profile_and_its_error_summary_leads_to_the_fields(
    logged_in_page, live_server
):
    """issue 35 item 7: smoke is preselected (the cheapest profile with prepared questions);
    the 0-question SimpleQA source is shown disabled with its reason and "Select all" leaves
    it unticked; Review with nothing ticked shows the error summary first, focused, and its
    links move the focus to the fields they name."""
    page = logged_in_page
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    Source.objects.create(
        benchmark="simpleqa",
        profile="smoke",
        seed=DEFAULT_SEED,
        split="dev",
        content_sha256="0" * 64,
        provenance={"origin": "fixture"},
        requested_count=5,
        count=0,
    )
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")

    page.goto(f"{live_server.url}/runs/new/")
    expect(page.locator("input[type=radio][name=profile][value=smoke]")).to_be_checked()
    expect(page.locator("#profile-preselected")).to_contain_text("smoke is preselected")
    empty = page.locator("#bench-simpleqa")
    expect(empty).to_be_disabled()
    expect(page.locator("#bench-simpleqa-why")).to_contain_text("0 questions")
    page.get_by_label("Select all benchmarks").check()
    expect(page.locator("#bench-mmlu-pro")).to_be_checked()
    expect(empty).not_to_be_checked()
    page.get_by_label("Select all benchmarks").uncheck()

    page.get_by_role("button", name="Review plan").click()
    summary = page.locator("#error-summary")
    expect(summary).to_be_visible()
    expect(summary).to_be_focused()
    expect(summary.get_by_role("heading")).to_have_text("The plan cannot be reviewed: 2 problems")
    links = summary.get_by_role("link")
    expect(links).to_have_count(2)
    expect(links.nth(0)).to_have_text("Prepared benchmarks: Tick at least one benchmark.")
    expect(links.nth(1)).to_contain_text("Targets: ")
    screenshot(page, "1400-create-error-summary")
    links.nth(1).click()
    expect(page.locator("#target-sim-strong")).to_be_focused()
    links.nth(0).click()
    expect(page.locator("#bench-mmlu-pro")).to_be_focused()


def test_a_refused_filter_value_is_named_and_changing_a_filter_clears_it(
    logged_in_page, live_server
):
    """issue 35 item 7: /?status=bogus&name=alpha keeps the name filter and says which value
    it ignored; picking a status (the table swapped by htmx) applies it and the notice goes."""
    page = logged_in_page
    done = f.run_create(name="alpha done", status="completed")
    running = f.run_create(name="alpha running", status="running")
    other = f.run_create(name="beta", status="completed")
    page.goto(f"{live_server.url}/?status=bogus&name=alpha")
    notice = page.locator("#refused-filters")
    expect(notice).to_contain_text("Status “bogus”")
    rows = page.locator("#runs-table tr[data-run-id]")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-run-id="{other.pk}"]')).to_have_count(0)
    page.get_by_label("Status").select_option("completed")
    expect(notice).to_have_count(0)
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-run-id="{done.pk}"]')).to_be_visible()
    assert running.pk != done.pk
