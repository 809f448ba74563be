"""Which cells of a run a recovery may run again, and why not (R15.2, R15.3): the ledger read
per cell and the exclusion rules over it, in the order they apply. Used by runs.settlement.recovery to
build the reviewed plan. Reads only."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any, NamedTuple

from django.db.models import Count, Q

from datasets.benchmarks import get_adapter
from runs.engine.finish import EPISODE_INTERRUPTED, LEGACY_SETTLED_ERROR, single_answer
from runs.models import (
    OPEN_CALL_STATUSES,
    Call,
    CallStatus,
    Cell,
    CellStatus,
    RecoveryClaim,
    Run,
    RunSummary,
)
from runs.reporting.effective import RunKnownFailure, effective_call_sums, known_failures
from runs.vocabulary.recovery_modes import RecoveryPlanMode

AMBIGUOUS_CALL_STATUSES = (*OPEN_CALL_STATUSES, CallStatus.SENT_UNKNOWN)

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
    "not_awaiting_judge": "judge only needs a judged cell (SimpleQA, HLE) that failed with its "
    "answer stored and its judge call either never sent or failed at no cost (an HTTP error "
    "before any stream byte at a judge that does not bill error responses, or no connection "
    "made); this cell is not one (no stored answer, a judge call that completed or may have "
    "been billed, or a benchmark without a judge)",
    EPISODE_INTERRUPTED: "episode interrupted: a worker stopped after every call it sent for "
    "this cell had completed and before the episode's next call (a later step, turn or the "
    "judge); that call is never sent automatically and a new attempt would send the completed "
    "ones again, so the cell is not run again (evidence kept)",
}

# The judge-only class (issue 34, `awaits_judge`): what an eligible cell of mode "judge_only"
# is — its judge call never sent, or sent and failed at no cost — and the note the other modes
# add to such a cell (their reason stays: undispatched may not send its completed subject call
# again; failed mode would buy the answer again).
JUDGE_ONLY = RecoveryPlanMode.JUDGE_ONLY
JUDGE_ONLY_TEXT = "answer stored, judge call never sent: judge only"
JUDGE_FAILED_FREE_TEXT = "answer stored, judge call failed at no cost: judge only"
JUDGE_ONLY_CLASS_TEXT = "answer stored, judge call never sent or failed at no cost: judge only"
JUDGE_ONLY_HINT = (
    " — review mode 'judge_only': one judge call over the stored answer, no subject call, its "
    "worst case quoted and confirmed up front"
)

# A whole-plan refusal, not a cell's exclusion: failed mode of a re-judge child
# (runs/settlement/recovery.py `_check_rejudge_mode`).
REJUDGE_NEW_ATTEMPT = "rejudge_new_attempt_refused"
REJUDGE_NEW_ATTEMPT_TEXT = (
    "run {run} re-judges the answers of run {parent}: each of its cells judges the answer "
    "run {parent} stored for the same attempt, so a new attempt (failed mode) would have no "
    "answer to judge and its judge call was not in the confirmed cost; only cells that never "
    "sent a call can be recovered (use 'undispatched' mode). Nothing was created or sent"
)


def _known_failures(
    failures: list[RunKnownFailure],
) -> tuple[Counter[int], dict[int, set[str]]]:
    """Per cell: its known failures whose cost stays unclear (their target bills error
    responses, or the plan does not say), and the targets whose frozen ``errors_billed =
    false`` made the others a known $0 — `runs.ledger.accounting.known_failure_unbilled`, the
    rule every surface reads through the effective costs (`effective_call_sums`), so those are
    already 0 in the sums here. The plan states that assumption wherever it shows such a zero
    (`runs.ledger.accounting.errors_not_billed_words`)."""
    unclear: Counter[int] = Counter()
    assumed: dict[int, set[str]] = {}
    for failure in failures:
        if failure.unbilled:
            assumed.setdefault(failure.cell_id, set()).add(failure.slug)
        else:
            unclear[failure.cell_id] += 1
    return unclear, assumed


def cell_rows(run: Run) -> list[dict[str, Any]]:
    """Per cell of the run, what the exclusion rules read: its status and error, how many
    calls it has and in which state, and its spend — for the cell and for its judge calls —
    by `_spend`'s one rule."""
    rows: list[dict[str, Any]] = [
        dict(row)
        for row in Cell.objects.filter(run=run)
        .order_by("pk")
        .values("pk", "question_id", "benchmark", "target__slug", "slot", "status", "error")
        .annotate(
            n_calls=Count("calls"),
            ambiguous_calls=Count("calls", filter=Q(calls__status__in=AMBIGUOUS_CALL_STATUSES)),
            completed_calls=Count("calls", filter=Q(calls__status=CallStatus.COMPLETED)),
            subject_completed=Count(
                "calls",
                filter=Q(calls__status=CallStatus.COMPLETED, calls__role=Call.Role.SUBJECT),
            ),
            # The first subject call completed with a whole answer (not cut off by "length").
            subject_answered=Count(
                "calls",
                filter=Q(
                    calls__status=CallStatus.COMPLETED,
                    calls__role=Call.Role.SUBJECT,
                    calls__sequence=0,
                )
                & ~Q(calls__finish_reason="length"),
            ),
            judge_calls=Count("calls", filter=Q(calls__role=Call.Role.JUDGE)),
            judge_failed=Count(
                "calls", filter=Q(calls__role=Call.Role.JUDGE, calls__status=CallStatus.FAILED)
            ),
        )
    ]
    failures = known_failures(run_ids=[run.pk])  # read once: the sums and the words
    sums: dict[tuple[int, str], dict[str, Any]] = {
        (r["cell_id"], r["role"]): r
        for r in effective_call_sums(run_ids=[run.pk], group_by="cell_role", failures=failures)
    }
    roles_of: dict[int, list[str]] = {}
    for cell_id, role in sums:
        roles_of.setdefault(cell_id, []).append(role)
    claimed = dict(
        RecoveryClaim.objects.filter(cell__run=run).values_list("cell_id", "request__child_id")
    )
    billed_failures, assumed = _known_failures(failures)

    def spend(cell_id: int, roles: list[str]) -> tuple[int, Decimal]:
        return _spend([sums[(cell_id, r)] for r in roles])

    for row in rows:
        row["cost_unknown"], row["known_cost"] = spend(row["pk"], roles_of.get(row["pk"], []))
        row["judge_cost_unknown"], row["judge_known_cost"] = spend(
            row["pk"], [r for r in roles_of.get(row["pk"], []) if r == Call.Role.JUDGE]
        )
        row["billed_failures"] = billed_failures[row["pk"]]
        row["errors_not_billed"] = assumed.get(row["pk"], set())
        row["claimed_by"] = claimed.get(row["pk"], 0) or None
        row["claimed"] = row["pk"] in claimed
    return rows


