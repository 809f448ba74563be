"""Explicit recovery of unfinished runs (R15, DESIGN §3–4).

Recovery never re-sends anything by itself. A person reviews a plan — which cells of a terminal
run may be run again, which may not and why — and submits it with an idempotency key. The
submission creates an independent child run over the selected cells only; the parent's cells,
calls and evidence are never modified. Each parent cell can be claimed by one recovery only
(``RecoveryClaim.cell`` is unique), and a key is bound to one plan and one selection
(``RecoveryRequest`` is unique per (parent, key)), so a lost response can always be answered
by resubmitting the same plan, cells and key.

Plans are hashed over their canonical content (``plan_sha256``); a submission recomputes the
plan from the ledger as it is now and refuses when the hash differs, so nothing is created
from a review of a ledger that has changed since.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from runs.engine.driver import HTTP_ERROR_BODY_CAP
from runs.engine.finish import (
    EPISODE_INTERRUPTED,
    LEGACY_SETTLED_ERROR,
    calls_settle_unheld,
    single_answer,
)
from runs.engine.reaper import ledger_reap
from runs.events import events_append
from runs.models import (
    TERMINAL_RUN_STATUSES,
    Call,
    Cell,
    RecoveryClaim,
    RecoveryRequest,
    Run,
)
from runs.reconcile import effective_call_sums
from srbench.canonical import sha256_hex
from srbench.money import money_text

__all__ = [
    "MAX_RECOVERY_PAGE",
    "REASONS",
    "RecoveryError",
    "recovery_plan",
    "recovery_plan_page",
    "recovery_reconcile",
    "recovery_submit",
    "run_known_spend",
    "run_lineage",
]

PLAN_VERSION = 1
MAX_RECOVERY_PAGE = 100  # R13.3 with R13.1: candidates and exclusions are read ≤ 100 at a time
Mode = Literal["undispatched", "failed"]
MODES = ("undispatched", "failed")
AMBIGUOUS_CALL_STATUSES = ("sent", "streaming", "sent_unknown")
HEX64 = re.compile(r"^[0-9a-f]{64}$")

# Exclusion reasons: stable codes for machines, a sentence for people.
REASONS = {
    "completed_evidence_preserved": "completed evidence is preserved; a finished answer is "
    "never run again",
    "already_claimed_by_another_recovery": "already claimed by another recovery",
    "ambiguous_dispatch_requires_reconciliation": "a call may have reached the model "
    "(sent or sent_unknown); its outcome is unknown, so the cell is not run again",
    "ambiguous_saved_result_requires_reconciliation": "cost unclear: a saved call has unknown "
    "usage or cost (a stream cut mid-way, a timeout after bytes arrived, output without a "
    "usage receipt); the model may have billed it, so the cell is not run again",
    "error_responses_billed": "cost unclear: a call failed with an HTTP error before any "
    "stream byte, but the target's registry entry frozen into the plan bills error responses "
    "(or predates that field), so the failure may have cost money",
    "already_dispatched_requires_new_attempt": "a model call was already sent for this cell; "
    "only 'failed' mode can start a new attempt",
    "never_dispatched_use_undispatched_mode": "no model call was ever sent for this cell; "
    "use 'undispatched' mode",
    "not_failed": "the cell did not fail",
    "complete_answer_stored": "complete answer stored: every call of this cell completed and "
    "its answer is saved (a worker stopped before it recorded the grade); a finished answer is "
    "never run again",
    EPISODE_INTERRUPTED: "episode interrupted: a worker stopped after every call it sent for "
    "this cell had completed and before the episode's next call (a later step, turn or the "
    "judge); that call is never sent automatically and a new attempt would send the completed "
    "ones again, so the cell is not run again (evidence kept)",
}


class RecoveryError(Exception):
    """A refusal with an HTTP status and a stable code for the API and CLI."""

    def __init__(
        self, code: str, message: str, *, http_status: int = 400, detail: Any = None
    ) -> None:
        self.code = code
        self.message = message
        self.http_status = http_status
        self.detail = detail
        super().__init__(message)


# --- reconciliation (R15.1) --------------------------------------------------------------------


def recovery_reconcile(*, run: Run) -> dict[str, int]:
    """Settle the ledger before a plan is offered: expired leases of dead workers (the
    recovery pass), then calls of a terminal run still recorded as `sent`/`streaming` whose
    cell no live worker holds → `sent_unknown` (they may have reached the model; they are never
    sent again). Idempotent. Raises RecoveryError when the run is not terminal."""
    # Code graded from a stored answer is left to the workers' pass: not in a web request.
    stats = ledger_reap(sandbox=False)
    now = timezone.now()
    settled = 0
    with transaction.atomic(durable=True):
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status in TERMINAL_RUN_STATUSES:
            # Runs end with nothing open since the terminal-status guard (migration 0004);
            # this settles runs that ended before it.
            settled = calls_settle_unheld(run_id=locked.pk, now=now)
    run.refresh_from_db()
    if not run.is_terminal:
        raise RecoveryError(
            "run_not_terminal",
            f"run {run.pk} is {run.status}: only a finished, failed, cancelled or interrupted "
            "run can be recovered (cancel it, or wait for it to end)",
            http_status=409,
            detail={"status": run.status},
        )
    if Cell.objects.filter(run=run, status="running").exists():
        # A live lease on a terminal run: a worker is still settling its last calls.
        raise RecoveryError(
            "calls_in_flight",
            f"run {run.pk} still has cells held by a worker; ask again when their leases end",
            http_status=409,
        )
    return {**stats, "settled_open_calls": settled}


# --- spend ---------------------------------------------------------------------------------------


def run_known_spend(*, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Known spend of each run (all roles, effective usage after corrections): the sum of the
    known costs, and whether every call's cost is known. Unknown stays unknown: a run with any
    call of unknown cost has ``spend_complete`` False and only a *known* partial sum."""
    out: dict[int, dict[str, Any]] = {
        r: {"known": Decimal(0), "complete": True, "calls": 0} for r in run_ids
    }
    for row in effective_call_sums(run_ids=run_ids, group_by="target_role"):
        entry = out[row["run_id"]]
        entry["calls"] += row["calls"]
        if row["cost"] is not None:
            entry["known"] += row["cost"]
        if row["cost_unknown"]:
            entry["complete"] = False
    return {
        r: {
            "known_spend_usd": money_text(v["known"]),
            "spend_complete": v["complete"],
            "calls": v["calls"],
        }
        for r, v in out.items()
    }


