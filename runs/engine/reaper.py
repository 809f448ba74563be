"""The recovery pass: settle the cells of workers that died (DESIGN §4, R15.1).

A cell whose lease ran out belongs to a dead worker. What happens to it depends only on the
ledger: a call row in `sent`/`streaming` may have reached the model, so it becomes
`sent_unknown` (and its cell and run say so) — it is never sent again automatically. A cell
that committed no call sent nothing and simply returns to `pending`. A cell whose calls are
all settled is finished from what they stored (R15.3, `finish.cell_settlement`): graded from
the saved answer (and saved verdict) when its episode is complete, else failed as
`episode_interrupted`, which recovery never offers. The pass itself never sends a call.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.utils import timezone

from runs.engine import doorbell, store
from runs.engine.finish import (
    Settlement,
    calls_settle_unheld,
    cell_settlement,
    rejudge_answers,
    run_finish_if_done,
    run_report_keep,
    runs_report_backfill,
    stored_calls,
)
from runs.ledger.events import events_append
from runs.models import Call, CallStatus, Cell, CellStatus, Run, RunEvent, RunStatus

INTERRUPT_REASON = "a worker stopped with calls in flight (sent_unknown)"
# Who holds a cell the pass took over to grade in the sandbox, and for how long at least: a
# grader that dies with its process leaves the cell to the next pass, which grades it again
# (grading sends nothing, so doing it twice is harmless; the fencing token keeps one result).
GRADER = "recovery-pass:grading"
GRADING_LEASE_SECONDS = 600.0

log = logging.getLogger(__name__)


def _settlements(cell_ids: list[int], *, sandbox: bool) -> dict[int, Settlement | None]:
    """How each of these cells (every call settled) ends from its stored calls; None: it needs
    the sandbox and `sandbox` is False."""
    calls = stored_calls(cell_ids)
    rejudged = rejudge_answers(cell_ids)
    rows = Cell.objects.filter(pk__in=cell_ids).values_list(
        "pk", "benchmark", "run__manifest", "question__payload", "question__secret__data"
    )
    out: dict[int, Settlement | None] = {}
    for pk, benchmark, manifest, payload, secret in rows:
        try:
            out[pk] = cell_settlement(
                benchmark=benchmark,
                manifest=manifest,
                payload=payload,
                secret=secret or {},
                calls=calls[pk],
                sandbox=sandbox,
                rejudge_answer=rejudged.get(pk),
            )
        except Exception as exc:  # as the driver does: a bug fails the cell, not the pass
            log.exception("settling cell %s from the ledger failed", pk)
            answer = next((c.content for c in reversed(calls[pk]) if c.role == "subject"), "")
            out[pk] = Settlement(
                "failed", answer=answer, error=f"internal error: {type(exc).__name__}: {exc}"
            )
    return out


def _settle_event(cell_id: int, s: Settlement) -> tuple[str, dict[str, object]]:
    if s.status == CellStatus.COMPLETED:
        return (
            "cell.completed",
            {"cell": cell_id, "correct": s.correct, "settled_by": "recovery_pass"},
        )
    return ("cell.failed", {"cell": cell_id, "error": s.error[:500], "settled_by": "recovery_pass"})


def cells_grade_taken_over(cells: list[tuple[int, int, int]]) -> int:
    """Grade cells the pass took over for the sandbox, (run, cell, token) each, outside any
    transaction, and finish them with their fencing token; then end their runs if done.
    Returns how many it finished."""
    done = 0
    for run_id, cell_id, token in cells:
        settlement = _settlements([cell_id], sandbox=True).get(cell_id)
        if settlement is None:  # unreachable with sandbox=True; never guess a grade
            continue
        finished = store.ledger_apply(
            run_id=run_id,
            max_cost=None,
            ops=[
                store.FinishCell(
                    cell_id,
                    token,
                    settlement.status,
                    settlement.correct,
                    settlement.grade,
                    settlement.answer,
                    settlement.error,
                )
            ],
        )[0]
        done += bool(finished)
        run_finish_if_done(run_id=run_id)
    return done


# What a pass counts, in the order its stats report them (then redispatched and finished runs).
PASS_COUNTS = (
    "sent_unknown_cells",
    "returned_cells",
    "completed_cells",
    "failed_cells",
    "graded_in_sandbox",
    "runs",
)


@dataclass
class _Pass:
    """What one recovery pass has done so far, and what it leaves for after its transaction."""

    now: datetime
    sandbox: bool
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PASS_COUNTS, 0))
    redispatch: set[int] = field(default_factory=set)
    settled_runs: set[int] = field(default_factory=set)
    interrupted_runs: set[int] = field(default_factory=set)
    to_grade: list[tuple[int, int, int]] = field(default_factory=list)


def ledger_reap(*, now=None, sandbox: bool = True) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Settle every expired cell lease. Idempotent and safe to run from many workers at once
    (row locks with skip_locked; conditional updates).

    `sandbox`: whether this caller may grade code in the sandbox (seconds of CPU, after the
    settling transaction). The workers' pass may; a web request (recovery review) passes False
    and leaves such cells to the workers."""
    reap = _Pass(now=now or timezone.now(), sandbox=sandbox)
    with transaction.atomic(durable=True):
        # The one lock order of the ledger (runs/engine/store.py): each run row first, in id
        # order, then its expired cells (skipping those another pass holds), then their
        # calls. A driver's batch takes its run row before its cells too, so the two wait
        # for each other instead of deadlocking (issue 34).
        runs = sorted(set(Cell.objects.lease_expired(reap.now).values_list("run_id", flat=True)))
        for run_id in runs:
            store.run_lock(run_id)
            ids = list(
                Cell.objects.select_for_update(skip_locked=True)
                .filter(run_id=run_id)
                .lease_expired(reap.now)
                .order_by("pk")
                .values_list("id", flat=True)
            )
            if ids:
                _run_reap(reap, run_id, ids)
        for run_id in reap.redispatch:
            transaction.on_commit(lambda r=run_id: doorbell.run_dispatch(run_id=r))
    # Cells finished from the ledger may have been the run's last: nobody else would end it
    # (its driver may have ended before the lease ran out). Idempotent; None while it goes on.
    for run_id in sorted(reap.settled_runs - reap.redispatch):
        run_finish_if_done(run_id=run_id)
    # Runs this pass interrupted get the end work of any ended run (report, run-end hooks).
    for run_id in sorted(reap.interrupted_runs):
        run_report_keep(run_id=run_id)
    stats = reap.stats
    stats["graded_in_sandbox"] = cells_grade_taken_over(reap.to_grade)
    stats["redispatched_runs"] = runs_redispatch_idle(now=reap.now)
    stats["finished_runs"] = runs_finish_idle(now=reap.now)
    return stats


