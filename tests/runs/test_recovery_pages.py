"""The recovery pages (R15.5, issue 10 point 5): review a plan of a terminal run, refuse a run
that is still going, show why cells are excluded, and submit without JavaScript under the key
generated when the page rendered — resubmitting the same form finds the same child."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from runs.models import Cell, RecoveryRequest, Run
from runs.planning.services import run_create
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_broker():
    # A created child is dispatched to the broker; no worker runs here, so drop the message.
    yield
    purge_broker()


def parent(owner, status: str = "failed") -> Run:
    target = f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    f.target_create(slug="sim-weak", model="sim-weak", prices={"sim-weak": es.PRICES["sim-weak"]})
    dataset = es.fixture_dataset(["mmlu-pro", "arc"])
    # Two targets: more than one page (25) of cells.
    run, _ = run_create(
        owner=owner,
        plan={"name": "parent", "dataset": dataset.pk, "targets": ["sim-strong", "sim-weak"]},
    )
    if status != "queued":
        Run.objects.filter(pk=run.pk).update(status=status, finished_at=timezone.now())
    run.target = target
    return run


def with_failed_cells(run: Run, n: int = 2) -> list[Cell]:
    """`n` failed cells with a known cost and one completed cell; the rest never dispatched."""
    cells = list(Cell.objects.filter(run=run).order_by("pk")[: n + 1])
    for cell in cells[:n]:
        Cell.objects.filter(pk=cell.pk).update(status="failed")
        f.call_create(
            cell=cell, target=run.target, status="failed", output_tokens=10, cost_usd="0.0002"
        )
    Cell.objects.filter(pk=cells[n].pk).update(status="completed")
    f.call_create(
        cell=cells[n], target=run.target, status="completed", output_tokens=5, cost_usd="0.0001"
    )
    return cells[:n]


def form_fields(html: str) -> dict[str, str]:
    return {
        name: re.search(rf'name="{name}" value="([^"]+)"', html).group(1)
        for name in ("plan_sha256", "idempotency_key", "csrfmiddlewaretoken")
    }


def test_a_terminal_run_offers_the_review_and_the_page_shows_scopes_cells_and_reasons(client):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner)
    failed = with_failed_cells(run)

    detail = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Review recovery plan" in detail and f"/runs/{run.pk}/recovery/" in detail

    page = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"})
    html = page.content.decode()
    assert page.status_code == 200
    assert "Continue undispatched cases" in html
    assert "Retry known failed cases as new attempts" in html
    total = Cell.objects.filter(run=run).count()
    assert f'Eligible cells <span class="meta">({total - 3})' in html
    assert "already_dispatched_requires_new_attempt" in html
    assert "completed_evidence_preserved" in html
    assert "completed evidence is preserved" in html
    assert "Known spend" in html and "$0.0005" in html
    assert html.count('name="cell"') == 25  # paginated, 25 a page
    assert 'id="eligible-pager"' in html

    failed_page = client.get(f"/runs/{run.pk}/recovery/", {"mode": "failed"}).content.decode()
    for cell in failed:
        assert f'name="cell" value="{cell.pk}"' in failed_page
    assert failed_page.count('name="cell"') == 2
    assert "never_dispatched_use_undispatched_mode" in failed_page
    assert 'name="acknowledge_new_attempt"' in failed_page and "extra cost" in failed_page


def test_a_running_run_is_refused_in_words_and_offers_no_form(client):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner, status="queued")
    assert "Review recovery plan" not in client.get(f"/runs/{run.pk}/").content.decode()
    page = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"})
    html = page.content.decode()
    assert page.status_code == 409
    assert "This run cannot be recovered now." in html and "queued" in html
    assert 'id="recovery-form"' not in html
    assert not Run.objects.filter(parent=run).exists()


def test_no_js_form_creates_one_child_and_the_same_form_again_finds_it(client):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner)
    failed = with_failed_cells(run)
    url = f"/runs/{run.pk}/recovery/"
    fields = form_fields(client.get(url, {"mode": "failed"}).content.decode())
    form = {**fields, "mode": "failed", "cell": [failed[0].pk]}

    # Failed mode without the confirmation: refused, nothing created.
    refused = client.post(url, form)
    assert refused.status_code == 422
    assert (
        "extra cost" in refused.content.decode()
        and "Nothing was created" in refused.content.decode()
    )
    assert not Run.objects.filter(parent=run).exists()

    form["acknowledge_new_attempt"] = "on"
    first = client.post(url, form)
    assert first.status_code == 303
    child = Run.objects.get(parent=run)
    assert first["Location"] == f"/runs/{child.pk}/"
    assert child.cells.count() == 1

    again = client.post(url, form)  # the same form, resubmitted (same key)
    assert again.status_code == 303 and again["Location"] == f"/runs/{child.pk}/"
    assert Run.objects.filter(parent=run).count() == 1
    assert RecoveryRequest.objects.get().idempotency_key == fields["idempotency_key"]

    # Lineage both ways on run detail, and the children on the recovery page.
    parent_html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/{child.pk}/"' in parent_html and 'id="lineage-children"' in parent_html
    child_html = client.get(f"/runs/{child.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/"' in child_html and 'id="lineage-parent"' in child_html
    review = client.get(url, {"mode": "failed"}).content.decode()
    assert f"run #{child.pk}" in review
    assert "already claimed by another recovery" in review


def test_no_js_undispatched_with_nothing_ticked_recovers_every_eligible_cell(client):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner, status="interrupted")
    url = f"/runs/{run.pk}/recovery/"
    fields = form_fields(client.get(url).content.decode())
    response = client.post(url, {**fields, "mode": "undispatched"})
    assert response.status_code == 303
    child = Run.objects.get(parent=run)
    assert child.cells.count() == Cell.objects.filter(run=run).count()


def test_a_completed_run_with_every_cell_completed_offers_no_review(client):
    """Fourth outside probe, item 2: the button showed on a run with nothing to recover. The
    page says why instead, and the review stays reachable by its address."""
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner, status="completed")
    Cell.objects.filter(run=run).update(status="completed")
    total = Cell.objects.filter(run=run).count()

    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="review-recovery"' not in html and "Review recovery plan" not in html
    assert f"Nothing to recover: all {total} cells completed." in html
    review = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"}).content.decode()
    assert 'Eligible cells <span class="meta">(0)' in review


def test_a_run_whose_open_cells_are_all_claimed_offers_no_second_review(client):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner, status="interrupted")
    assert 'id="review-recovery"' in client.get(f"/runs/{run.pk}/").content.decode()
    url = f"/runs/{run.pk}/recovery/"
    fields = form_fields(client.get(url).content.decode())
    assert client.post(url, {**fields, "mode": "undispatched"}).status_code == 303
    total = Cell.objects.filter(run=run).count()

    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="review-recovery"' not in html
    assert f"Nothing to recover: every cell is claimed by a recovery run ({total})." in html
