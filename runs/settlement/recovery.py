"""Explicit recovery of unfinished runs (R15, DESIGN §3–4).

Recovery never re-sends anything by itself. A person reviews a plan — which cells of a terminal
run may be run again, which may not and why — and submits it with an idempotency key. The
submission creates an independent child run over the selected cells only; the parent's cells,
calls and evidence are never modified. Each parent cell can be claimed by one recovery only
(``RecoveryClaim.cell`` is unique), and a key is bound to one plan and one selection
(``RecoveryRequest`` is unique per (parent, key)), so a lost response can always be answered
by resubmitting the same plan, cells and key.

A third mode, ``judge_only`` (issue 34), completes judged cells whose answer is stored and
whose judge call was never sent, or was sent and failed at no cost
(`recovery_rules.awaits_judge`): its child is a re-judge child of those cells
(runs/settlement/rejudge.py `judge_only_child_create`) that sends one judge call per cell and no
subject call, at a worst case quoted per cell in the plan and confirmed on submission
(``confirm_judge_cost``), like a re-judge.

Plans are hashed over their canonical content (``plan_sha256``); a submission recomputes the
plan from the ledger as it is now and refuses when the hash differs, so nothing is created
from a review of a ledger that has changed since.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Literal

from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from runs.engine import doorbell
from runs.engine.finish import calls_settle_unheld
from runs.engine.reaper import ledger_reap
from runs.ledger.accounting import errors_not_billed_words
from runs.ledger.idempotency import IdempotencyKey, IdempotencyKeyReused
from runs.models import Cell, CellStatus, RecoveryClaim, RecoveryRequest, Run
from runs.reporting.report import refreshed_head
from runs.settlement import rejudge
from runs.settlement.lineage import run_known_spend
from runs.settlement.recovery_child import judge_only_recovery_child, recovery_child_create
from runs.settlement.recovery_pages import PlanPages
from runs.settlement.recovery_rules import (
    JUDGE_ONLY,
    JUDGE_ONLY_CLASS_TEXT,
    REASONS,
    REJUDGE_NEW_ATTEMPT,
    REJUDGE_NEW_ATTEMPT_TEXT,
    awaits_judge,
    cell_rows,
    exclusion,
    judge_only_hint,
    judge_only_why,
    recovery_offer,
)
from runs.settlement.recovery_store import (
    KeptPlanGone,
    recovery_plan_kept,
    recovery_plan_key,
    recovery_plan_store,
    recovery_plans_forget,
)
from runs.settlement.rejudge import ChildRunRefused
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from srbench.canonical import sha256_hex
from srbench.money import money_text, usd_text
from srbench.refusals import echo_items, echo_text

__all__ = [
    "recovery_plan",
    "recovery_plan_pages",
    "recovery_plan_read",
    "recovery_reconcile",
    "recovery_submit",
    "run_known_spend",
]

PLAN_VERSION = 1
Mode = Literal["undispatched", "failed", "judge_only"]
MODES = tuple(RecoveryPlanMode)
HEX64 = re.compile(r"^[0-9a-f]{64}$")


# --- reconciliation (R15.1) --------------------------------------------------------------------


def recovery_reconcile(*, run: Run) -> dict[str, int]:
    """Settle the ledger before a plan is offered: expired leases of dead workers (the
    recovery pass), then calls of a terminal run still recorded as `sent`/`streaming` whose
    cell no live worker holds → `sent_unknown` (they may have reached the model; they are never
    sent again). Idempotent. Raises ChildRunRefused when the run is not terminal."""
    # Code graded from a stored answer is left to the workers' pass: not in a web request.
    stats = ledger_reap(sandbox=False)
    now = timezone.now()
    settled = 0
    with transaction.atomic(durable=True):
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_terminal:
            # Runs end with nothing open since the terminal-status guard (migration 0004);
            # this settles runs that ended before it.
            settled = calls_settle_unheld(run_id=locked.pk, now=now)
    run.refresh_from_db()
    if not run.is_terminal:
        raise ChildRunRefused(
            "run_not_terminal",
            f"run {run.pk} is {run.status}: only a finished, failed, cancelled or interrupted "
            "run can be recovered (cancel it, or wait for it to end)",
            http_status=409,
            detail={"status": run.status},
        )
    if Cell.objects.filter(run=run).running().exists():
        # A live lease on a terminal run: a worker is still settling its last calls.
        raise ChildRunRefused(
            "calls_in_flight",
            f"run {run.pk} still has cells held by a worker; ask again when their leases end",
            http_status=409,
        )
    return {**stats, "settled_open_calls": settled}


def _progress(run: Run) -> dict[str, int]:
    counts = Cell.objects.filter(run=run).aggregate(
        denominator=Count("id"), **{s: Count("id", filter=Q(status=s)) for s in CellStatus.values}
    )
    return {k: int(v) for k, v in counts.items()}


# --- the plan (R15.2, R15.3) ---------------------------------------------------------------------


def _entry(row: dict[str, Any], mode: str) -> dict[str, Any]:
    entry = {
        "cell": row["pk"],
        "question": row["question_id"],
        "benchmark": row["benchmark"],
        "target": row["target__slug"],
        "slot": row["slot"],
        "status": row["status"],
        "calls": row["n_calls"],
    }
    if mode == RecoveryPlanMode.FAILED and row["n_calls"] and not row["cost_unknown"]:
        # What the previous attempt cost: the best guide to what a new attempt will cost. An
        # HTTP error answer has no usage; it counts as $0 only because its target's frozen
        # registry entry says error responses are not billed — said next to the figure.
        entry["previous_attempt_cost_usd"] = money_text(row["known_cost"])
        entry["previous_attempt_cost_assumes"] = errors_not_billed_words(row["errors_not_billed"])
    return entry


def _plan_content(run: Run, mode: str, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The hashed part of a plan: everything a reviewer decides on, nothing time-dependent."""
    eligible: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in cell_rows(run) if rows is None else rows:
        reason = exclusion(row, mode)
        entry = _entry(row, mode)
        if reason is not None:
            entry |= {
                "reason": reason,
                "detail": REASONS[reason]
                + (f" (child run {row['claimed_by']})" if row["claimed_by"] else ""),
            }
        if not row["claimed"] and awaits_judge(row):
            if mode == JUDGE_ONLY:
                entry["why"] = judge_only_why(row)
                # A failed judge call's $0 may rest on its judge's frozen errors_billed.
                if row["judge_calls"]:
                    entry["judge_failure_cost_assumes"] = errors_not_billed_words(
                        row["errors_not_billed"]
                    )
            else:
                entry["judge_only"] = judge_only_hint(row)
        (excluded if reason is not None else eligible).append(entry)
    if mode == JUDGE_ONLY:
        # One judge call per cell over its stored answer: its worst case, quoted up front.
        quotes = rejudge.judge_only_quotes(run, [e["cell"] for e in eligible])
        for e in eligible:
            e["judge_call_worst_case_usd"] = money_text(quotes[e["cell"]])
    spend = run_known_spend(run_ids=[run.pk])[run.pk]
    return {
        "version": PLAN_VERSION,
        "parent_run": run.pk,
        "parent_plan_sha256": run.plan_sha256,
        "mode": mode,
        "parent": {
            "status": run.status,
            "known_spend_usd": spend["known_spend_usd"],
            "spend_complete": spend["spend_complete"],
            "progress": _progress(run),
        },
        "eligible_cells": eligible,
        "excluded": excluded,
    }