def _run_reap(reap: _Pass, run_id: int, ids: list[int]) -> None:
    """Settle these expired cells of one run, inside the pass's transaction."""
    open_calls = list(Call.objects.filter(cell_id__in=ids).open().values_list("id", "cell_id"))
    unknown_cells = {cell for _, cell in open_calls}
    Call.objects.filter(pk__in=[c for c, _ in open_calls]).update(
        status=CallStatus.SENT_UNKNOWN,
        stage=Call.Stage.DONE,
        error_code="worker_lost",
        error="the worker holding this call stopped; whether the model answered is unknown",
    )
    with_calls = set(
        Call.objects.filter(cell_id__in=ids).values_list("cell_id", flat=True).distinct()
    )
    never_sent = [c for c in ids if c not in with_calls]
    finished_calls_only = [c for c in ids if c in with_calls and c not in unknown_cells]
    Cell.objects.filter(pk__in=unknown_cells).update(
        status=CellStatus.SENT_UNKNOWN, lease_expires_at=None, error="worker lost mid-call"
    )
    settled = _cells_settle_from_ledger(reap, run_id, finished_calls_only)
    Cell.objects.filter(pk__in=never_sent).update(
        status=CellStatus.PENDING, claimed_by="", lease_expires_at=None, started_at=None
    )
    events = [
        ("cell.sent_unknown", {"cell": c, "calls": [k for k, cc in open_calls if cc == c]})
        for c in sorted(unknown_cells)
    ]
    events += [
        ("cell.returned", {"cell": c, "reason": "worker lost before sending"}) for c in never_sent
    ]
    events += [_settle_event(c, settled[c]) for c in sorted(settled)]
    if settled:
        reap.settled_runs.add(run_id)
    events += _run_stop_or_interrupt(reap, run_id, has_unknown=bool(unknown_cells))
    if never_sent and not unknown_cells:
        reap.redispatch.add(run_id)
    events_append(run_id=run_id, events=events)
    stats = reap.stats
    stats["sent_unknown_cells"] += len(unknown_cells)
    stats["returned_cells"] += len(never_sent)
    stats["completed_cells"] += sum(s.status == CellStatus.COMPLETED for s in settled.values())
    stats["failed_cells"] += sum(s.status == CellStatus.FAILED for s in settled.values())


