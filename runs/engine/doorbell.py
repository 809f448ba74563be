"""The workers' doorbell: the one way anything asks a worker to drive or re-grade a run, or to
keep an ended run's recovery plans.

The task (runs/tasks.py) is an interface above the engine and the services (it imports both), so
it is sent by its name, never imported. Run creation, the recovery pass and the reaper all ring
here; tests replace `run_dispatch` in this module to hear the bell without a broker."""

from __future__ import annotations

import logging
import uuid

from celery import current_app

RUN_DRIVE_TASK = "runs.tasks.run_drive"
RUN_REGRADE_TASK = "runs.tasks.run_regrade_task"
RECOVERY_PLANS_TASK = "runs.tasks.recovery_plans_keep_task"

log = logging.getLogger(__name__)


def run_dispatch(*, run_id: int) -> None:
    """Ring the doorbell: one drive task per run (more may be added to spread a large run)."""
    current_app.send_task(RUN_DRIVE_TASK, args=(run_id,), ignore_result=True)


def recovery_plans_dispatch(*, run_id: int) -> None:
    """Ask a worker to keep the recovery plans of a run that has just ended without completing
    (`runs.settlement.recovery.recovery_plans_keep`), so that its first review reads a kept
    plan instead of computing one (seconds at 100,000 cells). Best effort: a send that fails is
    logged, never raised — the run has ended either way, and its review then computes the plan
    itself, as it always could."""
    try:
        current_app.send_task(RECOVERY_PLANS_TASK, args=(run_id,), ignore_result=True)
    except Exception:
        log.warning(
            "run %s: asking a worker to keep its recovery plans failed", run_id, exc_info=True
        )


def regrade_dispatch(*, run_id: int) -> str:
    """Queue a sandbox regrade of a run on a worker; returns the task id the API follows.

    The id is written to the result backend as PENDING before the task is sent, so a follow
    can tell a queued task from an id nobody issued (Celery reports PENDING for any unknown id,
    and `regrade --wait` would wait for it until its timeout). The worker's result updates that
    row; a send that fails removes it."""
    from django_celery_results.models import TaskResult

    task_id = str(uuid.uuid4())
    TaskResult.objects.create(task_id=task_id, status="PENDING", task_name=RUN_REGRADE_TASK)
    try:
        current_app.send_task(RUN_REGRADE_TASK, args=(run_id,), task_id=task_id)
    except BaseException:
        TaskResult.objects.filter(task_id=task_id, status="PENDING").delete()
        raise
    return task_id


def regrade_issued(task_id: str) -> bool:
    """Whether `regrade_dispatch` issued this task id (its result row exists)."""
    from django_celery_results.models import TaskResult

    return TaskResult.objects.filter(task_id=task_id).exists()