def _spend(sums: list[dict[str, Any]]) -> tuple[int, Decimal]:
    """The one rule of what a cell's calls (of some roles) are known to have cost: (how many
    of them have a cost that stays unknown, the sum of the known costs). From the ledger's
    effective accounting (`effective_call_sums`), where a call that never connected is a known
    0 (`runs.ledger.accounting.NOT_SENT_USAGE`) and so is an HTTP error answered before any
    stream byte by a target whose frozen ``errors_billed`` is false
    (`runs.ledger.accounting.known_failure_unbilled`); every other unknown (a stream cut
    mid-way, a timeout after sending, an error at a target that bills errors) stays unknown.
    (0, 0) is "known to have cost nothing": what failed mode shows as the previous attempt's
    $0 and what lets a failed judge call leave its cell judge-only (`awaits_judge`)."""
    unknown = sum(s["cost_unknown"] for s in sums)
    known = sum((s["cost"] for s in sums if s["cost"] is not None), Decimal(0))
    return unknown, known


def exclusion(row: dict[str, Any], mode: str) -> str | None:
    """The first reason a cell may not be recovered in `mode`, or None when it is eligible.
    The order matters: a claim or a finished answer outranks everything; an ambiguous
    dispatch outranks the mode's own rules because it must never be re-sent in any mode."""
    if row["claimed"]:
        return "already_claimed_by_another_recovery"
    if row["status"] == CellStatus.COMPLETED:
        return "completed_evidence_preserved"
    if row["ambiguous_calls"] or row["status"] in (CellStatus.SENT_UNKNOWN, CellStatus.RUNNING):
        return "ambiguous_dispatch_requires_reconciliation"
    stored = _stored_answer(row)
    if mode == JUDGE_ONLY:
        # Only the class; every other cell keeps the reason its own mode would give it.
        return None if awaits_judge(row) else stored or "not_awaiting_judge"
    if stored:
        return stored
    if mode == RecoveryPlanMode.UNDISPATCHED:
        return "already_dispatched_requires_new_attempt" if row["n_calls"] else None
    if not row["n_calls"]:
        return "never_dispatched_use_undispatched_mode"
    if row["cost_unknown"]:
        if row["cost_unknown"] == row["billed_failures"]:
            return "error_responses_billed"
        return "ambiguous_saved_result_requires_reconciliation"
    if row["status"] != CellStatus.FAILED:
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


