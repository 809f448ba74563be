"""The recovery pass: settle the cells of workers that died (DESIGN §4, R15.1).

A cell whose lease ran out belongs to a dead worker. What happens to it depends only on the
ledger: a call row in `sent`/`streaming` may have reached the model, so it becomes
`sent_unknown` (and its cell and run say so) — it is never sent again automatically. A cell
that committed no call sent nothing and simply returns to `pending`.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from runs.engine.finish import calls_settle_unheld
from runs.events import events_append
from runs.models import Call, Cell, Run

INTERRUPT_REASON = "a worker stopped with calls in flight (sent_unknown)"

log = logging.getLogger(__name__)


def ledger_reap(*, now=None) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Settle every expired cell lease. Idempotent and safe to run from many workers at once
    (row locks with skip_locked; conditional updates)."""
    now = now or timezone.now()
    stats = {"sent_unknown_cells": 0, "returned_cells": 0, "failed_cells": 0, "runs": 0}
    redispatch: set[int] = set()
    with transaction.atomic(durable=True):
        expired = list(
            Cell.objects.select_for_update(skip_locked=True)
            .filter(status="running", lease_expires_at__lt=now)
            .values_list("id", "run_id", "claimed_by")
        )
        by_run: dict[int, list[tuple[int, str]]] = {}
        for cell_id, run_id, worker in expired:
            by_run.setdefault(run_id, []).append((cell_id, worker))
        for run_id, cells in by_run.items():
            ids = [c for c, _ in cells]
            open_calls = list(
                Call.objects.filter(cell_id__in=ids, status__in=["sent", "streaming"]).values_list(
                    "id", "cell_id"
                )
            )
            unknown_cells = {cell for _, cell in open_calls}
            Call.objects.filter(pk__in=[c for c, _ in open_calls]).update(
                status="sent_unknown",
                stage="done",
                error_code="worker_lost",
                error="the worker holding this call stopped; whether the model answered is unknown",
            )
            with_calls = set(
                Call.objects.filter(cell_id__in=ids).values_list("cell_id", flat=True).distinct()
            )
            never_sent = [c for c in ids if c not in with_calls]
            finished_calls_only = [c for c in ids if c in with_calls and c not in unknown_cells]
            Cell.objects.filter(pk__in=unknown_cells).update(
                status="sent_unknown", lease_expires_at=None, error="worker lost mid-call"
            )
            Cell.objects.filter(pk__in=finished_calls_only).update(
                status="failed",
                lease_expires_at=None,
                finished_at=now,
                error="worker lost after its calls finished; evidence kept",
            )
            Cell.objects.filter(pk__in=never_sent).update(
                status="pending", claimed_by="", lease_expires_at=None, started_at=None
            )
            events = [
                (
                    "cell.sent_unknown",
                    {"cell": c, "calls": [k for k, cc in open_calls if cc == c]},
                )
                for c in sorted(unknown_cells)
            ]
            events += [
                ("cell.returned", {"cell": c, "reason": "worker lost before sending"})
                for c in never_sent
            ]
            events += [
                ("cell.failed", {"cell": c, "error": "worker lost after its calls"})
                for c in finished_calls_only
            ]
            # The run row lock orders this pass after any other pass or driver that settled
            # cells of this run, so the last one to settle sees that nothing runs any more.
            status = (
                Run.objects.select_for_update()
                .filter(pk=run_id)
                .values_list("status", flat=True)
                .get()
            )
            stopped_now = False
            if unknown_cells and status == "running":
                # No new dispatch at once; the run becomes interrupted only when nothing of it
                # is open: cells other workers (or this dead one, under later leases) still
                # hold are settled first (a terminal status is final for those who poll it).
                stopped_now = bool(
                    Run.objects.filter(pk=run_id)
                    .exclude(stop_reason=INTERRUPT_REASON)
                    .update(stop_reason=INTERRUPT_REASON)
                )
            if (
                status == "running"
                and Cell.objects.filter(run_id=run_id, status="sent_unknown").exists()
                and not Cell.objects.filter(run_id=run_id, status="running").exists()
            ):
                calls_settle_unheld(run_id=run_id, now=now)
                Run.objects.filter(pk=run_id).update(
                    status="interrupted", finished_at=now, stop_reason=INTERRUPT_REASON
                )
                unknown_total = Cell.objects.filter(run_id=run_id, status="sent_unknown").count()
                events.append(("run.interrupted", {"sent_unknown_cells": unknown_total}))
                stats["runs"] += 1
            elif stopped_now:
                events.append(("run.dispatch_stopped", {"reason": INTERRUPT_REASON}))
            if never_sent and not unknown_cells:
                redispatch.add(run_id)
            events_append(run_id=run_id, events=events)
            stats["sent_unknown_cells"] += len(unknown_cells)
            stats["returned_cells"] += len(never_sent)
            stats["failed_cells"] += len(finished_calls_only)
        for run_id in redispatch:
            from runs.services import run_dispatch

            transaction.on_commit(lambda r=run_id: run_dispatch(run_id=r))
    stats["redispatched_runs"] = runs_redispatch_idle(now=now)
    return stats


def runs_redispatch_idle(*, now=None) -> int:  # type: ignore[no-untyped-def]
    """Ring the doorbell again for runs nobody drives: queued or running, not stopped, with
    pending cells, no running cell and no event for a whole lease (a worker died before its
    first claim, or the broker lost the message). Safe because claims are idempotent; the
    event it appends keeps it from ringing more than once a lease while a queue is backed up.
    """
    from django.conf import settings
    from django.db.models import Exists, Max, OuterRef

    from runs.services import run_dispatch

    now = now or timezone.now()
    idle_since = now - timedelta(seconds=settings.SRBENCH_CELL_LEASE_SECONDS)
    candidates = (
        Run.objects.filter(
            status__in=["queued", "running"],
            cancel_requested_at__isnull=True,
            stop_reason="",
            created_at__lt=idle_since,
        )
        .filter(Exists(Cell.objects.filter(run=OuterRef("pk"), status="pending")))
        .exclude(Exists(Cell.objects.filter(run=OuterRef("pk"), status="running")))
        .annotate(last_event=Max("events__created_at"))
        .filter(last_event__lt=idle_since)
        .values_list("pk", flat=True)
    )
    count = 0
    for run_id in candidates:
        with transaction.atomic(durable=True):
            events_append(run_id=run_id, events=[("run.redispatched", {"reason": "no driver"})])
            transaction.on_commit(lambda r=run_id: run_dispatch(run_id=r))
        count += 1
    return count


def start_reaper_thread(interval: float) -> threading.Thread:
    """Run the recovery pass now and then every `interval` seconds in this worker process."""

    def loop() -> None:
        stop = threading.Event()
        while not stop.is_set():
            try:
                stats = ledger_reap()
                if any(stats.values()):
                    log.warning("recovery pass: %s", stats)
            except Exception:  # keep reaping; a transient DB error must not end the thread
                log.exception("recovery pass failed")
            finally:
                connection.close()
            stop.wait(interval)

    thread = threading.Thread(target=loop, name="srbench-reaper", daemon=True)
    thread.start()
    return thread