def _progress(run: Run) -> dict[str, int]:
    states = ("pending", "running", "completed", "failed", "cancelled", "sent_unknown")
    counts = Cell.objects.filter(run=run).aggregate(
        denominator=Count("id"), **{s: Count("id", filter=Q(status=s)) for s in states}
    )
    return {k: int(v) for k, v in counts.items()}


# --- the plan (R15.2, R15.3) ---------------------------------------------------------------------


def http_error_before_stream(call: Mapping[str, Any]) -> bool:
    """A known failure: the server answered with a complete HTTP 4xx/5xx response before any
    stream byte. The engine records such a call as `failed` with error_code ``http_<status>``
    and only when the error body was read to its end (a body cut off at the cap, a disconnect
    or a timeout while reading it gets another code or more bytes). A router that reports
    internal inference calls in its error response did work that may be billed."""
    status = call["http_status"]
    return (
        call["status"] == "failed"
        and status is not None
        and 400 <= status <= 599
        and call["error_code"] == f"http_{status}"
        and call["bytes_received"] <= HTTP_ERROR_BODY_CAP
        and not call["inference_call_count"]
    )


def _errors_billed(manifest: Mapping[str, Any]) -> dict[str, bool | None]:
    """Whether each target bills error responses, as frozen in the run's plan (None: the plan
    predates the field, so the rule is unknown and treated as billed)."""
    snapshots = [
        *manifest.get("targets", []),
        *manifest.get("judges", {}).values(),
        *manifest.get("simulators", {}).values(),
    ]
    return {s["slug"]: s.get("errors_billed") for s in snapshots}


