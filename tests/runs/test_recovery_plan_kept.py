"""A reviewed recovery plan is computed once per state of the parent's ledger and read back for
every later page (fourth outside probe, item 1: `benchmark recover-plan` recomputed the whole
plan for each page, 3.5–4.4 s a page at 100,000 cells). A ledger that moved on — a recovery
claimed cells, a cell changed — names a new state: its plan is computed afresh, never served
from the old one. The parent is built directly in the ledger; no model is called."""

from __future__ import annotations

import pytest

from runs.models import Cell, Run
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs.recovery_support import plan_computations, recovery_parent

pytestmark = pytest.mark.django_db

QUESTIONS = 250  # three pages of 100


@pytest.fixture(autouse=True)
def _clean_broker():
    # A submitted recovery dispatches its child to the broker; no worker runs here.
    yield
    purge_broker()


@pytest.fixture
def computations(monkeypatch) -> list[int]:
    return plan_computations(monkeypatch)


def interrupted_parent(owner) -> Run:
    """An interrupted live run of QUESTIONS cells, none dispatched: all eligible (undispatched)."""
    return recovery_parent(owner, questions=QUESTIONS)


def every_page(client, run: Run) -> tuple[list[dict], set[str]]:
    """Page through the eligible cells as `benchmark recover-plan` does; (cells, plan hashes)."""
    cells: list[dict] = []
    hashes: set[str] = set()
    after = 0
    while after is not None:
        page = client.get(
            f"/api/v1/runs/{run.pk}/recovery-plan/",
            {"mode": "undispatched", "limit": 100, "eligible_after": after},
        )
        assert page.status_code == 200, page.content[:300]
        body = page.json()
        cells += body["eligible_cells"]
        hashes.add(body["plan_sha256"])
        after = body["next_eligible_after"]
    return cells, hashes


def test_paging_through_a_plan_computes_it_once(client, computations):
    owner = f.user_create()
    client.force_login(owner)
    run = interrupted_parent(owner)

    cells, hashes = every_page(client, run)

    ids = list(Cell.objects.filter(run=run).order_by("pk").values_list("pk", flat=True))
    assert [c["cell"] for c in cells] == ids and len(hashes) == 1
    # Three pages, one computation; paging again reads the kept plan too.
    assert computations == [run.pk]
    assert every_page(client, run) == (cells, hashes)
    assert computations == [run.pk]
    # The recovery page reads the same kept plan.
    page = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"})
    assert page.status_code == 200 and hashes.pop() in page.content.decode()
    assert computations == [run.pk]


def test_a_recovery_claiming_cells_gives_a_fresh_plan(client, computations):
    owner = f.user_create()
    client.force_login(owner)
    run = interrupted_parent(owner)
    first = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "undispatched"}).json()
    chosen = [c["cell"] for c in first["eligible_cells"][:3]]
    created = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {"plan_sha256": first["plan_sha256"], "mode": "undispatched", "selected_cells": chosen},
        content_type="application/json",
        headers={"Idempotency-Key": "kept-1"},
    )
    assert created.status_code == 201, created.content[:300]

    after = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "undispatched"}).json()
    assert after["plan_sha256"] != first["plan_sha256"]
    assert after["counts"]["eligible"] == QUESTIONS - 3
    assert after["counts"]["excluded_by_reason"] == {"already_claimed_by_another_recovery": 3}
    assert [e["cell"] for e in after["excluded"]] == chosen
    # The fresh plan is the one a submission checks against: submitting the old one is refused.
    stale = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {"plan_sha256": first["plan_sha256"], "mode": "undispatched"},
        content_type="application/json",
        headers={"Idempotency-Key": "kept-2"},
    )
    assert stale.status_code == 409 and stale.json()["code"] == "recovery_plan_changed"


def test_a_cell_changed_in_the_ledger_gives_a_fresh_plan(client, computations):
    owner = f.user_create()
    client.force_login(owner)
    run = interrupted_parent(owner)
    first = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "failed"}).json()
    assert first["counts"]["eligible"] == 0

    # A failed attempt at a known cost appears in the ledger (a cell settled by hand).
    cell = Cell.objects.filter(run=run).order_by("pk").first()
    f.call_create(
        cell=cell, target=run.target, status="failed", output_tokens=10, cost_usd="0.0002"
    )
    Cell.objects.filter(pk=cell.pk).update(status="failed")

    after = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "failed"}).json()
    assert after["plan_sha256"] != first["plan_sha256"]
    assert [e["cell"] for e in after["eligible_cells"]] == [cell.pk]
    assert after["eligible_cells"][0]["previous_attempt_cost_usd"] == "0.0002"
    assert computations == [run.pk, run.pk]


def test_a_kept_plan_the_code_no_longer_computes_is_dropped_when_its_submission_is_refused(
    client, monkeypatch
):
    """A deploy that changes what a plan says (a reason's words) without a new cache version:
    the kept plan was served again and its submission refused as changed, and reviewing again
    served the same kept plan — a 409 loop until the ledger moved (outside probe jf). The
    refusal now drops what was kept, so the next review is computed and can be submitted."""
    from runs.settlement import recovery_rules

    owner = f.user_create()
    client.force_login(owner)
    run = interrupted_parent(owner)
    url = f"/api/v1/runs/{run.pk}/recovery-plan/"
    first = client.get(url, {"mode": "undispatched"}).json()
    chosen = [c["cell"] for c in first["eligible_cells"][:3]]
    body = {"plan_sha256": first["plan_sha256"], "mode": "undispatched", "selected_cells": chosen}
    recover = f"/api/v1/runs/{run.pk}/recover/"
    made = client.post(
        recover, body, content_type="application/json", headers={"Idempotency-Key": "d-1"}
    )
    assert made.status_code == 201, made.content[:300]
    kept = client.get(url, {"mode": "undispatched"}).json()  # kept under the new state

    words = "claimed by another recovery run"
    monkeypatch.setitem(recovery_rules.REASONS, "already_claimed_by_another_recovery", words)
    served = client.get(url, {"mode": "undispatched"}).json()
    assert served["plan_sha256"] == kept["plan_sha256"]  # the kept plan, as before the deploy
    pick = [c["cell"] for c in served["eligible_cells"][:2]]
    body = {"plan_sha256": served["plan_sha256"], "mode": "undispatched", "selected_cells": pick}
    refused = client.post(
        recover, body, content_type="application/json", headers={"Idempotency-Key": "d-2"}
    )
    assert refused.status_code == 409 and refused.json()["code"] == "recovery_plan_changed"

    fresh = client.get(url, {"mode": "undispatched"}).json()
    assert fresh["plan_sha256"] != kept["plan_sha256"]
    assert fresh["excluded"][0]["detail"].startswith(words), fresh["excluded"][0]
    body = {"plan_sha256": fresh["plan_sha256"], "mode": "undispatched", "selected_cells": pick}
    again = client.post(
        recover, body, content_type="application/json", headers={"Idempotency-Key": "d-3"}
    )
    assert again.status_code == 201, again.content[:300]