def _check_mode(mode: object) -> str:
    if mode not in MODES:
        raise ChildRunRefused(
            "invalid_mode",
            "mode must be 'undispatched', 'failed' or 'judge_only'",
            detail={"mode": echo_text(mode)},
        )
    return str(mode)


def _check_cell_ids(cells: object) -> list[int]:
    if not isinstance(cells, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in cells
    ):
        raise ChildRunRefused("invalid_selection", "selected_cells must be a list of cell ids")
    if len(set(cells)) != len(cells):
        raise ChildRunRefused("invalid_selection", "selected_cells names a cell twice")
    if not cells:
        raise ChildRunRefused("invalid_selection", "selected_cells is empty: nothing to recover")
    return sorted(cells)


def _selection(content: dict[str, Any], selected: list[int] | None) -> list[int]:
    """The reviewed subset, which must lie within the eligible cells; None = all eligible."""
    eligible = [e["cell"] for e in content["eligible_cells"]]
    if selected is None:
        return eligible
    chosen = _check_cell_ids(selected)
    allowed = set(eligible)
    reasons = {e["cell"]: e["reason"] for e in content["excluded"]}
    outside = {str(c): reasons.get(c, "not a cell of this run") for c in chosen if c not in allowed}
    if outside:
        raise ChildRunRefused(
            "cells_not_eligible",
            f"{len(outside)} selected cell(s) are not eligible for {content['mode']} recovery",
            http_status=422,
            # Counted, and the first few named with their reason: never all of them.
            detail={**echo_items(outside), "by_reason": dict(Counter(outside.values()))},
        )
    return chosen