def _known_failures(run: Run) -> tuple[Counter[int], Counter[int]]:
    """Per cell: the known failures known to have cost nothing (their target does not bill
    error responses) and those whose cost stays unclear (it does, or the plan does not say).
    Such a call never has usage, so its effective cost is always unknown; the first count is
    what turns that unknown into a known zero for recovery."""
    billed = _errors_billed(run.manifest)
    free: Counter[int] = Counter()
    unclear: Counter[int] = Counter()
    calls = Call.objects.filter(
        cell__run=run, status="failed", http_status__gte=400, cost_usd__isnull=True
    ).values(
        "cell_id",
        "target__slug",
        "status",
        "http_status",
        "error_code",
        "bytes_received",
        "inference_call_count",
    )
    for call in calls:
        if http_error_before_stream(call):
            if billed.get(call["target__slug"]) is False:
                free[call["cell_id"]] += 1
            else:
                unclear[call["cell_id"]] += 1
    return free, unclear


def _cell_rows(run: Run) -> list[dict[str, Any]]:
    rows = list(
        Cell.objects.filter(run=run)
        .order_by("pk")
        .values("pk", "question_id", "benchmark", "target__slug", "slot", "status", "error")
        .annotate(
            n_calls=Count("calls"),
            ambiguous_calls=Count("calls", filter=Q(calls__status__in=AMBIGUOUS_CALL_STATUSES)),
            completed_calls=Count("calls", filter=Q(calls__status="completed")),
            subject_completed=Count(
                "calls", filter=Q(calls__status="completed", calls__role="subject")
            ),
        )
    )
    cost_unknown: Counter[int] = Counter()
    known_cost: dict[int, Decimal] = {}
    for row in effective_call_sums(run_ids=[run.pk], group_by="cell_role"):
        cost_unknown[row["cell_id"]] += row["cost_unknown"]
        if row["cost"] is not None:
            known_cost[row["cell_id"]] = known_cost.get(row["cell_id"], Decimal(0)) + row["cost"]
    claimed = dict(
        RecoveryClaim.objects.filter(cell__run=run).values_list("cell_id", "request__child_id")
    )
    free_failures, billed_failures = _known_failures(run)
    for row in rows:
        row["cost_unknown"] = max(cost_unknown[row["pk"]] - free_failures[row["pk"]], 0)
        row["billed_failures"] = billed_failures[row["pk"]]
        row["known_cost"] = known_cost.get(row["pk"], Decimal(0))
        row["claimed_by"] = claimed.get(row["pk"], 0) or None
        row["claimed"] = row["pk"] in claimed
    return rows


def _exclusion(row: dict[str, Any], mode: str) -> str | None:
    """The first reason a cell may not be recovered in `mode`, or None when it is eligible.
    The order matters: a claim or a finished answer outranks everything; an ambiguous
    dispatch outranks the mode's own rules because it must never be re-sent in any mode."""
    if row["claimed"]:
        return "already_claimed_by_another_recovery"
    if row["status"] == "completed":
        return "completed_evidence_preserved"
    if row["ambiguous_calls"] or row["status"] in ("sent_unknown", "running"):
        return "ambiguous_dispatch_requires_reconciliation"
    stored = _stored_answer(row)
    if stored:
        return stored
    if mode == "undispatched":
        return "already_dispatched_requires_new_attempt" if row["n_calls"] else None
    if not row["n_calls"]:
        return "never_dispatched_use_undispatched_mode"
    if row["cost_unknown"]:
        if row["cost_unknown"] == row["billed_failures"]:
            return "error_responses_billed"
        return "ambiguous_saved_result_requires_reconciliation"
    if row["status"] != "failed":
        return "not_failed"
    return None


