"""The reaper rings the doorbell again for a run nobody drives (R15.1): a run left `queued`
when the web process died between its commit and the broker message, or `running` when its
worker died before its first claim. Never for a run someone is driving or has stopped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from runs.engine.reaper import runs_finish_idle, runs_redispatch_idle
from runs.ledger.events import events_append
from runs.models import RunEvent
from tests import factories as f

pytestmark = pytest.mark.django_db


def idle_run(status: str, *cell_states: str):  # type: ignore[no-untyped-def]
    run = f.run_create(status=status)
    question = f.question_create()
    for slot, state in enumerate(cell_states):
        f.cell_create(run=run, question=question, slot=slot, status=state)
    events_append(run_id=run.pk, events=[("run.created", {})])
    return run


def after_a_lease():  # type: ignore[no-untyped-def]
    return timezone.now() + timedelta(seconds=settings.SRBENCH_CELL_LEASE_SECONDS + 1)


def rung(run) -> int:  # type: ignore[no-untyped-def]
    return RunEvent.objects.filter(run=run, type="run.redispatched").count()


@pytest.mark.parametrize("status", ["queued", "running"])
def test_a_run_nobody_drives_is_rung_again_after_a_lease(status):
    run = idle_run(status, "pending", "completed")
    assert runs_redispatch_idle(now=timezone.now()) == 0  # not idle for a lease yet
    assert rung(run) == 0
    assert runs_redispatch_idle(now=after_a_lease()) == 1
    assert rung(run) == 1


def test_runs_that_are_driven_stopped_or_done_are_left_alone():
    driven = idle_run("running", "pending", "running")
    done = idle_run("running", "completed")
    stopped = idle_run("queued", "pending")
    stopped.cancel_requested_at = timezone.now()
    stopped.save(update_fields=["cancel_requested_at"])
    ended = idle_run("interrupted", "pending")
    assert runs_redispatch_idle(now=after_a_lease()) == 0
    assert [rung(r) for r in (driven, done, stopped, ended)] == [0, 0, 0, 0]


def test_a_run_nobody_will_end_is_finished_after_a_lease():
    """A worker killed after settling its run's last cell and before `run_finish_if_done`
    leaves a run with no lease to expire and no pending cell to ring for (R15): the pass ends
    it from its ledger a lease later. A stopped run with pending cells ends too; a run with
    pending cells and no stop is rung instead, and a driven one is left alone."""
    done = idle_run("running", "completed", "completed")
    some_failed = idle_run("running", "completed", "failed")
    stopped = idle_run("running", "pending", "completed")
    stopped.stop_reason = "max_cost_usd reached"
    stopped.save(update_fields=["stop_reason"])
    going = idle_run("running", "pending", "completed")
    driven = idle_run("running", "completed", "running")
    assert runs_finish_idle(now=timezone.now()) == 0  # not idle for a lease yet
    assert runs_finish_idle(now=after_a_lease()) == 3
    for run in (done, some_failed, stopped, going, driven):
        run.refresh_from_db()
    assert [done.status, some_failed.status, stopped.status] == ["completed", "failed", "failed"]
    assert [going.status, driven.status] == ["running", "running"]
    assert RunEvent.objects.filter(run=done, type="run.finished").count() == 1
    assert runs_finish_idle(now=after_a_lease()) == 0  # idempotent