def _finish_plan(content: dict[str, Any], selected: list[int] | None) -> dict[str, Any]:
    chosen = _selection(content, selected)
    plan = {
        **content,
        "plan_sha256": sha256_hex(content),
        "selected_cells": chosen,
        "requires_acknowledgement": content["mode"] == RecoveryPlanMode.FAILED,
        "requires_judge_cost_confirmation": content["mode"] == JUDGE_ONLY,
        "model_requests": 0,
    }
    if content["mode"] == RecoveryPlanMode.FAILED:
        # Every billing assumption behind a figure of this plan, once (the entries name theirs).
        plan["previous_attempt_cost_assumptions"] = sorted(
            {w for e in content["eligible_cells"] if (w := e.get("previous_attempt_cost_assumes"))}
        )
    if content["mode"] == JUDGE_ONLY:
        plan["judge_cost_quote"] = _judge_quote(content, chosen)
        plan["subject_requests"] = 0
    return plan


def _judge_quote(content: dict[str, Any], chosen: list[int]) -> dict[str, Any]:
    """The quote of a judge-only selection: one judge call per cell, its worst case the sum
    of the cells' (unknown when any is)."""
    by_id = {e["cell"]: e["judge_call_worst_case_usd"] for e in content["eligible_cells"]}
    return rejudge.quote_of([None if by_id[c] is None else Decimal(by_id[c]) for c in chosen])


