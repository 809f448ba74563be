"""Ending a run: the final status follows from the ledger, never from a worker's belief."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from runs.events import events_append
from runs.models import TERMINAL_RUN_STATUSES, Cell, Run


def run_finish_if_done(*, run_id: int) -> str | None:
    """Make the run terminal once no cell is running and nothing more will be dispatched.

    Idempotent; returns the final status, or None while the run is still going.
    """
    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_RUN_STATUSES:
            return run.status
        counts = Cell.objects.filter(run_id=run_id).aggregate(
            total=Count("id"),
            running=Count("id", filter=Q(status="running")),
            pending=Count("id", filter=Q(status="pending")),
            completed=Count("id", filter=Q(status="completed")),
            unknown=Count("id", filter=Q(status="sent_unknown")),
            failed=Count("id", filter=Q(status="failed")),
        )
        stopped = bool(run.cancel_requested_at or run.stop_reason)
        if counts["running"] or (counts["pending"] and not stopped):
            return None
        if run.status == "queued" and not run.cancel_requested_at:
            return None
        if run.cancel_requested_at:
            status = "cancelled"
        elif counts["unknown"]:
            status = "interrupted"
        elif counts["completed"] == counts["total"]:
            status = "completed"
        else:
            status = "failed"
        run.status = status
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at", "updated_at"])
        events_append(
            run_id=run_id,
            events=[("run.finished", {"status": status, **counts, "stop_reason": run.stop_reason})],
        )
    return status
