"""The workers' doorbell: the one way anything asks a worker to drive or re-grade a run.

The task (runs/tasks.py) is an interface above the engine and the services (it imports both), so
it is sent by its name, never imported. Run creation, the recovery pass and the reaper all ring
here; tests replace `run_dispatch` in this module to hear the bell without a broker."""

from __future__ import annotations

from celery import current_app

RUN_DRIVE_TASK = "runs.tasks.run_drive"
RUN_REGRADE_TASK = "runs.tasks.run_regrade_task"


def run_dispatch(*, run_id: int) -> None:
    """Ring the doorbell: one drive task per run (more may be added to spread a large run)."""
    current_app.send_task(RUN_DRIVE_TASK, args=(run_id,), ignore_result=True)


def regrade_dispatch(*, run_id: int) -> str:
    """Queue a sandbox regrade of a run on a worker; returns the task id the API follows."""
    return current_app.send_task(RUN_REGRADE_TASK, args=(run_id,)).id
