"""Celery tasks: thin interfaces over the engine. They carry IDs only."""

from __future__ import annotations

import asyncio

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings


@shared_task(ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def run_drive(run_id: int) -> None:
    """Drive a run. Safe to deliver twice: cells are claimed in the database, and a
    dispatched call is never sent again (a redelivery only claims what is still pending)."""
    from runs.engine.driver import drive

    asyncio.run(drive(run_id))


@shared_task(ignore_result=True)
def ledger_reap_task() -> None:
    from runs.engine.reaper import ledger_reap

    ledger_reap()


@worker_ready.connect
def start_recovery_pass(**_: object) -> None:
    """At worker start and periodically: settle cells of dead workers (DESIGN §4)."""
    from runs.engine.reaper import start_reaper_thread

    start_reaper_thread(settings.SRBENCH_REAPER_INTERVAL_SECONDS)
