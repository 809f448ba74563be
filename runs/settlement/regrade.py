"""`benchmark regrade RUN_ID` (R14.4, issue 22 point 4): today's graders on a run's saved answers.

Makes no model call and changes no cell: the result is a separate, versioned
:class:`runs.models.Regrade`, keyed by a sha256 over what was graded and the grader versions.

- mcq and grid answers are graded in the calling process, as the engine grades them;
- code answers (LiveCodeBench, every step of SciCode) run their hidden tests again in the
  sandbox, and a Terminal-Bench episode replays its stored commands in a fresh session of the
  task before the task's tests run (`runs.engine.finish`, the recovery pass's own rules). This
  is sandbox work, so only a worker does it (`sandbox=True`, the `run_regrade_task` Celery
  task); a cell that failed because the sandbox was missing gets its true result here;
- judged answers (SimpleQA, HLE) need a judge call each: `judge_cost_quote` states the worst
  case of re-judging them (`rejudge_cells`), and a confirmed re-judge is a child run of judge
  calls only (`runs.settlement.rejudge`), never part of this regrade;
- τ conversations are replayed from the ledger against fresh environments, the user's turns
  read from the stored simulator calls, never asked again (`runs.settlement.regrade_tau`): no model call.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from datasets.benchmarks import get_adapter
from runs.engine import tau_official
from runs.engine.finish import StoredCall, stored_calls
from runs.ledger.corrections import version_append, version_appended
from runs.models import TERMINAL_RUN_STATUSES, Call, CallStatus, Cell, CellStatus, Regrade, Run
from runs.settlement.regrade_tau import grade_tau, tau_cells
from srbench.canonical import sha256_hex
from srbench.refusals import Refusal

__all__ = [
    "REGRADABLE_KINDS",
    "SANDBOX_BENCHMARKS",
    "RegradeRefused",
    "RegradeResult",
    "judge_cost_quote",
    "regrade_checked_run",
    "regrade_doc",
    "regrade_input_sha256",
    "regrade_queued_doc",
    "rejudge_cells",
    "run_regrade",
    "sandbox_regrade_needed",
]

REGRADABLE_KINDS = ("mcq", "grid")
# Graded again by running code in the sandbox: only a worker does that, never a web request.
SANDBOX_BENCHMARKS = ("livecodebench", "scicode", "terminal-bench")
# What the driver's error says when the sandbox tools were missing (runs/engine/sandbox.py).
SANDBOX_MISSING_MARKS = ("SandboxUnavailable", "scripts/ensure_sandbox.sh")

_CELL_FIELDS = (
    "pk",
    "benchmark",
    "target__slug",
    "question_id",
    "question__payload",
    "question__secret__data",
    "final_answer",
    "correct",
    "grade",
    "status",
    "error",
)


class RegradeRefused(Refusal):
    """The run cannot be re-graded (not ended, or a preview)."""

    http_status = 409
    code = "regrade_refused"


@dataclass(frozen=True)
class RegradeResult:
    regrade: Regrade
    created: bool


@dataclass(frozen=True)
class _Case:
    """One cell to grade again, with what it was given and what its calls stored."""

    pk: int
    benchmark: str
    slug: str
    qid: int
    payload: dict[str, Any]
    secret: dict[str, Any]
    answer: str
    old_correct: bool | None
    grade: dict[str, Any] | None
    status: str
    error: str
    calls: list[StoredCall] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return isinstance(self.grade, dict) and self.grade.get("grader") == "truncated"

    def fingerprint(self) -> list[Any]:
        """What the grade depends on besides the grader: the answer, or every stored call."""
        if not self.calls:
            return [self.pk, hashlib.sha256(self.answer.encode()).hexdigest(), self.truncated]
        calls = [
            [c.role, c.sequence, c.status, c.content, c.finish_reason, c.tool_calls]
            for c in self.calls
        ]
        return [self.pk, sha256_hex(calls)]


@dataclass(frozen=True)
class _Inputs:
    run: Run
    cases: list[_Case]
    versions: dict[str, str]
    graded_with: dict[str, str | None]
    sandbox: bool

    @property
    def input_sha256(self) -> str:
        doc: dict[str, Any] = {
            "graders": self.versions,
            "answers": [c.fingerprint() for c in self.cases if not c.calls],
        }
        if self.sandbox:  # unchanged key for a regrade without the sandbox (before issue 22)
            doc["episodes"] = [c.fingerprint() for c in self.cases if c.calls]
        elif tau := [c.fingerprint() for c in self.cases if c.calls]:
            doc["tau_episodes"] = tau  # only τ episodes are replayed outside a worker
        if any(get_adapter(b).episode == "tau" for b in self.versions):
            # τ episodes are graded by the installed official evaluator too: another version of
            # it is another regrade, never the stored one replayed (issue 37 item 2).
            doc["tau_official"] = tau_official.package_version()
        return sha256_hex(doc)


def regrade_checked_run(run_id: int) -> Run:
    """The run, if it can be re-graded: a live run that has ended. Else RegradeRefused."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise RegradeRefused(f"run {run_id} does not exist")
    if run.mode != Run.Mode.LIVE:
        raise RegradeRefused(f"run {run_id} is a {run.mode} run: it has no answers to re-grade")
    if run.status not in TERMINAL_RUN_STATUSES:
        raise RegradeRefused(f"run {run_id} is {run.status}: re-grade a run once it has ended")
    return run


