"""Ending a run: the final status follows from the ledger, never from a worker's belief."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from runs.events import events_append
from runs.models import TERMINAL_RUN_STATUSES, Call, Cell, Run

OPEN_CALL_STATUSES = ("sent", "streaming")


def calls_settle_unheld(*, run_id: int, now: datetime) -> int:
    """Turn the run's calls still recorded as `sent`/`streaming` whose cell no live worker
    holds (not running, or its lease ran out) into `sent_unknown`, with their unfinished cells:
    no worker will ever close them, and they may have reached the model, so they are never
    sent again. Call it under the run row lock, in the transaction that ends the run (the
    database refuses a terminal run with an open call). Idempotent; returns how many it settled.
    """
    held = Q(cell__status="running", cell__lease_expires_at__gte=now)
    open_calls = list(
        Call.objects.filter(cell__run_id=run_id, status__in=OPEN_CALL_STATUSES)
        .exclude(held)
        .values_list("id", "cell_id")
    )
    if not open_calls:
        return 0
    Call.objects.filter(pk__in=[c for c, _ in open_calls], status__in=OPEN_CALL_STATUSES).update(
        status="sent_unknown",
        stage="done",
        error_code="unsettled_after_run_end",
        error="the run ended with this call unsettled; whether the model answered is unknown",
    )
    cells = sorted({cell for _, cell in open_calls})
    Cell.objects.filter(pk__in=cells).exclude(status__in=["completed", "failed"]).update(
        status="sent_unknown", lease_expires_at=None
    )
    events_append(
        run_id=run_id,
        events=[
            ("cell.sent_unknown", {"cell": c, "calls": [k for k, cc in open_calls if cc == c]})
            for c in cells
        ],
    )
    return len(open_calls)


def run_finish_if_done(*, run_id: int) -> str | None:
    """Make the run terminal once no cell is running and nothing more will be dispatched;
    a call still recorded as open then has no worker left to close it and is settled as
    `sent_unknown` first, in the same transaction.

    Idempotent; returns the final status, or None while the run is still going.
    """

    def cell_counts() -> dict[str, int]:
        return Cell.objects.filter(run_id=run_id).aggregate(
            total=Count("id"),
            running=Count("id", filter=Q(status="running")),
            pending=Count("id", filter=Q(status="pending")),
            completed=Count("id", filter=Q(status="completed")),
            unknown=Count("id", filter=Q(status="sent_unknown")),
            failed=Count("id", filter=Q(status="failed")),
        )

    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_RUN_STATUSES:
            return run.status
        counts = cell_counts()
        stopped = bool(run.cancel_requested_at or run.stop_reason)
        if counts["running"] or (counts["pending"] and not stopped):
            return None
        if run.status == "queued" and not run.cancel_requested_at:
            return None
        now = timezone.now()
        if calls_settle_unheld(run_id=run_id, now=now):
            counts = cell_counts()
        # sent_unknown before cancelled: a run whose worker died with calls in flight is
        # interrupted even if a cancel was requested meanwhile (the recovery pass, DESIGN §4).
        if counts["unknown"]:
            status = "interrupted"
        elif run.cancel_requested_at:
            status = "cancelled"
        elif counts["completed"] == counts["total"]:
            status = "completed"
        else:
            status = "failed"
        run.status = status
        run.finished_at = now
        run.save(update_fields=["status", "finished_at", "updated_at"])
        events: list[tuple[str, dict[str, object]]] = []
        if status == "interrupted":
            events.append(("run.interrupted", {"sent_unknown_cells": counts["unknown"]}))
        events.append(
            ("run.finished", {"status": status, **counts, "stop_reason": run.stop_reason})
        )
        events_append(run_id=run_id, events=events)
    return status