def awaits_judge(row: dict[str, Any]) -> bool:
    """A judged cell (adapter kind "judge") settled `failed` with its answer stored — one
    completed, untruncated first subject call and no other subject call — whose judge call
    was never sent, or was sent and failed at no cost (issue 34, extended):

    - never sent: the recovery pass settled it as an interrupted episode (or by the rule
      before it), its one call the subject's;
    - failed at no cost: every judge call it has failed, and by `_spend`'s rule they are known
      to have cost nothing (an HTTP error before any stream byte at a judge that does not bill
      errors, or no connection made). A judge call that may have been billed — unknown cost,
      a stream cut mid-way, a timeout after sending — or that completed keeps the cell out:
      judging again would be a second paid judge call of one attempt.

    A cell whose judge call is open or `sent_unknown`, or a cell already claimed or completed,
    is not one (`exclusion` checks those first; neither shape matches them here)."""
    if not (
        row["status"] == CellStatus.FAILED
        and row["subject_answered"] == 1
        and get_adapter(row["benchmark"]).kind == "judge"
    ):
        return False
    if not row["judge_calls"]:
        error = row["error"] or ""
        interrupted = error.startswith(f"{EPISODE_INTERRUPTED}:") or error == LEGACY_SETTLED_ERROR
        return interrupted and row["n_calls"] == 1
    return judge_failed_at_no_cost(row) and row["n_calls"] == 1 + row["judge_calls"]


def judge_failed_at_no_cost(row: dict[str, Any]) -> bool:
    """Every judge call of the cell failed, known to have cost nothing (`_spend`)."""
    return (
        row["judge_calls"] > 0
        and row["judge_failed"] == row["judge_calls"]
        and row["judge_cost_unknown"] == 0
        and row["judge_known_cost"] == 0
    )


def judge_only_why(row: dict[str, Any]) -> str:
    """Why a cell of the judge-only class is in it, in words."""
    return JUDGE_FAILED_FREE_TEXT if row["judge_calls"] else JUDGE_ONLY_TEXT


def judge_only_hint(row: dict[str, Any]) -> str:
    """The note the other modes add to a cell of the judge-only class."""
    return judge_only_why(row) + JUDGE_ONLY_HINT


class RecoveryOffer(NamedTuple):
    """What a terminal run's page offers: `cells` some recovery mode might take; when 0,
    `reason` says why there is nothing to review."""

    cells: int
    reason: str | None


def recovery_offer(run: Run) -> RecoveryOffer:
    """Whether a terminal run's page offers "Review recovery plan" (fourth outside probe,
    item 2). From counts only — the run's summary row and its claims, never the plan (seconds
    at 100,000 cells): a completed cell, one whose outcome is unknown and one already claimed
    are excluded in every mode (`exclusion`), so when they are all the cells there is nothing
    to review. A cell left over may still be excluded by the plan (a cost that is unclear);
    the review says why."""
    summary = RunSummary.objects.filter(run_id=run.pk).first() or RunSummary()  # no cells
    total = summary.total
    closed = {
        "completed": summary.completed,
        "are claimed by a recovery run": RecoveryClaim.objects.filter(cell__run=run).count(),
        "have an unknown outcome": summary.sent_unknown + summary.running,
    }
    left = total - sum(closed.values())
    if left > 0:
        return RecoveryOffer(left, None)
    shown = [what for what, n in closed.items() if n]
    if not total:
        return RecoveryOffer(0, "Nothing to recover: the run has no cells.")
    if shown == ["completed"]:
        return RecoveryOffer(0, f"Nothing to recover: all {total} cells completed.")
    if shown == ["are claimed by a recovery run"]:
        return RecoveryOffer(
            0, f"Nothing to recover: every cell is claimed by a recovery run ({total})."
        )
    parts = [f"{closed[what]} {what}" for what in shown]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    return RecoveryOffer(0, f"Nothing to recover: of {total} cells, {listed}.")