def _sandbox_cells(run: Run):  # type: ignore[no-untyped-def]
    """Code cells with an episode to grade: ended (completed or failed) with a subject call."""
    benchmarks = [b for b in run.manifest["benchmarks"] if b in SANDBOX_BENCHMARKS]
    answered = Call.objects.filter(cell=OuterRef("pk"), role="subject")
    return Cell.objects.with_outcome().filter(Exists(answered), run=run, benchmark__in=benchmarks)


def sandbox_regrade_needed(run: Run) -> bool:
    """Whether a regrade of this run has code to run in the sandbox (a worker's job)."""
    return _sandbox_cells(run).exists()


def _inputs(run: Run, *, sandbox: bool) -> _Inputs:
    kinds = {b: get_adapter(b).kind for b in run.manifest["benchmarks"]}
    direct = [b for b, k in kinds.items() if k in REGRADABLE_KINDS]
    in_sandbox = [b for b in kinds if b in SANDBOX_BENCHMARKS] if sandbox else []
    graded = direct + in_sandbox
    rows = list(
        Cell.objects.filter(run=run, benchmark__in=direct, status=CellStatus.COMPLETED)
        .order_by("pk")
        .values_list(*_CELL_FIELDS)
    )
    episodes: list[tuple[Any, ...]] = []
    if in_sandbox:
        episodes = list(_sandbox_cells(run).order_by("pk").values_list(*_CELL_FIELDS))
    episodes += list(tau_cells(run).order_by("pk").values_list(*_CELL_FIELDS))
    graded += [b for b in kinds if get_adapter(b).episode == "tau"]
    calls = stored_calls([r[0] for r in episodes])
    cases = [_Case(*r[:5], r[5] or {}, *r[6:]) for r in rows] + [
        _Case(*r[:5], r[5] or {}, *r[6:], calls=calls[r[0]]) for r in episodes
    ]
    return _Inputs(
        run=run,
        cases=cases,
        versions={b: get_adapter(b).grader_version for b in graded},
        # What the cells were graded with: the manifest froze it and the engine honours it.
        graded_with={b: run.manifest["benchmarks"][b].get("grader_version") for b in graded},
        sandbox=sandbox,
    )


def regrade_input_sha256(run: Run, *, sandbox: bool) -> str:
    """The idempotency key of a regrade of this run now (cheap: reads the ledger, runs nothing)."""
    return _inputs(run, sandbox=sandbox).input_sha256


