"""Recovery in a real browser (issue 10, R15.5): review the failed-mode plan, select a cell,
confirm the new attempt, submit — the test drops the response after the server handled it —
reload the tab, resubmit the same pending request: exactly one child run, and the page
links to it. Nothing is resubmitted without the click."""

from __future__ import annotations

import json
import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs.models import Cell, RecoveryRequest, Run
from runs.planning.services import run_create
from tests import factories as f
from tests.conftest import purge_broker
from tests.e2e.conftest import screenshot
from tests.runs import engine_support as es

pytestmark = pytest.mark.e2e


@pytest.fixture
def failed_parent(member):
    """A failed run: two failed cells with a known cost, one completed, the rest never sent."""
    target = f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    dataset = es.fixture_dataset(["mmlu-pro"])
    run, _ = run_create(
        owner=member, plan={"name": "parent", "dataset": dataset.pk, "targets": ["sim-strong"]}
    )
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    cells = list(Cell.objects.filter(run=run).order_by("pk")[:3])
    for cell in cells[:2]:
        Cell.objects.filter(pk=cell.pk).update(status="failed")
        f.call_create(cell=cell, target=target, status="failed", output_tokens=9, cost_usd="0.0002")
    Cell.objects.filter(pk=cells[2].pk).update(status="completed")
    f.call_create(
        cell=cells[2], target=target, status="completed", output_tokens=5, cost_usd="0.0001"
    )
    yield run, cells[:2]
    purge_broker()  # the child was queued for a worker that this test does not run


def test_a_lost_recover_response_is_resubmitted_after_reload_and_makes_one_child(
    logged_in_page, live_server, failed_parent
):
    page = logged_in_page
    run, failed = failed_parent

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.get_by_role("link", name="Review recovery plan").click()
    expect(page.get_by_role("heading", name=re.compile("Review recovery plan"))).to_be_visible()
    expect(page.locator("#exclusion-reasons")).to_contain_text("completed_evidence_preserved")
    page.get_by_role("tab", name="Retry known failed cases as new attempts").click()
    expect(page).to_have_url(re.compile(r"mode=failed"))
    expect(page.locator("#eligible-cells input[name=cell]")).to_have_count(2)
    expect(page.locator("#exclusion-reasons")).to_contain_text(
        "never_dispatched_use_undispatched_mode"
    )
    page.get_by_label(f"Select cell {failed[0].pk}").check()
    page.get_by_label(re.compile("I confirm new attempts")).check()
    screenshot(page, "recovery-01-review")

    # The request reaches the server; its response never reaches the page.
    reached: list[dict] = []

    def drop_response(route) -> None:
        response = route.fetch()
        reached.append(
            {"status": response.status, "key": route.request.headers.get("idempotency-key")}
        )
        route.abort()

    page.route("**/api/v1/runs/*/recover/", drop_response)
    page.get_by_role("button", name="Submit recovery").click()
    expect(page.locator("#recovery-pending")).to_be_visible()
    expect(page.locator("#recovery-pending")).to_contain_text("may not have completed")
    assert [r["status"] for r in reached] == [201]
    assert Run.objects.filter(parent=run).count() == 1  # created, but the page does not know
    pending = json.loads(
        page.evaluate(f"sessionStorage.getItem('srbench:recovery-pending:{run.pk}')")
    )
    assert pending["idempotency_key"] == reached[0]["key"]
    assert pending["selected_cells"] == [failed[0].pk] and pending["mode"] == "failed"
    page.unroute("**/api/v1/runs/*/recover/")
    screenshot(page, "recovery-02-response-lost")

    # Reload the tab: the pending request is still there, and nothing is sent by itself.
    page.reload()
    expect(page.locator("#recovery-pending")).to_be_visible()
    page.wait_for_timeout(500)
    assert RecoveryRequest.objects.count() == 1
    with page.expect_response(re.compile(r"/recover/$")) as answer:
        page.get_by_role("button", name="Resubmit the same request").click()
    assert answer.value.status == 200  # a replay of the same key, plan and cells
    assert answer.value.request.headers["idempotency-key"] == reached[0]["key"]

    child = Run.objects.get(parent=run)
    assert Run.objects.filter(parent=run).count() == 1
    assert child.cells.count() == 1
    link = page.locator("#child-run-link")
    expect(link).to_have_text(f"run #{child.pk}")
    # The page's own list of recovery runs names the new one too (issue 23), not "None yet".
    expect(page.locator("#recovery-children")).to_contain_text(f"run #{child.pk}")
    expect(page.locator("#recovery-children")).not_to_contain_text("None yet")
    expect(page.locator("#recovery-pending")).to_be_hidden()
    assert page.evaluate(f"sessionStorage.getItem('srbench:recovery-pending:{run.pk}')") is None
    screenshot(page, "recovery-03-resubmitted")

    link.click()
    expect(page).to_have_url(re.compile(rf"/runs/{child.pk}/$"))
    expect(page.locator("#lineage-parent")).to_contain_text(f"run #{run.pk}")