def _judge_only_summary(run: Run, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the other modes say of the judge-only class: how many cells, the quote and the
    hash of the judge-only plan (the recovery page submits it from there). None when the run
    has no such cell."""
    if not any(not r["claimed"] and awaits_judge(r) for r in rows):
        return None
    plan = _finish_plan(_plan_content(run, JUDGE_ONLY, rows), None)
    return {
        "mode": JUDGE_ONLY,
        "reason": JUDGE_ONLY_CLASS_TEXT,
        "cells": len(plan["eligible_cells"]),
        "plan_sha256": plan["plan_sha256"],
        "judge_cost_quote": plan["judge_cost_quote"],
    }


def recovery_plan(
    *, run: Run, mode: str, selected_cells: list[int] | None = None
) -> dict[str, Any]:
    """Reconcile, then classify every cell of the run for `mode`. Reads only after the
    reconciliation; no model call. ``selected_cells`` (cell ids) must be ⊆ the eligible
    cells; by default all eligible cells are selected.

    The default plan of a settled run is computed once per state of its ledger and then read
    back (`runs.settlement.recovery_store`): a reviewer pages through it (`recovery_plan_pages`
    reads a page of it; this reads it whole)."""
    key = _reviewed_key(run, mode, selected_cells)
    if key is not None and (kept := recovery_plan_kept(run_id=run.pk, mode=mode, key=key)):
        try:
            return kept.whole()
        except KeptPlanGone:
            pass
    return _plan_computed(run, mode, selected_cells, key)


def recovery_plan_pages(*, run: Run, mode: str) -> PlanPages:
    """The default plan of `mode` (every eligible cell selected) as its pages read it: the
    plan kept for the ledger's state, read O(page) rows a page, or computed now (and kept
    when the run is settled). A page read from it may raise `KeptPlanGone` (the kept plan was
    replaced meanwhile): ask again (`recovery_plan_read`)."""
    key = _reviewed_key(run, mode, None)
    if key is not None and (kept := recovery_plan_kept(run_id=run.pk, mode=mode, key=key)):
        return kept
    return PlanPages.of(_plan_computed(run, mode, None, key))


def recovery_plan_read[T](*, run: Run, mode: str, read: Callable[[PlanPages], T]) -> T:
    """`read` of the default plan of `mode` (a page of it: `PlanPages.page`): from the kept
    plan when there is one, once more when it was replaced between its reads (`KeptPlanGone`)."""
    try:
        return read(recovery_plan_pages(run=run, mode=mode))
    except KeptPlanGone:
        return read(recovery_plan_pages(run=run, mode=mode))


def _reviewed_key(run: Run, mode: str, selected_cells: list[int] | None) -> str | None:
    """Check the review may be made, reconcile, and name the ledger's state (None: a
    selection, or a run not settled — its plan is computed).

    A settled run (`recovery_plan_key` is not None: terminal, no running cell, no call in
    flight) has nothing to reconcile — no lease of its to reap, no open call to settle — so
    its key read first spares each page of a kept plan the reconciliation (≈ 40–70 ms
    at 100,000 cells); a run that is not settled is reconciled and its key read after. Either
    way the plan reads the run's row as it is now (the reconciliation re-reads it whole;
    here all but the frozen manifest, megabytes at 100,000 cases)."""
    _check_mode(mode)
    if run.mode != Run.Mode.LIVE:
        raise ChildRunRefused("not_live", "only live runs can be recovered", http_status=422)
    _check_rejudge_mode(run, mode)
    if selected_cells is None and (key := recovery_plan_key(run, mode)) is not None:
        refreshed_head(run)
        return key
    recovery_reconcile(run=run)
    return None if selected_cells is not None else recovery_plan_key(run, mode)


def _plan_computed(
    run: Run,
    mode: str,
    selected_cells: list[int] | None,
    key: str | None,
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The plan computed from the ledger (from `rows`, the run's `cell_rows` read by the caller
    for several modes, when given); kept under `key` when the key read before and after
    computing agree."""
    rows = cell_rows(run) if rows is None else rows
    plan = _finish_plan(_plan_content(run, mode, rows), selected_cells)
    plan["judge_only"] = None if mode == JUDGE_ONLY else _judge_only_summary(run, rows)
    if key is not None and recovery_plan_key(run, mode) == key:
        recovery_plan_store(run_id=run.pk, mode=mode, key=key, plan=plan)
    return plan