def _grade(case: _Case, manifest: dict[str, Any]) -> tuple[bool | None, dict[str, Any]]:
    """(correct, detail) by today's grader; correct is None when the case cannot be graded."""
    from runs.engine import scoring
    from runs.engine.episodes import AGENT_MAX_STEPS, TERMINAL_COMMAND_S
    from runs.engine.finish import cell_settlement, terminal_settlement
    from runs.engine.sandbox import SandboxError
    from runs.engine.sandbox_command import SandboxUnavailable

    if not case.calls:
        if case.truncated:
            # A cut-off answer (finish_reason "length") is wrong whatever it says, as in the engine.
            return False, {"grader": "truncated"}
        g = scoring.grade_direct(
            benchmark=case.benchmark, payload=case.payload, secret=case.secret, answer=case.answer
        )
        return g.correct, g.detail
    if get_adapter(case.benchmark).episode == "tau":
        return grade_tau(
            benchmark=case.benchmark,
            payload=case.payload,
            secret=case.secret,
            calls=case.calls,
            manifest=manifest,
        )
    try:
        if case.benchmark == "terminal-bench":
            s = terminal_settlement(
                payload=case.payload,
                secret=case.secret,
                calls=case.calls,
                max_steps=AGENT_MAX_STEPS,
                command_timeout_s=TERMINAL_COMMAND_S,
            )
        else:
            s = cell_settlement(
                benchmark=case.benchmark,
                manifest=manifest,
                payload=case.payload,
                secret=case.secret,
                calls=case.calls,
                sandbox=True,
            )
    except (SandboxUnavailable, SandboxError, scoring.GradingUnavailable) as exc:
        return None, {"not_graded": f"{type(exc).__name__}: {exc}"}
    if s is None or s.status != CallStatus.COMPLETED:
        return None, {"not_graded": s.error if s is not None else "no settlement"}
    return s.correct, s.grade or {}


def _row(case: _Case, new: bool | None, detail: dict[str, Any]) -> dict[str, Any]:
    row = {
        "cell": case.pk,
        "question": case.qid,
        "target": case.slug,
        "benchmark": case.benchmark,
        "old_correct": case.old_correct,
        "new_correct": new,
        "changed": new is not None and case.old_correct != new,
        "detail": detail,
    }
    if case.status != CellStatus.COMPLETED:
        row["old_status"] = case.status
        row["old_error"] = case.error[:500]
        row["sandbox_was_missing"] = any(m in case.error for m in SANDBOX_MISSING_MARKS)
    return row


def _skipped_reason(sandbox: bool) -> str:
    if sandbox:
        return (
            "re-graded: completed mcq and grid cells, and code cells (LiveCodeBench, SciCode, "
            "Terminal-Bench) whose episode the ledger holds whole; judged kinds need a judge "
            "call (see the judge cost quote), failed non-code cells have no answer; τ episodes "
            "are replayed from the ledger with no model call"
        )
    return (
        "only completed mcq and grid cells are re-graded here; code cells are re-graded by a "
        "worker in the sandbox, judged kinds need a judge call, failed cells have no answer; τ "
        "episodes are replayed from the ledger with no model call"
    )


def run_regrade(*, run_id: int, sandbox: bool = False) -> RegradeResult:
    """Re-grade a terminal live run's saved answers with today's graders; `sandbox=True` (a
    worker only) adds the code kinds. No model call, no cell changed. Idempotent: the same
    answers under the same graders return the same regrade (``created=False``) without grading
    again; a new grader version or new answers append a new version."""
    run = regrade_checked_run(run_id)
    inputs = _inputs(run, sandbox=sandbox)
    existing = Regrade.objects.filter(run=run, input_sha256=inputs.input_sha256).first()
    if existing is not None:
        return RegradeResult(existing, created=False)
    results = [_row(c, *_grade(c, run.manifest)) for c in inputs.cases]
    totals: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for r in results:
        if r["new_correct"] is None:
            continue
        t = totals[r["target"]].setdefault(
            r["benchmark"], {"regraded": 0, "old_correct": 0, "new_correct": 0}
        )
        t["regraded"] += 1
        t["old_correct"] += int(bool(r["old_correct"]))
        t["new_correct"] += int(r["new_correct"])
    regraded = sum(t["regraded"] for by in totals.values() for t in by.values())
    body = {
        "skipped_reason": _skipped_reason(sandbox),
        "sandbox": sandbox,
        "graded_with": inputs.graded_with,
        "by_target": totals,
        "cells": results,
    }
    return _store(inputs, body, regraded=regraded)