def _stored_answer(row: dict[str, Any]) -> str | None:
    """Cells a worker left after every call it sent had completed (R15.3: a complete answer is
    never run again; issue 20 point 1). The recovery pass finishes such a cell from the ledger:
    graded (then it is `completed`), or failed as `episode_interrupted` when the episode had
    more calls to send. Cells settled before that rule carry its old message: one whose single
    subject call completed holds a complete answer; a multi-call one was interrupted."""
    error = row["error"] or ""
    if error.startswith(f"{EPISODE_INTERRUPTED}:"):
        return EPISODE_INTERRUPTED
    if error != LEGACY_SETTLED_ERROR:
        return None
    if single_answer(row["benchmark"]):
        return "complete_answer_stored" if row["subject_completed"] else None
    return EPISODE_INTERRUPTED if row["completed_calls"] == row["n_calls"] else None


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
    if mode == "failed" and row["n_calls"] and not row["cost_unknown"]:
        # What the previous attempt cost: the best guide to what a new attempt will cost.
        entry["previous_attempt_cost_usd"] = money_text(row["known_cost"])
    return entry


def _plan_content(run: Run, mode: str) -> dict[str, Any]:
    """The hashed part of a plan: everything a reviewer decides on, nothing time-dependent."""
    eligible: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in _cell_rows(run):
        reason = _exclusion(row, mode)
        entry = _entry(row, mode)
        if reason is None:
            eligible.append(entry)
        else:
            excluded.append(
                {
                    **entry,
                    "reason": reason,
                    "detail": REASONS[reason]
                    + (f" (child run {row['claimed_by']})" if row["claimed_by"] else ""),
                }
            )
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
        raise RecoveryError(
            "invalid_mode", "mode must be 'undispatched' or 'failed'", detail={"mode": mode}
        )
    return str(mode)


def _check_cell_ids(cells: object) -> list[int]:
    if not isinstance(cells, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in cells
    ):
        raise RecoveryError("invalid_selection", "selected_cells must be a list of cell ids")
    if len(set(cells)) != len(cells):
        raise RecoveryError("invalid_selection", "selected_cells names a cell twice")
    if not cells:
        raise RecoveryError("invalid_selection", "selected_cells is empty: nothing to recover")
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
        raise RecoveryError(
            "cells_not_eligible",
            f"{len(outside)} selected cell(s) are not eligible for {content['mode']} recovery",
            http_status=422,
            detail=outside,
        )
    return chosen


def _finish_plan(content: dict[str, Any], selected: list[int] | None) -> dict[str, Any]:
    return {
        **content,
        "plan_sha256": sha256_hex(content),
        "selected_cells": _selection(content, selected),
        "requires_acknowledgement": content["mode"] == "failed",
        "model_requests": 0,
    }


def recovery_plan(
    *, run: Run, mode: str, selected_cells: list[int] | None = None
) -> dict[str, Any]:
    """Reconcile, then classify every cell of the run for `mode`. Reads only after the
    reconciliation; no model call. ``selected_cells`` (cell ids) must be ⊆ the eligible
    cells; by default all eligible cells are selected."""
    _check_mode(mode)
    if run.mode != Run.Mode.LIVE:
        raise RecoveryError("not_live", "only live runs can be recovered", http_status=422)
    recovery_reconcile(run=run)
    return _finish_plan(_plan_content(run, mode), selected_cells)


def recovery_plan_page(
    plan: dict[str, Any],
    *,
    eligible_after: int = 0,
    excluded_after: int = 0,
    limit: int = MAX_RECOVERY_PAGE,
) -> dict[str, Any]:
    """A plan with its candidate and exclusion lists cut to one page each (R13.3); the cursor
    is the cell id. Totals and reasons are counted over the whole plan."""
    limit = max(1, min(limit, MAX_RECOVERY_PAGE))

    def page(items: list[dict[str, Any]], after: int) -> tuple[list[dict[str, Any]], int | None]:
        rest = [i for i in items if i["cell"] > after]
        return rest[:limit], (rest[limit - 1]["cell"] if len(rest) > limit else None)

    eligible, next_eligible = page(plan["eligible_cells"], eligible_after)
    excluded, next_excluded = page(plan["excluded"], excluded_after)
    summary = {k: v for k, v in plan.items() if k not in ("eligible_cells", "excluded")}
    return {
        **summary,
        "selected_cells_count": len(plan["selected_cells"]),
        "counts": {
            "eligible": len(plan["eligible_cells"]),
            "excluded": len(plan["excluded"]),
            "excluded_by_reason": dict(Counter(e["reason"] for e in plan["excluded"])),
        },
        "eligible_cells": eligible,
        "next_eligible_after": next_eligible,
        "excluded": excluded,
        "next_excluded_after": next_excluded,
    }


