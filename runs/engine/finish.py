"""Ending a run: the final status follows from the ledger, never from a worker's belief."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from runs.engine import doorbell
from runs.engine.exact_text import exact_answers, exact_texts, may_differ
from runs.engine.judge_only import judge_only_answers
from runs.ledger.events import events_append
from runs.ledger.hooks import report_keep, run_end, run_end_backlog, runs_ended_newest
from runs.models import (
    OPEN_CALL_STATUSES,
    TERMINAL_RUN_STATUSES,
    Call,
    CallStatus,
    Cell,
    CellStatus,
    Run,
    RunStatus,
    RunSummary,
)

log = logging.getLogger(__name__)


def calls_settle_unheld(*, run_id: int, now: datetime) -> int:
    """Turn the run's calls still recorded as `sent`/`streaming` whose cell no live worker
    holds (not running, or its lease ran out) into `sent_unknown`, with their unfinished cells:
    no worker will ever close them, and they may have reached the model, so they are never
    sent again. Call it under the run row lock, in the transaction that ends the run (the
    database refuses a terminal run with an open call). Idempotent; returns how many it settled.
    """
    held = Q(cell__status=CellStatus.RUNNING, cell__lease_expires_at__gte=now)
    open_calls = list(
        Call.objects.filter(cell__run_id=run_id, status__in=OPEN_CALL_STATUSES)
        .exclude(held)
        .values_list("id", "cell_id")
    )
    if not open_calls:
        return 0
    Call.objects.filter(pk__in=[c for c, _ in open_calls], status__in=OPEN_CALL_STATUSES).update(
        status=CallStatus.SENT_UNKNOWN,
        stage=Call.Stage.DONE,
        error_code="unsettled_after_run_end",
        error="the run ended with this call unsettled; whether the model answered is unknown",
    )
    cells = sorted({cell for _, cell in open_calls})
    Cell.objects.filter(pk__in=cells).without_outcome().update(
        status=CellStatus.SENT_UNKNOWN, lease_expires_at=None
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
        # The run's summary row, not a count over its cells (issue 25): exact here, because
        # its triggers lock this run's row before they change it, and this transaction holds
        # that row — no other cell status of this run can commit until it ends.
        s = RunSummary.objects.get(run_id=run_id)
        return {
            "total": s.total,
            "running": s.running,
            "pending": s.pending,
            "completed": s.completed,
            "unknown": s.sent_unknown,
            "failed": s.failed,
        }

    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_RUN_STATUSES:
            return run.status
        counts = cell_counts()
        stopped = bool(run.cancel_requested_at or run.stop_reason)
        if counts["running"] or (counts["pending"] and not stopped):
            return None
        if run.status == RunStatus.QUEUED and not run.cancel_requested_at:
            return None
        now = timezone.now()
        if calls_settle_unheld(run_id=run_id, now=now):
            counts = cell_counts()
        # sent_unknown before cancelled: a run whose worker died with calls in flight is
        # interrupted even if a cancel was requested meanwhile (the recovery pass, DESIGN §4).
        if counts["unknown"]:
            status = RunStatus.INTERRUPTED
        elif run.cancel_requested_at:
            status = RunStatus.CANCELLED
        elif counts["completed"] == counts["total"]:
            status = RunStatus.COMPLETED
        else:
            status = RunStatus.FAILED
        run.status = status
        run.finished_at = now
        run.save(update_fields=["status", "finished_at", "updated_at"])
        events: list[tuple[str, dict[str, object]]] = []
        if status == RunStatus.INTERRUPTED:
            events.append(("run.interrupted", {"sent_unknown_cells": counts["unknown"]}))
        events.append(
            ("run.finished", {"status": status, **counts, "stop_reason": run.stop_reason})
        )
        events_append(run_id=run_id, events=events)
    run_report_keep(run_id=run_id)
    if status != RunStatus.COMPLETED and run.mode == Run.Mode.LIVE:
        # Cells may be left to recover: a worker keeps the plans a review will read (after
        # the commit of a transaction the caller may hold, so it reads this end).
        transaction.on_commit(lambda: doorbell.recovery_plans_dispatch(run_id=run_id))
    return status


def run_report_keep(*, run_id: int) -> None:
    """Compute and store the report of a run that just ended, once (the runs list sorts on
    it; pages and comparisons read it), then call the run-end hooks of the apps above `runs`
    (`runs.ledger.hooks`: compare stores the run's per-cell figures). Called after the transaction
    that made the run terminal. A failure is logged, never the run's: what failed is computed
    again on its next read."""
    try:
        report_keep(run_id=run_id)  # the report, through the hook the runs app registers
    except Exception:
        log.exception("storing the report of run %s failed", run_id)
    run_end(run_id=run_id)  # each hook's failure is logged there, never raised


# Runs this process tried to give their end-of-run work (`runs_report_backfill`): each once,
# so a run whose report cannot be kept (its work failed; logged) is not computed every pass.
_BACKFILL_TRIED: set[int] = set()
# ... and those it called the run-end hooks for, kept report aside (`run_end_backlog`).
_RUN_END_TRIED: set[int] = set()


def runs_report_backfill(*, limit: int = 5) -> int:
    """The end-of-run work (`run_report_keep`) of ended runs that have none kept (issue 38
    item 1): runs that ended before that work existed, or whose work failed. Called by the
    workers' recovery pass, at most `limit` runs a pass (the newest first), each once per
    process, so no reader pays for it (a comparison of such runs took 803 ms instead of 120);
    a reader that comes first does it itself, once (`runs.reporting.stored_report.run_report_served`).
    Then the run-end hooks of ended runs whose report is kept but which an app's backlog names
    (`runs.ledger.hooks.run_end_backlog`), as many again, each once per process. Returns how
    many runs it did."""
    candidates = runs_ended_newest(limit=limit, exclude=_BACKFILL_TRIED, stored_report__isnull=True)
    for run_id in candidates:
        _BACKFILL_TRIED.add(run_id)
        run_report_keep(run_id=run_id)
    # Ended runs with their report kept but not what an app's run-end hooks keep (compare's
    # packed cases and savings sums for runs that ended before those hooks existed).
    backlog = run_end_backlog(limit=limit, exclude=_BACKFILL_TRIED | _RUN_END_TRIED)
    for run_id in backlog:
        _RUN_END_TRIED.add(run_id)
        run_end(run_id=run_id)
    return len(candidates) + len(backlog)


# --- finishing a cell from the ledger (the recovery pass, R15.3) -------------------------------

# Error prefix of a cell the recovery pass could neither grade nor resume: the worker stopped
# inside a multi-call episode (or before the judge call of a judged cell) after every call it
# sent had completed. Recovery shows such a cell as excluded with this code (runs/settlement/recovery.py).
EPISODE_INTERRUPTED = "episode_interrupted"
# What the recovery pass wrote before it finished cells from the ledger (issue 20 point 1):
# cells settled that way are read as interrupted episodes or complete answers, never retried.
LEGACY_SETTLED_ERROR = "worker lost after its calls finished; evidence kept"
# Kinds whose whole episode is one subject call (a judged kind adds one judge call after it).
SINGLE_ANSWER_KINDS = ("mcq", "grid", "judge")
SINGLE_ANSWER_CODE = ("livecodebench",)


def single_answer(benchmark: str) -> bool:
    """Whether a completed subject call of this benchmark is the cell's complete answer."""
    from datasets.benchmarks import get_adapter

    return get_adapter(benchmark).kind in SINGLE_ANSWER_KINDS or benchmark in SINGLE_ANSWER_CODE


@dataclass(frozen=True)
class StoredCall:
    role: str
    sequence: int
    status: str
    content: str
    finish_reason: str
    error_code: str
    error: str
    # The call's tool calls as the driver stored them ({index, id, type, name, arguments}).
    tool_calls: list[dict[str, Any]] | None = None


def stored_calls(cell_ids: list[int]) -> dict[int, list[StoredCall]]:
    """The calls of these cells as the ledger stored them, in the order they were opened — with
    the text the model sent where the stored copy has U+FFFD in its place
    (runs/engine/exact_text.py), so a cell settled or graded again decides what it did live."""
    calls: dict[int, list[StoredCall]] = {c: [] for c in cell_ids}
    rows = list(
        Call.objects.filter(cell_id__in=cell_ids)
        .order_by("pk")
        .values_list(
            "pk",
            "cell_id",
            "role",
            "sequence",
            "status",
            "content",
            "finish_reason",
            "error_code",
            "error",
            "tool_calls",
            "target__api",
        )
    )
    exact = exact_texts({r[0]: (r[10], r[5], r[9]) for r in rows if may_differ(r[5], r[9])})
    for pk, cell_id, role, sequence, status, content, finish, code, error, tools, _ in rows:
        content, tools = exact.get(pk, (content, tools))
        calls[cell_id].append(
            StoredCall(role, sequence, status, content, finish, code, error, tools)
        )
    return calls


@dataclass(frozen=True)
class Settlement:
    """How a cell ends from what its calls stored: the fields `store.FinishCell` writes."""

    status: str
    correct: bool | None = None
    grade: dict[str, Any] | None = None
    answer: str = ""
    error: str = ""


def _interrupted(calls: list[StoredCall], what: str, answer: str = "") -> Settlement:
    return Settlement(
        "failed",
        answer=answer,
        error=(
            f"{EPISODE_INTERRUPTED}: the worker stopped after {len(calls)} completed call(s) "
            f"and before {what}; that call is never sent automatically and a new attempt would "
            "send the completed ones again, so recovery excludes this cell (evidence kept)"
        ),
    )


def _unfinished(calls: list[StoredCall]) -> Settlement | None:
    """The driver stops at the first call that did not complete and fails the cell with it."""
    subjects = [c for c in calls if c.role == "subject"]
    answer = (
        subjects[-1].content if subjects and subjects[-1].status == CallStatus.COMPLETED else ""
    )
    c = next((c for c in calls if c.status != CallStatus.COMPLETED), None)
    if c is None:
        return None
    return Settlement(
        "failed", answer=answer, error=f"{c.role} call {c.sequence + 1}: {c.error_code}: {c.error}"
    )


def cell_settlement(
    *,
    benchmark: str,
    manifest: dict[str, Any],
    payload: dict[str, Any],
    secret: dict[str, Any],
    calls: list[StoredCall],
    sandbox: bool,
    rejudge_answer: str | None = None,
) -> Settlement | None:
    """The end of a cell whose worker died after all its calls were settled (none open), from
    the ledger alone and with the engine's own rules (runs/engine/episodes.py,
    graders in runs/engine/scoring.py): never a new model call.

    - a cell of a re-judge child run (the manifest's ``rejudge`` marker, runs/settlement/rejudge.py) ends
      as the `rejudged` episode would: the parent's stored answer (``rejudge_answer``, from
      `rejudge_answers`; None: the parent holds none) with this cell's judge verdict;
    - a call that failed or was cancelled fails the cell with the driver's message;
    - one-call kinds (mcq, grid) are graded from the stored answer with the grader version the
      manifest froze; a truncated answer is wrong, as in the engine;
    - judged kinds use the stored verdict; a judge call never sent → `episode_interrupted`;
    - code (LiveCodeBench; SciCode with every step answered) runs the hidden tests: only when
      `sandbox` is True, else None (the caller grades it where the sandbox may run);
    - any other multi-call episode (SciCode short of its last step, τ³, Terminal-Bench)
      → `episode_interrupted`: its state (a conversation with tools, a sandbox session) cannot
      be rebuilt from the ledger without replaying it, and its next call was never sent
      (a regrade, which changes no cell, replays a whole Terminal-Bench episode:
      `terminal_settlement`).
    """
    from datasets.benchmarks import get_adapter
    from runs.engine import scoring

    if manifest.get("rejudge"):
        return _rejudged_settlement(benchmark, manifest, calls, rejudge_answer)
    subjects = [c for c in calls if c.role == "subject"]
    unfinished = _unfinished(calls)
    if unfinished is not None:
        return unfinished
    kind = get_adapter(benchmark).kind
    if single_answer(benchmark):
        subject = next((c for c in subjects if c.sequence == 0), None)
        if subject is None:
            return _interrupted(calls, "its subject call")
        if subject.finish_reason == "length":
            return Settlement(
                "completed",
                False,
                {"grader": "truncated", "finish_reason": "length"},
                subject.content,
            )
        if kind == "code":
            if not sandbox:
                return None
            return _code_settlement(benchmark, manifest, payload, secret, subject.content)
        if kind != "judge":
            try:
                grade = scoring.grade_direct(
                    benchmark=benchmark,
                    payload=payload,
                    secret=secret,
                    answer=subject.content,
                    grader_version=manifest["benchmarks"][benchmark].get("grader_version"),
                )
            except scoring.GradingUnavailable as exc:
                return Settlement("failed", answer=subject.content, error=str(exc))
            return Settlement("completed", grade.correct, grade.detail, subject.content)
        return _judged_settlement(calls, subject.content)
    if benchmark == "scicode":
        return _scicode_settlement(manifest, payload, secret, calls, sandbox=sandbox)
    return _interrupted(calls, f"the rest of its {benchmark} episode")


def _code_settlement(
    benchmark: str,
    manifest: dict[str, Any],
    payload: dict[str, Any],
    secret: dict[str, Any],
    answer: str,
) -> Settlement:
    """One program graded by its hidden tests in the sandbox, with the official outcome beside
    it when the plan froze official prompting (issue 37 item 3), as the `code` episode does."""
    from runs.engine import official_code, scoring

    grade = scoring.grade_code(
        benchmark=benchmark, payload=payload, secret=secret, answers=[answer]
    )
    detail = official_code.with_official(
        manifest, benchmark, answer=answer, payload=payload, secret=secret, detail=grade.detail
    )
    return Settlement("completed", grade.correct, detail, answer)


def _rejudged_settlement(
    benchmark: str, manifest: dict[str, Any], calls: list[StoredCall], answer: str | None
) -> Settlement:
    """A re-judge child's cell (issue 22 point 4) by the rules of `episodes.rejudged`: it
    never has a subject call; its answer is the parent cell's, its grade this cell's verdict."""
    from datasets.benchmarks import get_adapter

    parent = manifest["rejudge"]["parent_run"]
    if get_adapter(benchmark).kind != "judge":
        return Settlement(
            "failed", error=f"re-judge: {benchmark} answers are not judged; nothing was sent"
        )
    if answer is None:
        return Settlement(
            "failed", error=f"re-judge: run {parent} holds no completed answer for this cell"
        )
    failed = next((c for c in calls if c.status != CallStatus.COMPLETED), None)
    if failed is not None:  # the driver's words, the answer kept (`Caller.turn`)
        return Settlement(
            "failed",
            answer=answer,
            error=f"{failed.role} call {failed.sequence + 1}: {failed.error_code}: {failed.error}",
        )
    return _judged_settlement(calls, answer)


def rejudge_answers(cell_ids: list[int]) -> dict[int, str | None]:
    """For the cells of re-judge child runs among these (their manifest's ``rejudge`` marker,
    which a recovery of such a child inherits): the answer their episode judges
    (`parent_answers`). Other cells are left out. Reads only; the marker is read once per run,
    not per cell (a manifest may be large)."""
    rows = list(Cell.objects.filter(pk__in=cell_ids).values_list("pk", "run_id"))
    markers = {
        run_id: (int(parent), judge_only is True)
        for run_id, parent, judge_only in Run.objects.filter(
            pk__in={run_id for _, run_id in rows}, manifest__has_key="rejudge"
        ).values_list("pk", "manifest__rejudge__parent_run", "manifest__rejudge__judge_only")
    }
    # A judge-only child (issue 34) judges its parent's stored subject answer, not a completed
    # parent cell's final answer: one rule for its episode and for this pass.
    answers = parent_answers(
        {pk: markers[r][0] for pk, r in rows if r in markers and not markers[r][1]}
    )
    answers.update(
        judge_only_answers({pk: markers[r][0] for pk, r in rows if r in markers and markers[r][1]})
    )
    return answers


def parent_answers(parent_of_cell: dict[int, int]) -> dict[int, str | None]:
    """{cell: the final answer of its parent run's completed cell with the same question,
    target and slot (the same attempt), or None}: what a re-judge cell is judged on, for the
    live episode (`episodes.rejudged`) and the recovery pass alike, as the model sent it
    (`exact_text.exact_answers`). Two queries for any number of cells (three when an answer
    holds U+FFFD)."""
    if not parent_of_cell:
        return {}
    rows = list(
        Cell.objects.filter(pk__in=parent_of_cell).values_list(
            "pk", "question_id", "target_id", "slot"
        )
    )
    parents = list(
        Cell.objects.filter(
            run_id__in=set(parent_of_cell.values()),
            question_id__in={r[1] for r in rows},
            status=CellStatus.COMPLETED,
        ).values_list("pk", "run_id", "question_id", "target_id", "slot", "final_answer")
    )
    # The text the model sent where the stored copy has U+FFFD (runs/engine/exact_text.py).
    exact = exact_answers({p[0]: p[5] for p in parents})
    answers = {(run_id, qid, tid, slot): exact[pk] for pk, run_id, qid, tid, slot, _ in parents}
    return {pk: answers.get((parent_of_cell[pk], qid, tid, slot)) for pk, qid, tid, slot in rows}


def _judged_settlement(calls: list[StoredCall], answer: str) -> Settlement:
    """A judged cell from its stored verdict (the driver's rules)."""
    from datasets.grading import MalformedVerdict
    from runs.engine import scoring

    judge = next((c for c in calls if c.role == "judge" and c.sequence == 0), None)
    if judge is None:
        return _interrupted(calls, "its judge call", answer)
    if judge.finish_reason == "length":
        return Settlement("failed", answer=answer, error="judge reply truncated")
    try:
        grade = scoring.grade_from_verdict(judge.content)
    except MalformedVerdict as exc:
        return Settlement("failed", answer=answer, error=f"malformed judge verdict: {exc}")
    return Settlement("completed", grade.correct, grade.detail, answer)


def _scicode_settlement(
    manifest: dict[str, Any],
    payload: dict[str, Any],
    secret: dict[str, Any],
    calls: list[StoredCall],
    *,
    sandbox: bool,
) -> Settlement | None:
    """SciCode once every step has its stored reply: the hidden tests of every step run in
    the sandbox (None without it); a missing step → `episode_interrupted`. Asked in the
    official prompts, the steps the package fills were never asked (issue 37 item 3)."""
    from datasets.official_prompts import PromptingUnavailable
    from runs.engine import official_code, scoring
    from runs.engine.code_grading import scicode_step_prompts

    steps = len(scicode_step_prompts(payload))
    subjects = sorted((c for c in calls if c.role == "subject"), key=lambda c: c.sequence)
    replies: list[str | None] = [c.content for c in subjects]
    try:
        official = official_code.scicode_stored_replies(
            manifest, payload, secret, [c.content for c in subjects]
        )
    except PromptingUnavailable as exc:
        return Settlement("failed", error=f"official prompting: {exc}")
    if official is not None:
        replies, secret = official
    if len(replies) < steps:
        return _interrupted(calls, f"step {len(replies) + 1} of {steps}")
    if not sandbox:
        return None
    try:
        grade = scoring.grade_code(
            benchmark="scicode", payload=payload, secret=secret, answers=list(replies)
        )
    except scoring.GradingUnavailable as exc:
        return Settlement("failed", answer=replies[-1] or "", error=str(exc))
    answer = "\n\n".join(r or "" for r in replies)
    return Settlement("completed", grade.correct, grade.detail, answer)


def terminal_settlement(
    *,
    payload: dict[str, Any],
    secret: dict[str, Any],
    calls: list[StoredCall],
    max_steps: int,
    command_timeout_s: float,
) -> Settlement:
    """A Terminal-Bench episode graded again from the ledger (regrade, never the recovery
    pass): the commands the subject sent, in the order it sent them, re-run in a fresh
    sandboxed session of the task, then the task's own tests — `terminal` in
    runs/engine/episodes.py without the model. Command outputs are not compared with the
    originals: a command whose result depends on time or chance may end differently.

    Only a complete episode is graded: every call completed, and the last reply carried no
    tool call (or `max_steps`, the driver's step cap, was reached); else `episode_interrupted`.
    `command_timeout_s`: the driver's per-command limit. Raises what the sandbox raises
    (SandboxUnavailable, SandboxError): the caller says why it did not grade.
    """
    from runs.engine.terminal import tool_command
    from runs.engine.terminal_runner import terminal_session_open

    unfinished = _unfinished(calls)
    if unfinished is not None:
        return unfinished
    subjects = sorted((c for c in calls if c.role == "subject"), key=lambda c: c.sequence)
    if not subjects:
        return _interrupted(calls, "its first subject call")
    if subjects[-1].tool_calls and len(subjects) < max_steps:
        return _interrupted(calls, f"step {len(subjects) + 1} of its terminal-bench episode")
    session = terminal_session_open(payload, secret)
    try:
        for call in subjects:
            for tool_call in call.tool_calls or []:
                command = tool_command(tool_call.get("arguments"))
                if command is not None:  # the agent was told its arguments were malformed
                    session.run_command(command, timeout=command_timeout_s)
        reward, detail = session.verify()
    finally:
        session.close()
    grade = {"grader": "terminal-bench", "reward": reward, "steps": len(subjects)}
    return Settlement(
        "completed", reward == 1, grade | {"detail": detail, "replayed": True}, subjects[-1].content
    )