def _cells_settle_from_ledger(
    reap: _Pass, run_id: int, cell_ids: list[int]
) -> dict[int, Settlement]:
    """Finish cells whose calls are all settled from what they stored; a cell that needs the
    sandbox is taken over for grading after the transaction (when this pass may), else left
    expired for a worker's pass, which may run the sandbox. Returns those finished here."""
    settled: dict[int, Settlement] = {}
    for cell_id, settlement in _settlements(cell_ids, sandbox=False).items():
        if settlement is not None:
            Cell.objects.running().filter(pk=cell_id).update(
                status=settlement.status,
                correct=settlement.correct,
                scored=settlement.correct is not None,
                grade=settlement.grade,
                final_answer=settlement.answer,
                error=settlement.error,
                finished_at=reap.now,
                lease_expires_at=None,
            )
            settled[cell_id] = settlement
        elif reap.sandbox:
            # Graded after this transaction (the sandbox takes seconds); the cell is held
            # under a fresh fencing token so only that grading can finish it.
            grading_lease = max(settings.SRBENCH_CELL_LEASE_SECONDS, GRADING_LEASE_SECONDS)
            Cell.objects.filter(pk=cell_id).update(
                claim_token=F("claim_token") + 1,
                claimed_by=GRADER,
                lease_expires_at=reap.now + timedelta(seconds=grading_lease),
            )
            token = Cell.objects.values_list("claim_token", flat=True).get(pk=cell_id)
            reap.to_grade.append((run_id, cell_id, token))
    return settled


def _run_stop_or_interrupt(
    reap: _Pass, run_id: int, *, has_unknown: bool
) -> list[tuple[str, dict[str, object]]]:
    """A run with calls of unknown outcome stops dispatching at once, and becomes interrupted
    once nothing of it runs any more. Returns the events to append."""
    # The run row lock orders this pass after any other pass or driver that settled cells of
    # this run, so the last one to settle sees that nothing runs any more.
    status = (
        Run.objects.select_for_update().filter(pk=run_id).values_list("status", flat=True).get()
    )
    stopped_now = False
    if has_unknown and status == RunStatus.RUNNING:
        # No new dispatch at once; the run becomes interrupted only when nothing of it is
        # open: cells other workers (or this dead one, under later leases) still hold are
        # settled first (a terminal status is final for those who poll it).
        stopped_now = bool(
            Run.objects.filter(pk=run_id)
            .exclude(stop_reason=INTERRUPT_REASON)
            .update(stop_reason=INTERRUPT_REASON)
        )
    cells = Cell.objects.filter(run_id=run_id)
    if (
        status == RunStatus.RUNNING
        and cells.sent_unknown().exists()
        and not cells.running().exists()
    ):
        calls_settle_unheld(run_id=run_id, now=reap.now)
        Run.objects.filter(pk=run_id).update(
            status=RunStatus.INTERRUPTED, finished_at=reap.now, stop_reason=INTERRUPT_REASON
        )
        reap.stats["runs"] += 1
        reap.interrupted_runs.add(run_id)
        return [("run.interrupted", {"sent_unknown_cells": cells.sent_unknown().count()})]
    if stopped_now:
        return [("run.dispatch_stopped", {"reason": INTERRUPT_REASON})]
    return []