# --- submission (R15.3, R15.4) -------------------------------------------------------------------


def _child_manifest(
    parent: Run, content: dict[str, Any], chosen: list[dict[str, Any]], plan_sha256: str
) -> dict[str, Any]:
    """The parent's frozen manifest limited to the selection. Targets, judges, prices,
    sampling, limits and failure policy are copied unchanged so the child's results stay
    comparable with the parent's; `recovery` records where the child came from."""
    m = parent.manifest
    questions = {c["question"] for c in chosen}
    benchmarks = {c["benchmark"] for c in chosen}
    slugs = {c["target"] for c in chosen}
    cases = [c for c in m["cases"] if c[0] in questions]
    selected_ids = [c["cell"] for c in chosen]
    return {
        **m,
        "name": f"{m['name']} · recovery ({content['mode']})",
        "benchmarks": {
            b: {**v, "cases": sum(1 for c in cases if c[2] == b)}
            for b, v in m["benchmarks"].items()
            if b in benchmarks
        },
        "cases": cases,
        "targets": [t for t in m["targets"] if t["slug"] in slugs],
        "judges": {b: j for b, j in m["judges"].items() if b in benchmarks},
        "recovery": {
            "parent_run": parent.pk,
            "parent_plan_sha256": parent.plan_sha256,
            "mode": content["mode"],
            "recovery_plan_sha256": plan_sha256,
            "selected_cells": selected_ids,
            "selected_cells_sha256": sha256_hex(selected_ids),
            "eligible_cells": [e["cell"] for e in content["eligible_cells"]],
            "parent_snapshot": content["parent"],
            "recovery_subset": True,
        },
    }


def _replay(
    existing: RecoveryRequest, *, user: Any, plan_sha256: str, selected: list[int] | None
) -> Run:
    """The child of an earlier submission with this key, if the submission is the same."""
    child = existing.child
    same_owner = existing.owner_id == getattr(user, "pk", None)
    if selected is None:
        # "All eligible" of the same plan hash: the child recorded what that meant.
        assert child is not None
        recorded = child.manifest.get("recovery", {})
        same_cells = recorded.get("selected_cells") == recorded.get("eligible_cells")
    else:
        same_cells = existing.selected_cells_sha256 == sha256_hex(selected)
    if not (same_owner and existing.plan_sha256 == plan_sha256 and same_cells):
        raise RecoveryError(
            "idempotency_key_reused",
            f"idempotency key {existing.idempotency_key!r} was already used for another "
            f"recovery of run {existing.parent_id} (child run {existing.child_id})",
            http_status=422,
            detail={
                "child": existing.child_id,
                "plan_sha256": existing.plan_sha256,
                "selected_cells_sha256": existing.selected_cells_sha256,
            },
        )
    assert child is not None
    return child