def recovery_plans_keep(*, run_id: int) -> list[str]:
    """Keep the default plan of each mode of an ended run that has cells left to recover, under
    its ledger's state, so that its first review — the recovery page, `benchmark recover-plan`
    — reads a kept plan instead of computing one (4–5 s at 100,000 cells). A worker's task
    (`runs.engine.doorbell.recovery_plans_dispatch`, rung by the run's end). Computes and keeps
    exactly what the review would (`_plan_computed` under `recovery_plan_key`), the run's cells
    read once for all modes; a mode already kept under the state is skipped, a mode the run
    refuses (a re-judge child's failed mode) is left out, and a run that is not settled, not
    live or has nothing to recover (`recovery_offer`) keeps nothing. Returns the modes kept now."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.mode != Run.Mode.LIVE or recovery_offer(run).reason is not None:
        return []
    rows: list[dict[str, Any]] | None = None
    kept: list[str] = []
    for mode in MODES:
        key = recovery_plan_key(run, mode)
        if key is None:
            break  # not settled: its plans are computed when read
        if recovery_plan_kept(run_id=run.pk, mode=mode, key=key) is not None:
            continue
        try:
            _check_rejudge_mode(run, mode)
        except ChildRunRefused:
            continue
        rows = cell_rows(run) if rows is None else rows
        _plan_computed(run, mode, None, key, rows)
        kept.append(mode)
    return kept


def _check_rejudge_mode(run: Run, mode: str) -> None:
    """A re-judge child (runs/settlement/rejudge.py; a recovery of one inherits its marker) judges the
    answers its parent stored for the same attempt slot: a new attempt (failed mode, the next
    slot) would have no answer to judge, and a judge call beyond those confirmed would exceed
    the confirmed cost. Only its never-sent cells can be recovered (undispatched mode)."""
    marker = run.manifest.get("rejudge") if isinstance(run.manifest, dict) else None
    if mode == RecoveryPlanMode.FAILED and marker:
        raise ChildRunRefused(
            REJUDGE_NEW_ATTEMPT,
            REJUDGE_NEW_ATTEMPT_TEXT.format(run=run.pk, parent=marker["parent_run"]),
            http_status=422,
            detail={"parent_run": marker["parent_run"], "modes": ["undispatched"]},
        )


# --- submission (R15.3, R15.4) -------------------------------------------------------------------


def _replay(
    run: Run, key: IdempotencyKey, *, user: Any, plan_sha256: str, selected: list[int] | None
) -> Run | None:
    """The child of an earlier submission with this key to this parent (the one replay
    helper, runs/ledger/idempotency.py), if the submission is the same; refused if it is not."""

    def same(existing: RecoveryRequest) -> bool:
        child = existing.child
        same_owner = existing.owner_id == getattr(user, "pk", None)
        if selected is None:
            # "All eligible" of the same plan hash: the child recorded what that meant.
            assert child is not None
            recorded = child.manifest.get("recovery", {})
            same_cells = recorded.get("selected_cells") == recorded.get("eligible_cells")
        else:
            same_cells = existing.selected_cells_sha256 == sha256_hex(selected)
        return same_owner and existing.plan_sha256 == plan_sha256 and same_cells

    def reused(existing: RecoveryRequest) -> IdempotencyKeyReused:
        return IdempotencyKeyReused(
            f"idempotency key {existing.idempotency_key!r} was already used for another "
            f"recovery of run {existing.parent_id} (child run {existing.child_id})",
            run=existing.child,
            detail={
                "child": existing.child_id,
                "plan_sha256": existing.plan_sha256,
                "selected_cells_sha256": existing.selected_cells_sha256,
            },
        )

    existing = key.replay(RecoveryRequest.objects.filter(parent=run), same=same, reused=reused)
    if existing is None:
        return None
    assert existing.child is not None
    return existing.child


def _submitted(plan: object) -> tuple[str, str, list[int] | None]:
    """(mode, reviewed plan hash, selected cells or None for all eligible) of a submission."""
    if not isinstance(plan, dict):
        raise ChildRunRefused("invalid_plan", "the plan must be a JSON object")
    mode = _check_mode(plan.get("mode"))
    sha = plan.get("plan_sha256")
    if sha is None:
        raise ChildRunRefused(
            "recovery_plan_required",
            "the reviewed plan_sha256 is required (review the recovery plan first)",
        )
    if not isinstance(sha, str) or not HEX64.match(sha):
        # Given but not a plan's hash: said so, not "required" (an upper-case copy read so);
        # the code stays the one clients know.
        raise ChildRunRefused(
            "recovery_plan_required",
            "plan_sha256 must be the reviewed plan's hash as the plan states it: 64 lower-case "
            "hexadecimal digits",
            detail={"plan_sha256": echo_text(sha)},
        )
    selected = plan.get("selected_cells")
    cells = None if selected is None else _check_cell_ids(selected)
    if mode == RecoveryPlanMode.FAILED and cells is None:
        raise ChildRunRefused(
            "invalid_selection",
            "failed mode needs explicitly selected_cells (the failed cells to try again)",
        )
    return mode, sha, cells


def recovery_submit(
    *,
    run: Run,
    plan: dict[str, Any],
    idempotency_key: str,
    acknowledge_new_attempt: bool = False,
    confirm_judge_cost: Decimal | None = None,
    user: Any,
) -> tuple[Run, bool]:
    """Create the child run of a reviewed recovery plan; returns (child, created).

    Mode ``judge_only`` needs ``confirm_judge_cost``: exactly the worst case the plan quotes
    for the selected cells (`_judge_quote`), recomputed under the parent's lock.

    Idempotent by (parent, idempotency_key): the same plan hash and cells return the same
    child (created=False, nothing dispatched again); anything else with that key is refused.
    The plan is recomputed from the ledger under the parent's row lock and must hash to the
    reviewed ``plan_sha256``; the child, its cells, the request and one claim per parent cell
    are written in one durable transaction, and the child is dispatched only after commit.
    The parent is never modified.
    """
    mode, plan_sha256, selected = _submitted(plan)
    key = _required_key(idempotency_key)

    def replayed() -> Run | None:
        return _replay(run, key, user=user, plan_sha256=plan_sha256, selected=selected)

    if (child := replayed()) is not None:
        return child, False
    _check_may_recover(
        run,
        mode,
        acknowledge_new_attempt=acknowledge_new_attempt,
        confirm_judge_cost=confirm_judge_cost,
    )
    if mode == RecoveryPlanMode.FAILED and not acknowledge_new_attempt:
        raise _unacknowledged(run, selected or [])
    recovery_reconcile(run=run)
    try:
        with transaction.atomic(durable=True):
            return _submission_write(
                run,
                mode=mode,
                plan_sha256=plan_sha256,
                selected=selected,
                key=key,
                acknowledge_new_attempt=acknowledge_new_attempt,
                confirm_judge_cost=confirm_judge_cost,
                user=user,
            )
    except ChildRunRefused as refused:
        if refused.code == "recovery_plan_changed":
            # The plan the reviewer saw is not the plan now: whatever was kept for this run is
            # dropped, so the next review computes it (a kept plan the code no longer computes
            # the same way — a deploy that changed a reason's words — would otherwise be
            # served again, and refused again, until the ledger moved).
            recovery_plans_forget(run_id=run.pk)
        raise
    except IntegrityError:
        # Only another writer can get here (the parent lock serialises our own path): answer
        # as a replay would, or say which cells someone else claimed first.
        if (child := replayed()) is not None:
            return child, False
        raise ChildRunRefused(
            "cells_already_claimed",
            "another recovery claimed some of these cells first; review the plan again",
            http_status=409,
        ) from None


def _required_key(idempotency_key: object) -> IdempotencyKey:
    """A recovery spends money: its key is required (runs/ledger/idempotency.py checks it)."""
    key = IdempotencyKey.parse(idempotency_key)
    if key is None:
        raise ChildRunRefused("idempotency_key_required", "an Idempotency-Key is required")
    return key


def _check_may_recover(
    run: Run, mode: str, *, acknowledge_new_attempt: bool, confirm_judge_cost: Decimal | None
) -> None:
    """Refusals that need no ledger read: a new attempt of a re-judge child, an unconfirmed
    judge-only cost, a preview run. (An unacknowledged new attempt is `_unacknowledged`'s.)"""
    _check_rejudge_mode(run, mode)
    if mode == JUDGE_ONLY and confirm_judge_cost is None:
        raise ChildRunRefused(
            "judge_cost_unconfirmed",
            "judge_only mode sends one judge call per selected cell over its stored answer (no "
            "subject call): confirm the worst case the plan quotes (confirm_judge_cost)",
            http_status=422,
        )
    if run.mode != Run.Mode.LIVE:
        raise ChildRunRefused("not_live", "only live runs can be recovered", http_status=422)


def _unacknowledged(run: Run, selected: list[int]) -> ChildRunRefused:
    """Failed mode without acknowledge_new_attempt, worded from what the plan knows the
    selected cells' earlier attempts cost (`_entry`'s figures): the amount when known — $0 is
    said as $0 with its billing assumption, never as money spent — and "unknown" when any is
    not known (a cell without a figure). Reads the ledger; creates nothing."""
    figures = {e["cell"]: e for e in _plan_content(run, RecoveryPlanMode.FAILED)["eligible_cells"]}
    costs = [figures.get(c, {}).get("previous_attempt_cost_usd") for c in selected]
    total = None if None in costs else sum((Decimal(str(c)) for c in costs), Decimal(0))
    assumed = sorted(
        {w for c in selected if (w := figures.get(c, {}).get("previous_attempt_cost_assumes"))}
    )
    spent = f"their earlier attempts cost {usd_text(total)}" + (
        f" ({'; '.join(assumed)})" if assumed else ""
    )
    if total is None:
        spent = "what their earlier attempts cost is unknown"
    return ChildRunRefused(
        "acknowledgement_required",
        f"failed mode sends new model calls, billed as new attempts, for {len(selected)} "
        f"selected cell(s); {spent}: confirm the new attempts and their cost "
        "(acknowledge_new_attempt)",
        http_status=422,
        detail={
            "selected_cells": len(selected),
            "previous_attempts_cost_usd": money_text(total),
            "previous_attempt_cost_assumptions": assumed,
        },
    )


def _plan_changed(parent: Run, mode: str, reviewed: str, current: str) -> ChildRunRefused:
    """Why a submission's plan hash is not the plan of its mode now: a plan reviewed in another
    mode (its hash is that mode's plan now), else a ledger that changed since the review."""
    rows = cell_rows(parent)
    for other in MODES:
        if other != mode and sha256_hex(_plan_content(parent, other, rows)) == reviewed:
            return ChildRunRefused(
                "recovery_mode_changed",
                f"this recovery plan was reviewed in mode '{other}' but submitted in mode "
                f"'{mode}'; submit it in mode '{other}', or review a '{mode}' plan and submit "
                "that (nothing was created)",
                http_status=422,
                detail={"reviewed_mode": str(other), "submitted_mode": mode},
            )
    return ChildRunRefused(
        "recovery_plan_changed",
        "the ledger changed since this recovery plan was reviewed; review the new "
        "plan and submit again (nothing was created)",
        http_status=409,
        detail={"reviewed": reviewed, "current": current},
    )


def _submission_write(
    run: Run,
    *,
    mode: str,
    plan_sha256: str,
    selected: list[int] | None,
    key: IdempotencyKey,
    acknowledge_new_attempt: bool,
    confirm_judge_cost: Decimal | None,
    user: Any,
) -> tuple[Run, bool]:
    """The submission's writes, inside its durable transaction: recompute the plan under the
    parent's lock, check its hash, create the child, the request and the claims, and dispatch
    the child after commit."""
    # One submission per parent at a time: the plan computed below is the ledger this
    # transaction commits against. The unique claim row is the second line.
    parent = Run.objects.select_for_update().get(pk=run.pk)
    replayed = _replay(parent, key, user=user, plan_sha256=plan_sha256, selected=selected)
    if replayed is not None:
        return replayed, False
    content = _plan_content(parent, mode)
    current = sha256_hex(content)
    if current != plan_sha256:
        raise _plan_changed(parent, mode, plan_sha256, current)
    chosen_ids = _selection(content, selected)
    if not chosen_ids:
        raise ChildRunRefused(
            "nothing_to_recover",
            f"no cell of run {parent.pk} is eligible for {mode} recovery",
            http_status=422,
        )
    by_id = {e["cell"]: e for e in content["eligible_cells"]}
    chosen = [by_id[c] for c in chosen_ids]
    if mode == JUDGE_ONLY:
        quote = _judge_quote(content, chosen_ids)
        child = judge_only_recovery_child(
            parent, content, chosen_ids, plan_sha256, quote, confirm_judge_cost, user
        )
    else:
        child = recovery_child_create(parent, content, chosen, plan_sha256, mode, user)
    request = RecoveryRequest.objects.create(
        parent=parent,
        owner=user,
        idempotency_key=key.value,
        mode=mode,
        plan_sha256=plan_sha256,
        selected_cells_sha256=sha256_hex(chosen_ids),
        acknowledged_new_attempt=bool(acknowledge_new_attempt),
        child=child,
    )
    RecoveryClaim.objects.bulk_create(RecoveryClaim(cell_id=c, request=request) for c in chosen_ids)
    transaction.on_commit(lambda: doorbell.run_dispatch(run_id=child.pk))
    return child, True