def _store(inputs: _Inputs, body: dict[str, Any], *, regraded: int) -> RegradeResult:
    run = inputs.run
    with transaction.atomic(durable=True):
        regrade, created = version_append(
            Regrade,
            run_id=run.pk,
            key={"input_sha256": inputs.input_sha256},
            fields={
                "grader_versions": inputs.versions,
                "regraded_count": regraded,
                "changed_count": sum(1 for r in body["cells"] if r["changed"]),
                "skipped_count": Cell.objects.filter(run=run).count() - regraded,
                "results": body,
            },
        )
        if created:
            version_appended(run_id=run.pk)  # the report names this regrade, in this commit
    return RegradeResult(regrade, created=created)


def rejudge_cells(run: Run) -> QuerySet[Cell]:
    """The cells a re-judge sends to the judge again, in id order: the completed cells of the
    judged benchmarks (adapter kind "judge"). A cut-off answer (finish_reason "length") is left
    out: it is wrong without a judge, as in the engine, and it was never judged."""
    judged = [b for b in run.manifest["benchmarks"] if get_adapter(b).kind == "judge"]
    return (
        Cell.objects.filter(run=run, benchmark__in=judged, status=CellStatus.COMPLETED)
        .exclude(grade__grader="truncated")
        .order_by("pk")
    )


def judge_cost_quote(run: Run) -> dict[str, Any]:
    """The worst case of re-judging the run's `rejudge_cells`: one judge call each,
    bounded by the accounting's worst-case rule (`runs.ledger.accounting.worst_case_call_cost`) at
    the judge the manifest froze. ``worst_case_usd`` is None when a judge price is missing."""
    from runs.engine.scoring import judge_request_messages
    from runs.ledger.accounting import sent_max_tokens, worst_case_call_cost
    from srbench.money import money_text

    manifest = run.manifest
    rows = rejudge_cells(run).values_list(
        "benchmark", "question__payload", "question__secret__data", "final_answer"
    )
    total: Decimal | None = Decimal(0)
    cells = 0
    for benchmark, payload, secret, answer in rows.iterator(chunk_size=1000):
        cells += 1
        judge = manifest["judges"].get(benchmark)
        cost = None
        if judge is not None:
            cost = worst_case_call_cost(
                manifest["prices"].get(judge["slug"], {}),
                kind=judge["kind"],
                model=judge["model"],
                messages=judge_request_messages(
                    payload=payload, secret=secret or {}, answer=answer
                ),
                max_tokens=sent_max_tokens(judge["fixed_params"], manifest["limits"]),
                max_inference_calls=judge.get("max_inference_calls"),
            )
        total = None if cost is None or total is None else total + cost
    return {
        "judged_cells": cells,
        "judge_calls": cells,
        "worst_case_usd": money_text(total),
    }


def regrade_doc(regrade: Regrade, *, created: bool, quote: dict[str, Any]) -> dict[str, Any]:
    """A regrade as the API and the CLI show it."""
    return {
        "run": regrade.run_id,
        "version": regrade.version,
        "created": created,
        "input_sha256": regrade.input_sha256,
        "grader_versions": regrade.grader_versions,
        "regraded": regrade.regraded_count,
        "changed": regrade.changed_count,
        "skipped": regrade.skipped_count,
        "by_target": regrade.results["by_target"],
        "judge_cost_quote": quote,
        "model_requests": 0,
    }


def regrade_queued_doc(run: Run, task: str, state: str, sha: str | None) -> dict[str, Any]:
    """A regrade a worker is doing: where to follow it."""
    return {
        "run": run.pk,
        "status": state,
        "task": task,
        "input_sha256": sha,
        "follow": f"/api/v1/runs/{run.pk}/regrade/?{urlencode({'task': task})}",
        "model_requests": 0,
    }