def _submitted(plan: object) -> tuple[str, str, list[int] | None]:
    if not isinstance(plan, dict):
        raise RecoveryError("invalid_plan", "the plan must be a JSON object")
    mode = _check_mode(plan.get("mode"))
    sha = plan.get("plan_sha256")
    if not isinstance(sha, str) or not HEX64.match(sha):
        raise RecoveryError(
            "recovery_plan_required",
            "the reviewed plan_sha256 is required (review the recovery plan first)",
        )
    selected = plan.get("selected_cells")
    cells = None if selected is None else _check_cell_ids(selected)
    if mode == "failed" and cells is None:
        raise RecoveryError(
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
    user: Any,
) -> tuple[Run, bool]:
    """Create the child run of a reviewed recovery plan; returns (child, created).

    Idempotent by (parent, idempotency_key): the same plan hash and cells return the same
    child (created=False, nothing dispatched again); anything else with that key is refused.
    The plan is recomputed from the ledger under the parent's row lock and must hash to the
    reviewed ``plan_sha256``; the child, its cells, the request and one claim per parent cell
    are written in one durable transaction, and the child is dispatched only after commit.
    The parent is never modified.
    """
    mode, plan_sha256, selected = _submitted(plan)
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise RecoveryError("idempotency_key_required", "an Idempotency-Key is required")
    if len(idempotency_key) > 255:
        raise RecoveryError("invalid_idempotency_key", "the idempotency key is too long (≤ 255)")
    existing = RecoveryRequest.objects.filter(parent=run, idempotency_key=idempotency_key).first()
    if existing is not None:
        return _replay(existing, user=user, plan_sha256=plan_sha256, selected=selected), False
    if mode == "failed" and not acknowledge_new_attempt:
        raise RecoveryError(
            "acknowledgement_required",
            "failed mode sends new model calls for cells that already cost money: confirm the "
            "new attempts and their extra cost (acknowledge_new_attempt)",
            http_status=422,
        )
    if run.mode != Run.Mode.LIVE:
        raise RecoveryError("not_live", "only live runs can be recovered", http_status=422)
    recovery_reconcile(run=run)
    try:
        with transaction.atomic(durable=True):
            # One submission per parent at a time: the plan computed below is the ledger
            # this transaction commits against. The unique claim row is the second line.
            parent = Run.objects.select_for_update().get(pk=run.pk)
            existing = RecoveryRequest.objects.filter(
                parent=parent, idempotency_key=idempotency_key
            ).first()
            if existing is not None:
                child = _replay(existing, user=user, plan_sha256=plan_sha256, selected=selected)
                return child, False
            content = _plan_content(parent, mode)
            current = sha256_hex(content)
            if current != plan_sha256:
                raise RecoveryError(
                    "recovery_plan_changed",
                    "the ledger changed since this recovery plan was reviewed; review the new "
                    "plan and submit again (nothing was created)",
                    http_status=409,
                    detail={"reviewed": plan_sha256, "current": current},
                )
            chosen_ids = _selection(content, selected)
            if not chosen_ids:
                raise RecoveryError(
                    "nothing_to_recover",
                    f"no cell of run {parent.pk} is eligible for {mode} recovery",
                    http_status=422,
                )
            by_id = {e["cell"]: e for e in content["eligible_cells"]}
            chosen = [by_id[c] for c in chosen_ids]
            child = _child_create(parent, content, chosen, plan_sha256, mode, user)
            request = RecoveryRequest.objects.create(
                parent=parent,
                owner=user,
                idempotency_key=idempotency_key,
                mode=mode,
                plan_sha256=plan_sha256,
                selected_cells_sha256=sha256_hex(chosen_ids),
                acknowledged_new_attempt=bool(acknowledge_new_attempt),
                child=child,
            )
            RecoveryClaim.objects.bulk_create(
                RecoveryClaim(cell_id=c, request=request) for c in chosen_ids
            )
            from runs.services import run_dispatch

            transaction.on_commit(lambda: run_dispatch(run_id=child.pk))
    except IntegrityError:
        # Only another writer can get here (the parent lock serialises our own path): answer
        # as a replay would, or say which cells someone else claimed first.
        existing = RecoveryRequest.objects.filter(
            parent=run, idempotency_key=idempotency_key
        ).first()
        if existing is not None:
            return _replay(existing, user=user, plan_sha256=plan_sha256, selected=selected), False
        raise RecoveryError(
            "cells_already_claimed",
            "another recovery claimed some of these cells first; review the plan again",
            http_status=409,
        ) from None
    return child, True