def runs_finish_idle(*, now=None) -> int:  # type: ignore[no-untyped-def]
    """End runs nobody will end: running, no cell running, nothing more to dispatch (no pending
    cell, or dispatch stopped or cancelled) and no event for a whole lease. A worker killed
    after settling its last cell and before `run_finish_if_done` leaves one, with no lease left
    to expire and no pending cell to ring for (R15). Idempotent under the run row lock."""
    now = now or timezone.now()
    idle_since = now - timedelta(seconds=settings.SRBENCH_CELL_LEASE_SECONDS)
    # O(1) per running run: cell counts from its summary row, the newest event by index.
    candidates = (
        Run.objects.running()
        .filter(summary__running=0)
        .filter(Q(summary__pending=0) | ~Q(stop_reason="") | Q(cancel_requested_at__isnull=False))
        .annotate(
            last_event=Subquery(
                RunEvent.objects.filter(run=OuterRef("pk"))
                .order_by("-seq")
                .values("created_at")[:1]
            )
        )
        .filter(last_event__lt=idle_since)
        .values_list("pk", flat=True)
    )
    return sum(run_finish_if_done(run_id=run_id) is not None for run_id in candidates)


def runs_redispatch_idle(*, now=None) -> int:  # type: ignore[no-untyped-def]
    """Ring the doorbell again for runs nobody drives: queued or running, not stopped, with
    pending cells, no running cell and no event for a whole lease (a worker died before its
    first claim, or the broker lost the message). Safe because claims are idempotent; the
    event it appends keeps it from ringing more than once a lease while a queue is backed up.
    """
    now = now or timezone.now()
    idle_since = now - timedelta(seconds=settings.SRBENCH_CELL_LEASE_SECONDS)
    candidates = (
        Run.objects.active()
        .not_stopped()
        .filter(created_at__lt=idle_since)
        .filter(Exists(Cell.objects.pending().filter(run=OuterRef("pk"))))
        .exclude(Exists(Cell.objects.running().filter(run=OuterRef("pk"))))
        .annotate(last_event=Max("events__created_at"))
        .filter(last_event__lt=idle_since)
        .values_list("pk", flat=True)
    )
    count = 0
    for run_id in candidates:
        with transaction.atomic(durable=True):
            events_append(run_id=run_id, events=[("run.redispatched", {"reason": "no driver"})])
            transaction.on_commit(lambda r=run_id: doorbell.run_dispatch(run_id=r))
        count += 1
    return count


def start_reaper_thread(interval: float) -> threading.Thread:
    """Run the recovery pass now and then every `interval` seconds in this worker process."""

    def loop() -> None:
        stop = threading.Event()
        unreachable = False
        while not stop.is_set():
            try:
                store.writer_session()
                if unreachable:
                    # The database is back: nobody could renew a lease while it was away, so
                    # every held cell gets one more before this pass may settle it (the drivers
                    # that held their writes through the outage renew first).
                    extended = leases_extend(lease_seconds=settings.SRBENCH_CELL_LEASE_SECONDS)
                    log.warning(
                        "recovery pass: the database answers again; %s leases extended", extended
                    )
                    unreachable = False
                stats = ledger_reap()
                if any(stats.values()):
                    log.warning("recovery pass: %s", stats)
                # Ended runs with no report kept get their end-of-run work (issue 38 item 1).
                if kept := runs_report_backfill():
                    log.info("recovery pass: end-of-run work of %s ended run(s) done", kept)
            except (OperationalError, InterfaceError):
                unreachable = True
                log.warning("recovery pass: the database is unreachable", exc_info=True)
            except Exception:  # keep reaping; a transient DB error must not end the thread
                log.exception("recovery pass failed")
            finally:
                connection.close()
            stop.wait(interval)

    thread = threading.Thread(target=loop, name="srbench-reaper", daemon=True)
    thread.start()
    return thread


def leases_extend(*, lease_seconds: float) -> int:
    """Give every running cell at least one more lease from now, run by run under each run's
    row lock: after the database was unreachable no worker could renew, and the drivers that
    held their writes through it must get the first word on their cells, not the recovery
    pass. Returns how many cells it extended."""
    until = timezone.now() + timedelta(seconds=lease_seconds)
    extended = 0
    for run_id in sorted(set(Cell.objects.running().values_list("run_id", flat=True))):
        with transaction.atomic(durable=True):
            store.run_lock(run_id)
            extended += (
                Cell.objects.running()
                .filter(run_id=run_id, lease_expires_at__lt=until)
                .update(lease_expires_at=until)
            )
    return extended
