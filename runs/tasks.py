"""Celery tasks: thin interfaces over the engine. They carry IDs only.

The dependency runs one way: tasks import the engine and services, never the reverse (services
send `run_drive` by its name, runs.engine.doorbell.RUN_DRIVE_TASK)."""

from __future__ import annotations

import asyncio

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from runs.engine.doorbell import RECOVERY_PLANS_TASK, RUN_DRIVE_TASK, RUN_REGRADE_TASK
from runs.engine.driver import drive
from runs.engine.gc_policy import worker_gc_policy
from runs.engine.reaper import start_reaper_thread
from runs.settlement.recovery import recovery_plans_keep
from runs.settlement.regrade import run_regrade


@shared_task(name=RUN_DRIVE_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def run_drive(run_id: int) -> None:
    """Drive a run. Safe to deliver twice: cells are claimed in the database, and a
    dispatched call is never sent again (a redelivery only claims what is still pending)."""
    worker_gc_policy()
    asyncio.run(drive(run_id))


@shared_task(name=RUN_REGRADE_TASK, ignore_result=False, acks_late=True, reject_on_worker_lost=True)
def run_regrade_task(run_id: int) -> dict[str, int | bool]:
    """Re-grade a run with the sandbox (code answers run again; runs.settlement.regrade). Never sends a
    model call. Safe to deliver twice: a regrade of the same inputs returns the stored one.
    Its result (kept by the result backend) names the regrade for `GET …/regrade/?task=`."""
    result = run_regrade(run_id=run_id, sandbox=True)
    return {"run": run_id, "regrade": result.regrade.pk, "created": result.created}


@shared_task(name=RECOVERY_PLANS_TASK, ignore_result=True)
def recovery_plans_keep_task(run_id: int) -> None:
    """Keep the recovery plans of a run that ended without completing, for its first review
    (runs.settlement.recovery.recovery_plans_keep). Reads the ledger, calls no model; safe to
    deliver twice or never (a plan kept under the ledger's state is not computed again, and a
    review computes one that is missing)."""
    recovery_plans_keep(run_id=run_id)


@worker_ready.connect
def start_recovery_pass(**_: object) -> None:
    """At worker start and periodically: settle cells of dead workers (DESIGN §4). The recovery
    pass is a thread of every worker, not a scheduled task: it needs no beat process, and it
    runs wherever a worker runs (each pass takes its rows with SKIP LOCKED, so several workers'
    passes never settle one cell twice)."""
    start_reaper_thread(settings.SRBENCH_REAPER_INTERVAL_SECONDS)