def _child_create(
    parent: Run,
    content: dict[str, Any],
    chosen: list[dict[str, Any]],
    plan_sha256: str,
    mode: str,
    user: Any,
) -> Run:
    manifest = _child_manifest(parent, content, chosen, plan_sha256)
    child = Run.objects.create(
        name=manifest["name"],
        mode=parent.mode,
        profile=parent.profile,
        manifest=manifest,
        plan_sha256=sha256_hex(manifest),
        dataset_id=parent.dataset_id,
        owner=user,
        parent=parent,
    )
    target_ids = dict(
        Cell.objects.filter(pk__in=[c["cell"] for c in chosen]).values_list("pk", "target_id")
    )
    if mode == "failed":
        # A new attempt gets the next slot of its (question, target): it is a different
        # attempt from the parent's, and a later comparison must not confuse the two.
        top = {
            (r["question_id"], r["target_id"]): r["top"]
            for r in Cell.objects.filter(run=parent)
            .values("question_id", "target_id")
            .annotate(top=Max("slot"))
        }
        slot_of = {c["cell"]: top[(c["question"], target_ids[c["cell"]])] + 1 for c in chosen}
    else:
        slot_of = {c["cell"]: c["slot"] for c in chosen}
    Cell.objects.bulk_create(
        Cell(
            run=child,
            question_id=c["question"],
            target_id=target_ids[c["cell"]],
            slot=slot_of[c["cell"]],
            benchmark=c["benchmark"],
        )
        for c in chosen
    )
    events_append(
        run_id=child.pk,
        events=[
            (
                "run.created",
                {
                    "plan_sha256": child.plan_sha256,
                    "cells": len(chosen),
                    "targets": [t["slug"] for t in manifest["targets"]],
                    "recovery": {
                        "parent": parent.pk,
                        "mode": mode,
                        "recovery_plan_sha256": plan_sha256,
                    },
                },
            )
        ],
    )
    return child


# --- lineage (R15.4) -----------------------------------------------------------------------------


def _run_line(run: Run, spend: dict[str, Any], progress: dict[str, int]) -> dict[str, Any]:
    recovery = run.manifest.get("recovery") if isinstance(run.manifest, dict) else None
    return {
        "id": run.pk,
        "name": run.name,
        "status": run.status,
        "mode": recovery["mode"] if recovery else None,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "progress": progress,
        "known_cost_usd": spend["known_spend_usd"],
        "cost_complete": spend["spend_complete"],
    }


def _progress_of(run_ids: list[int]) -> dict[int, dict[str, int]]:
    rows = (
        Cell.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(
            denominator=Count("id"),
            completed=Count("id", filter=Q(status="completed")),
            failed=Count("id", filter=Q(status__in=["failed", "sent_unknown"])),
            pending=Count("id", filter=Q(status__in=["pending", "running"])),
        )
    )
    empty = {"denominator": 0, "completed": 0, "failed": 0, "pending": 0}
    out = {r: dict(empty) for r in run_ids}
    for row in rows:
        out[row.pop("run_id")] = row
    return out


def run_lineage(*, run: Run, children_after: int = 0, limit: int = 25) -> dict[str, Any]:
    """Where a run came from and what was recovered from it, each with its own progress and
    known cost (R15.4): a child's denominator is its selection only, and the original's known
    cost is never merged with its children's. Reads only."""
    limit = max(1, min(limit, MAX_RECOVERY_PAGE))
    children = list(
        Run.objects.filter(parent=run, pk__gt=children_after).order_by("pk")[: limit + 1]
    )
    more = len(children) > limit
    children = children[:limit]
    parent = run.parent
    ids = [run.pk, *[c.pk for c in children], *([parent.pk] if parent else [])]
    spend = run_known_spend(run_ids=ids)
    progress = _progress_of(ids)
    request = RecoveryRequest.objects.filter(child=run).first()
    return {
        "run": {
            **_run_line(run, spend[run.pk], progress[run.pk]),
            # A recovered run is never complete through its children (R15.4).
            "benchmark_complete": run.status == "completed" and run.parent_id is None,
        },
        "original_known_cost_usd": spend[run.pk]["known_spend_usd"],
        "original_cost_complete": spend[run.pk]["spend_complete"],
        "parent": _run_line(parent, spend[parent.pk], progress[parent.pk]) if parent else None,
        "recovered_from": None
        if request is None
        else {
            "parent": request.parent_id,
            "mode": request.mode,
            "plan_sha256": request.plan_sha256,
            "selected_cells_sha256": request.selected_cells_sha256,
            "acknowledged_new_attempt": request.acknowledged_new_attempt,
        },
        "children": [_run_line(c, spend[c.pk], progress[c.pk]) for c in children],
        "next_children_after": children[-1].pk if more and children else None,
        "model_requests": 0,
    }
