"""A run that ends without completing has its recovery plans kept by a worker before anyone
reviews them (R15.2; issue 38's "every page ≤ 100 ms"): the first review of a 100,000-cell
run computed its plan on the page, 4–5 s, once per mode and state of the ledger. The run's end
rings a worker (`runs.engine.doorbell.recovery_plans_dispatch`), which keeps each mode's default
plan under the ledger's state (`runs.settlement.recovery.recovery_plans_keep`); the review then
reads it. What is kept is what the review would compute: each kept plan is compared here with a
computation made now, field by field.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runs.engine import doorbell
from runs.engine.finish import run_finish_if_done
from runs.models import CellStatus, Run, StoredRecoveryPlan
from runs.settlement import recovery
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from tests import factories as f
from tests.conftest import WorkerProcess, purge_broker
from tests.runs.recovery_support import plan_computations, recovery_parent

QUESTIONS = 120
MODES = sorted(RecoveryPlanMode)


@pytest.fixture
def computations(monkeypatch) -> list[int]:
    return plan_computations(monkeypatch)


def parent(owner, **fields) -> Run:
    return recovery_parent(owner, questions=QUESTIONS, **fields)


def assert_kept_as_computed(run: Run) -> None:
    """Each mode's kept plan, put back together, equals the plan computed from the ledger now
    (not kept: no key), and is the one the review reads."""
    for mode in MODES:
        key = recovery.recovery_plan_key(run, mode)
        kept = recovery.recovery_plan_kept(run_id=run.pk, mode=mode, key=key)
        assert kept is not None, mode
        fresh = recovery._plan_computed(run, mode, None, None)
        assert kept.whole() == fresh, mode


@pytest.mark.django_db
def test_the_plans_kept_are_the_plans_a_review_computes(client, computations):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner, status="interrupted")

    assert sorted(recovery.recovery_plans_keep(run_id=run.pk)) == MODES
    assert computations == [run.pk]  # the cells read once for the three modes
    assert recovery.recovery_plans_keep(run_id=run.pk) == []  # kept: nothing computed again
    assert computations == [run.pk]

    assert_kept_as_computed(run)
    computations.clear()
    for mode in MODES:  # the review reads them: the API's pages and the recovery page
        page = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": mode, "limit": 50})
        assert page.status_code == 200, page.content[:300]
        if mode != RecoveryPlanMode.JUDGE_ONLY:  # the page's two scopes; judge-only is within
            html = client.get(f"/runs/{run.pk}/recovery/", {"mode": mode})
            assert html.status_code == 200 and page.json()["plan_sha256"] in html.content.decode()
    assert computations == []


@pytest.mark.django_db
def test_nothing_is_kept_where_nothing_can_be_recovered(computations):
    owner = f.user_create()
    completed = parent(owner, status="completed", cell_status=CellStatus.COMPLETED)
    preview = parent(owner, status="cancelled", mode="preview")
    running = parent(owner, status="running")

    for run in (completed, preview, running):
        assert recovery.recovery_plans_keep(run_id=run.pk) == []
    assert recovery.recovery_plans_keep(run_id=10**9) == []  # a run deleted meanwhile
    assert computations == [] and not StoredRecoveryPlan.objects.exists()


@pytest.mark.django_db
def test_the_run_end_rings_for_plans_only_when_cells_are_left(
    monkeypatch, django_capture_on_commit_callbacks
):
    rung: list[int] = []
    monkeypatch.setattr(doorbell, "recovery_plans_dispatch", lambda *, run_id: rung.append(run_id))
    owner = f.user_create()
    # The run has started; its cells are settled, so it ends at the next look.
    done = parent(owner, status="running", cell_status=CellStatus.COMPLETED)
    failed = parent(owner, status="running", cell_status=CellStatus.FAILED)
    preview = parent(owner, status="running", cell_status=CellStatus.FAILED, mode="preview")

    with django_capture_on_commit_callbacks(execute=True):
        assert run_finish_if_done(run_id=done.pk) == "completed"
        assert run_finish_if_done(run_id=failed.pk) == "failed"
        assert run_finish_if_done(run_id=preview.pk) == "failed"
        assert run_finish_if_done(run_id=failed.pk) == "failed"  # ended: no second bell
    assert rung == [failed.pk]


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_runs_plans_are_kept_by_a_worker_before_its_review(
    client, computations, tmp_path: Path
):
    """The user's path: cancel a queued run through the API; the bell waits in the broker until
    a real worker takes it; the recovery page then reads the plans that worker kept."""
    purge_broker()
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner, status="queued")
    cancelled = client.post(f"/api/v1/runs/{run.pk}/cancel/", content_type="application/json")
    assert cancelled.status_code in (200, 202), cancelled.content[:300]
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert not StoredRecoveryPlan.objects.filter(run=run).exists()  # nothing kept in the request

    worker = WorkerProcess(tmp_path / "worker.log", ["--pool=solo"])
    worker.start()
    try:
        deadline = time.monotonic() + 90  # a worker's start and three small plans, at load 10
        while StoredRecoveryPlan.objects.filter(run=run).count() < len(MODES):
            assert time.monotonic() < deadline, worker.warnings()
            time.sleep(0.2)
    finally:
        worker.stop()
        purge_broker()

    assert computations == []  # computed by the worker, not here
    assert_kept_as_computed(run)
    computations.clear()
    key = recovery.recovery_plan_key(run, "undispatched")
    kept = recovery.recovery_plan_kept(run_id=run.pk, mode="undispatched", key=key)
    page = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"})
    assert page.status_code == 200 and kept.whole()["plan_sha256"] in page.content.decode()
    assert computations == []
