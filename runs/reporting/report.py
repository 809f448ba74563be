"""The run report (R1, R3, R4.2): what is known, from SQL aggregates over the whole ledger.

Never from a loaded page of details (R13.2). Unknown is None: a token bucket or a cost is
given only when every planned cell contributes a known value; the partial sum is labelled.

The report is typed (`runs.reporting.report_types.Report`: Decimal money, exact fractions, None for
unknown); the `*_compute` functions give it, and `run_report`, `run_reports` and
`run_report_settled` give its JSON (`report_doc`), the form the API, the CLI and the stored
row hold (issue 24 point 3).
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Q

from datasets.benchmarks import ADAPTERS
from datasets.provenance import UNKNOWN
from runs.ledger.accounting import NO_CALL_SENT_NOTE
from runs.ledger.selectors import manifest_head, run_settled_fingerprint, runs_data_provenance
from runs.models import Call, CallStatus, Cell, CellStatus, Run, RunReport, RunStatus, Target
from runs.reporting.effective import (
    NO_CALL_SPEND,
    NO_CALL_SUMS,
    RunKnownFailure,
    cost_note_counts,
    effective_call_sums,
    effective_run_spend,
    known_failures,
    latest_corrections,
)
from runs.reporting.official_report import official_sections
from runs.reporting.report_spend import (
    run_spend,
    target_spend,
    usage_caution,
    usage_unknown_reason,
)
from runs.reporting.report_types import (
    COUNT_FIELDS,
    NOT_RUN_SUBSET_LABEL,
    SUBSET_LABEL,
    TIMING_FIELDS,
    BenchmarkRow,
    Correction,
    Counts,
    OfficialSection,
    Report,
    RunHead,
    Score,
    TargetReport,
    report_doc,
)
from srbench.canonical import sha256_hex
from srbench.stats import accuracy, weighted_quality, wilson_interval

# Part of a stored report's fingerprint: bump it whenever what a report computes changes, so a
# report stored by the previous code is never served (v7: "weighted subset average", a re-judge
# child's own subject spend; v8: a gateway's re-sent calls leave a total incomplete, a gateway's
# estimate counted and said per target, a caution where an unchecked gateway answered; v9: a
# target's empty answers counted and said; v10: calls of unknown cost for a reason not named
# before, subject, judge or simulator, counted and said in the usage reason; the cache-neutral
# reason names a stream without usage; v11: an HTTP error before any stream byte at a target
# whose frozen errors_billed is false costs a known $0, said in the usage reason, and a target
# no call was sent to has a known $0, as has a run that sent none).
REPORT_CACHE_VERSION = "v11"
# pg_advisory_xact_lock(class, run id): one computation of a settled run's stored report at a
# time (`run_report_settled_compute`).
REPORT_LOCK_CLASS = 38001
CELL_STATES = ("pending", "running", "completed", "failed", "cancelled", "sent_unknown")


def _cell_counts(run_ids: list[int]) -> dict[tuple[int, int, str], dict[str, int]]:
    rows = (
        Cell.objects.filter(run_id__in=run_ids)
        .values("run_id", "target_id", "benchmark")
        .annotate(
            planned=Count("id"),
            correct=Count("id", filter=Q(correct=True)),
            scored=Count("id", filter=Q(scored=True)),
            **{s: Count("id", filter=Q(status=s)) for s in CELL_STATES},
        )
    )
    return {(r.pop("run_id"), r.pop("target_id"), r.pop("benchmark")): r for r in rows}


def question_interval(questions: int, score_sum: Fraction) -> tuple[float, float] | None:
    """The report's 95% interval of a benchmark row: Wilson on the mean question score with
    n = questions (the question is the unit). The final report and the live section's partial
    rows (`runs.interfaces.views`) both call this, so a live interval is the final one of its cells."""
    return wilson_interval(score_sum, questions) if questions else None


def completed_question_scores(run_id: int) -> dict[tuple[int, str], tuple[int, Fraction]]:
    """Per (target, benchmark) of a run: `_question_scores` over its completed cells only —
    the questions with a completed attempt and the exact sum of their scores, each question
    scoring the mean over its completed attempts. What the final report would give for the
    cells completed so far (the live section's partial rows with several attempts)."""
    got = _question_scores([run_id], completed_only=True)
    return {(t, b): v for (_, t, b), v in got.items()}


def _question_scores(
    run_ids: list[int], *, completed_only: bool = False
) -> dict[tuple[int, int, str], tuple[int, Fraction]]:
    """Per (run, target, benchmark): how many questions, and the exact sum of their scores.

    The question is the statistical unit (DESIGN §6, docs/statistics.md): a question's score is
    the mean over its planned attempt cells, a cell that is not correct (wrong, failed, still
    pending, cancelled, outcome unknown) counting 0 as it does in the accuracy. The inner query
    counts each question's cells and correct cells; the outer one groups questions by their
    number of cells k, so Σ_q correct_q / k_q = Σ_k (Σ correct) / k is summed exactly with
    Fractions from a handful of rows (one per k, normally just k = slots), never one per
    question.
    """
    cell_t = Cell._meta.db_table
    marks = ", ".join(["%s"] * len(run_ids))
    sql = f"""
        SELECT run_id, target_id, benchmark, k, COUNT(*), SUM(c)
        FROM (
            SELECT run_id, target_id, benchmark, question_id,
                COUNT(*) AS k, COUNT(*) FILTER (WHERE correct) AS c
            FROM {cell_t}
            WHERE run_id IN ({marks}){" AND status = 'completed'" if completed_only else ""}
            GROUP BY run_id, target_id, benchmark, question_id
        ) AS per_question
        GROUP BY run_id, target_id, benchmark, k
    """
    out: dict[tuple[int, int, str], tuple[int, Fraction]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, run_ids)
        for run_id, target_id, benchmark, k, questions, correct in cursor.fetchall():
            n, total = out.get((run_id, target_id, benchmark), (0, Fraction(0)))
            # SUM of a bigint is a numeric (a Decimal here): back to an exact integer.
            score = Fraction(int(correct), int(k))
            out[(run_id, target_id, benchmark)] = (n + int(questions), total + score)
    return out


def _cells_without_subject_call(run_ids: list[int]) -> dict[tuple[int, int], int]:
    # An anti-join in its own query: as a filtered count beside _cell_counts PostgreSQL
    # probes the calls once per cell (measured 5x slower at 100,000 cells).
    rows = (
        Cell.objects.filter(run_id__in=run_ids)
        .exclude(calls__role="subject")
        .values("run_id", "target_id")
        .annotate(n=Count("id"))
    )
    return {(r["run_id"], r["target_id"]): r["n"] for r in rows}


def _empty_answers(run_ids: list[int]) -> dict[tuple[int, int], int]:
    """Per (run, target of the cell): subject calls of completed cells that completed with an
    empty answer — no content but white space, no reasoning (shown or counted), no tool call,
    not cut by the token limit."""
    rows = (
        Call.objects.filter(cell__run_id__in=run_ids, role="subject", status=CallStatus.COMPLETED)
        # Graded as given: a failed cell is not graded.
        .filter(cell__status=CellStatus.COMPLETED)
        .filter(content__regex=r"^\s*$", reasoning="")
        .filter(Q(tool_calls__isnull=True) | Q(tool_calls=[]))
        # A cut answer is a cut answer (graded as truncated), and hidden reasoning is not
        # nothing: neither is an empty answer.
        .exclude(finish_reason="length")
        .exclude(reasoning_tokens__gt=0)
        .values("cell__run_id", "cell__target_id")
        .annotate(n=Count("id"))
    )
    return {(r["cell__run_id"], r["cell__target_id"]): r["n"] for r in rows}


def empty_answers_note(empty: int | None) -> str | None:
    """What a count of empty answers may mean (said once per target), or None for none.
    Seen on a real stack: LiteLLM before llama.cpp's server turns the server's refusal of a
    prompt past its context window (a 200 with an empty event stream) into a finished empty
    answer, finish_reason "stop", no usage (tests/real/test_llama_long_prompts.py). Counted per
    call: an agent's cell makes several, and a turn that says nothing is one."""
    if not empty:
        return None
    one = empty == 1
    return (
        f"{empty} completed subject call{'' if one else 's'} came back empty (no content, no "
        f"reasoning, no tool call) and {'was' if one else 'were'} graded as given; a gateway "
        "answers so when the server behind it refused the request after its headers (LiteLLM "
        "before llama.cpp: a prompt past the server's context window) — the server's log tells "
        "which"
    )


def _call_sums(
    run_ids: list[int], failures: list[RunKnownFailure]
) -> dict[tuple[int, int, str], dict[str, Any]]:
    """Per (run, target of the cell, role): sums of buckets and costs, and how many are unknown.

    Effective usage (R2.2): the latest usage correction overrides a call where it has an entry.
    """
    sums: dict[tuple[int, int, str], dict[str, Any]] = {}
    rows = effective_call_sums(run_ids=run_ids, group_by="target_role", failures=failures)
    for r in rows:
        sums[(r.pop("run_id"), r.pop("target_id"), r.pop("role"))] = r
    return sums


# Timings are shown to the microsecond. A clock difference times 1000 (553.2292899999902 ms),
# an interpolated percentile or a float sum carries binary noise below that, which is not
# part of the measurement and reads as a float artefact (issue 18).
TIMING_DECIMALS = {"ms": 3, "seconds": 6}


def timing_shown(value: float | None, unit: str = "ms") -> float | None:
    return None if value is None else round(float(value), TIMING_DECIMALS[unit])


def call_timings(run_ids: list[int]) -> dict[tuple[int, int], dict[str, float | None]]:
    """Per (run, target): TTFT p50 and latency p50/p95 of the completed subject calls, and the
    request seconds of every timed call. Percentiles interpolate linearly between order
    statistics (PostgreSQL's percentile_cont), computed in SQL (no 100,000-row transfer); None
    when nothing is timed."""
    call_t, cell_t = Call._meta.db_table, Cell._meta.db_table
    marks = ", ".join(["%s"] * len(run_ids))
    done = "c.role = 'subject' AND c.status = 'completed'"
    sql = f"""
        SELECT cell.run_id, cell.target_id,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY c.ttft_ms) FILTER (WHERE {done}),
            percentile_cont(0.5) WITHIN GROUP (ORDER BY c.duration_ms) FILTER (WHERE {done}),
            percentile_cont(0.95) WITHIN GROUP (ORDER BY c.duration_ms) FILTER (WHERE {done}),
            SUM(c.duration_ms) / 1000
        FROM {call_t} c JOIN {cell_t} cell ON cell.id = c.cell_id
        WHERE cell.run_id IN ({marks}) AND c.duration_ms IS NOT NULL
        GROUP BY cell.run_id, cell.target_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, run_ids)
        return {
            (run_id, target_id): dict(
                zip(
                    TIMING_FIELDS,
                    (
                        timing_shown(v, "seconds" if name.endswith("_seconds_sum") else "ms")
                        for name, v in zip(TIMING_FIELDS, values, strict=True)
                    ),
                    strict=True,
                )
            )
            for run_id, target_id, *values in cursor.fetchall()
        }


def mom_routing(runs: list[Run]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Selected models and decisions of the MoM targets (by their frozen snapshots)."""
    mom = {t["slug"] for r in runs for t in r.manifest["targets"] if t["kind"] == "mom"}
    if not mom:
        return {}
    rows = (
        Call.objects.filter(
            cell__run_id__in=[r.pk for r in runs], cell__target__slug__in=mom, role="subject"
        )
        .values("cell__run_id", "cell__target_id", "selected_model", "selected_decision")
        .annotate(n=Count("id"))
    )
    out: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[(r.pop("cell__run_id"), r.pop("cell__target_id"))].append(r)
    return out


def _benchmark_rows(
    manifest: dict[str, Any],
    counts: dict[str, dict[str, int]],
    question_scores: dict[str, tuple[int, Fraction]] | None,
    provenance: dict[str, str],
) -> tuple[dict[str, BenchmarkRow], dict[str, int], dict[str, Fraction]]:
    """Per benchmark: its counts, accuracy, interval and data provenance; and the target's
    totals and the accuracies known (the score's inputs)."""
    benchmarks: dict[str, BenchmarkRow] = {}
    total: dict[str, int] = defaultdict(int)
    accs: dict[str, Fraction] = {}
    for b in manifest["benchmarks"]:
        c = counts.get(
            b, {"planned": 0, "correct": 0, "scored": 0, **dict.fromkeys(CELL_STATES, 0)}
        )
        for k, v in c.items():
            total[k] += v
        planned = c["planned"]
        # Over the planned cases, a failed or missing case wrong; none while no case has an
        # outcome (unknown, not 0 with an interval).
        measured = c["completed"] + c["failed"] > 0
        acc = accuracy(c["correct"], planned) if planned and measured else None
        if acc is not None:
            accs[b] = acc
        # The interval counts questions, not cells (the question is the unit): Wilson on the
        # mean question score with n = questions. With one attempt per question it is
        # Wilson(correct, planned), as before; repeated attempts never narrow it.
        questions, score_sum = (question_scores or {}).get(b, (0, Fraction(0)))
        interval = question_interval(questions, score_sum) if planned and measured else None
        benchmarks[b] = BenchmarkRow(
            planned=planned,
            questions=questions,
            completed=c["completed"],
            correct=c["correct"],
            scored=c["scored"],
            failed=c["failed"],
            pending=c["pending"] + c["running"],
            sent_unknown=c["sent_unknown"],
            cancelled=c["cancelled"],
            accuracy=acc,
            wilson_95=interval,
            complete=planned > 0 and c["completed"] == planned,
            provenance=provenance.get(b, UNKNOWN),
        )
    return benchmarks, total, accs


def _target_score(
    run: Run, benchmarks: dict[str, BenchmarkRow], accs: dict[str, Fraction]
) -> Score:
    """The sr-bench score when the run is complete over all nine benchmarks (and not a
    re-run), else a labelled weighted subset average, else none (a benchmark not measured)."""
    manifest = run.manifest
    weights = {b: Fraction(v["weight"]) for b, v in manifest["benchmarks"].items()}
    run_complete = run.status == RunStatus.COMPLETED and all(
        v.complete for v in benchmarks.values()
    )
    # Questions left out as not runnable here (runs.engine.runnable_here) make any score a subset.
    nine = set(manifest["benchmarks"]) == set(ADAPTERS) and not manifest.get("not_run")
    if not accs or any(r.planned and r.accuracy is None for r in benchmarks.values()):
        return Score("none")
    quality = weighted_quality(accs, weights)
    if run_complete and nine and run.parent_id is None:
        return Score("sr-bench", quality)
    label = NOT_RUN_SUBSET_LABEL if manifest.get("not_run") else SUBSET_LABEL
    return Score("subset", quality, label, tuple(sorted(accs)))


def _routed_counts(routed: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """A MoM target's selected models and decisions, summed over its subject calls."""
    models: dict[str, int] = defaultdict(int)
    decisions: dict[str, int] = defaultdict(int)
    for r in routed:
        models[r["selected_model"] or "unknown"] += r["n"]
        decisions[r["selected_decision"] or "unknown"] += r["n"]
    return {"selected_models": dict(models), "selected_decisions": dict(decisions)}


@dataclass(frozen=True)
class ReportBatch:
    """What one set of queries read for several runs, keyed by run (and target)."""

    counts: dict[tuple[int, int, str], dict[str, int]]
    scores: dict[tuple[int, int, str], tuple[int, Fraction]]
    sums: dict[tuple[int, int, str], dict[str, Any]]
    missing: dict[tuple[int, int], int]
    timings: dict[tuple[int, int], dict[str, Any]]
    routing: dict[tuple[int, int], list[dict[str, Any]]]
    target_ids: dict[tuple[int, str], int]
    corrections: dict[int, Any]
    spend: dict[int, dict[str, Any]]
    official: dict[tuple[int, str], OfficialSection]
    # Per run, per benchmark: where its questions came from (`datasets.provenance`); None
    # (a batch built elsewhere) reads each run's on its own.
    provenance: dict[int, dict[str, str]] | None = None
    # Per (run, target, role): calls whose cost notes say their stream carried no usage
    # object, that its usage is a gateway's estimate, that a gateway re-sent them
    # (`runs.reporting.effective.cost_note_counts`).
    notes: dict[tuple[int, int, str], dict[str, int]] | None = None
    # Per (run, target): completed subject answers that are empty (`_empty_answers`).
    empty: dict[tuple[int, int], int] | None = None
    # Per (run, target of the cell, role): the known failures counted as $0 by their targets'
    # frozen terms, and those targets (`unbilled_failures`), said in the usage reason.
    unbilled: dict[tuple[int, int, str], tuple[int, frozenset[str]]] | None = None

    @classmethod
    def read(cls, runs: list[Run]) -> ReportBatch:
        run_ids = [r.pk for r in runs]
        counts = _cell_counts(run_ids)
        slugs = dict(
            Target.objects.filter(pk__in={t for _, t, _ in counts}).values_list("pk", "slug")
        )
        target_ids = {(run_id, slugs[tid]): tid for run_id, tid, _ in counts}
        failures = known_failures(run_ids=run_ids)  # read once: the sums, the spend, the words
        return cls(
            counts=counts,
            scores=_question_scores(run_ids),
            sums=_call_sums(run_ids, failures),
            missing=_cells_without_subject_call(run_ids),
            timings=call_timings(run_ids),
            routing=mom_routing(runs),
            target_ids=target_ids,
            corrections=latest_corrections(run_ids=run_ids),
            spend=effective_run_spend(run_ids=run_ids, failures=failures),
            # The official scorers beside the sr-bench score (issue 22 point 5).
            official=official_sections(runs, target_ids),
            provenance=runs_data_provenance(runs),
            notes=cost_note_counts(run_ids=run_ids),
            empty=_empty_answers(run_ids),
            unbilled=unbilled_failures(failures),
        )


def unbilled_failures(
    failures: list[RunKnownFailure],
) -> dict[tuple[int, int, str], tuple[int, frozenset[str]]]:
    """Per (run, target of the cell, role): how many known failures count as a known $0
    (`runs.ledger.accounting.known_failure_unbilled`) and whose terms said so."""
    counts: dict[tuple[int, int, str], int] = defaultdict(int)
    slugs: dict[tuple[int, int, str], set[str]] = defaultdict(set)
    for f in failures:
        if f.unbilled:
            counts[(f.run_id, f.target_id, f.role)] += 1
            slugs[(f.run_id, f.target_id, f.role)].add(f.slug)
    return {key: (n, frozenset(slugs[key])) for key, n in counts.items()}


def _target_report(
    run: Run, snapshot: dict[str, Any], batch: ReportBatch, provenance: dict[str, str]
) -> TargetReport:
    """One target of the run, from the batch's figures of (run, target)."""
    tid = batch.target_ids.get((run.pk, snapshot["slug"]))
    mine = {b: c for (r, t, b), c in batch.counts.items() if r == run.pk and t == tid}
    question_scores = {b: v for (r, t, b), v in batch.scores.items() if r == run.pk and t == tid}
    by_role = {role: s for (r, t, role), s in batch.sums.items() if r == run.pk and t == tid}
    # A re-judge child never calls the subject (its answers are `answers_of`'s): a known $0.
    no_subject = bool(run.manifest.get("rejudge"))
    # Nothing sent costs nothing: a target no call was sent to has a known $0 (its cost over
    # the planned cells stays unknown: none of them is complete).
    no_call = not by_role and not no_subject and run.mode != Run.Mode.PREVIEW
    by_role = {"subject": NO_CALL_SUMS, **by_role} if no_subject or no_call else by_role
    unbilled = {
        role: v for (r, t, role), v in (batch.unbilled or {}).items() if r == run.pk and t == tid
    }
    timings = batch.timings.get((run.pk, tid), {})
    notes = {role: n for (r, t, role), n in (batch.notes or {}).items() if r == run.pk and t == tid}
    resent = {role: n["gateway_resent"] for role, n in notes.items()}
    # Counted when the run has ended (the live report's batch has no count: unknown, not 0).
    # A re-judge child's answers are its parent's (counted there): unknown here, not 0.
    empty = (
        None
        if batch.empty is None or no_subject
        else sum(n for (r, t), n in batch.empty.items() if r == run.pk and t == tid)
    )
    benchmarks, total, accs = _benchmark_rows(run.manifest, mine, question_scores, provenance)
    report = TargetReport(
        slug=snapshot["slug"],
        kind=snapshot["kind"],
        model=snapshot["model"],
        planned=total["planned"],
        completed=total["completed"],
        correct=total["correct"],
        scored=total["scored"],
        failed=total["failed"],
        pending=total["pending"] + total["running"],
        sent_unknown=total["sent_unknown"],
        cancelled=total["cancelled"],
        benchmarks=benchmarks,
        score=_target_score(run, benchmarks, accs),
        **target_spend(
            total, by_role, 0 if no_subject else batch.missing.get((run.pk, tid), 0), resent
        ),
        **{k: timings.get(k) for k in TIMING_FIELDS},
        official=batch.official.get((run.pk, snapshot["slug"])),
        usage_unknown_reason=NO_CALL_SENT_NOTE
        if no_call
        else usage_unknown_reason(snapshot, notes, by_role, unbilled, ended=run.is_terminal),
        usage_caution=usage_caution(snapshot, notes, by_role),
        empty_answers=empty,
        empty_answers_note=empty_answers_note(empty),
    )
    if run.mode == Run.Mode.PREVIEW:
        return _preview_only(report, run, tid)
    if snapshot["kind"] == "mom":
        return replace(report, **_routed_counts(batch.routing.get((run.pk, tid), [])))
    return report


def _preview_routing(run: Run, target_id: int | None) -> dict[str, dict[str, dict[str, int]]]:
    """Per benchmark: the selected models, decisions and selection statuses of a preview."""
    routing: dict[str, dict[str, dict[str, int]]] = {}
    rows = Cell.objects.filter(run=run, target_id=target_id, grade__isnull=False).values_list(
        "benchmark", "grade"
    )
    for benchmark, grade in rows:
        preview = (grade or {}).get("preview") or {}
        bucket = routing.setdefault(
            benchmark, {"selected_models": {}, "decisions": {}, "selection_statuses": {}}
        )
        for key, field in (
            ("selected_models", "selected_model"),
            ("decisions", "decision"),
            ("selection_statuses", "selection_status"),
        ):
            value = preview.get(field) or "unknown"
            bucket[key][value] = bucket[key].get(value, 0) + 1
    return routing


def _preview_only(report: TargetReport, run: Run, target_id: int | None) -> TargetReport:
    """A preview run answered nothing: accuracy, score, tokens and costs are absent (None,
    never 0); what it has is the routing distribution per benchmark (R12, issue 11)."""
    routing = _preview_routing(run, target_id)
    totals: dict[str, dict[str, int]] = {"selected_models": {}, "decisions": {}}
    for entry in routing.values():
        for key in totals:
            for value, n in entry[key].items():
                totals[key][value] = totals[key].get(value, 0) + n
    return replace(
        report,
        benchmarks={
            b: replace(row, accuracy=None, wilson_95=None, routing=routing.get(b), has_routing=True)
            for b, row in report.benchmarks.items()
        },
        score=Score("none", label="preview run: routing only, no answers"),
        correct=None,
        scored=None,
        tokens=dict.fromkeys(report.tokens),
        subject_cost_usd=None,
        known_cost_usd=None,
        evaluation_cost_usd=None,
        total_spend_usd=None,
        cache_neutral_cost_usd=None,
        cache_neutral_unknown_reason="preview run: nothing was answered",
        selected_models=totals["selected_models"],
        selected_decisions=totals["decisions"],
    )


def refreshed_head(run: Run) -> Run:
    """`run` with its row re-read, and a copy of it whose manifest holds only the targets and
    benchmarks a report reads: a standard run's case list is megabytes, and the manifest is
    frozen, so it need not be read again (the caller's object keeps its own manifest)."""
    run.refresh_from_db(
        fields=[f.attname for f in Run._meta.concrete_fields if f.name != "manifest"]
    )
    head = copy.copy(run)
    head.manifest = manifest_head(run)
    return head


def run_report_compute(*, run: Run) -> Report:
    """The full report of a run, typed. Reads only; no model call."""
    return run_reports_compute(runs=[refreshed_head(run)])[run.pk]


def run_report(*, run: Run) -> dict[str, Any]:
    """The full report of a run as JSON (`report_doc`): what the API and the CLI give."""
    return report_doc(run_report_compute(run=run))


def run_report_settled_compute(*, run: Run) -> Report:
    """`run_report_compute`, computed once per state of a settled run and then read from its
    stored row (`RunReport`); a run in progress is always computed afresh. Used by the Run
    detail page, the runs list's columns, the API (`runs.reporting.stored_report`) and the run finish.

    The fingerprint is read before and after computing, and the report is kept only when
    both agree, so a report computed across a change is never stored under the old name.
    A missing or stale row is computed by one caller at a time (issue 38 item 1): the others
    wait for it and read what it kept, so a run that ended without its report gets it once.
    """
    before = run_settled_fingerprint(run)
    if before is None:
        return run_report_compute(run=run)
    key = report_key(before)
    stored = stored_report_json(run_id=run.pk, key=key)
    if stored is None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [REPORT_LOCK_CLASS, run.pk])
            stored = stored_report_json(run_id=run.pk, key=key)  # kept while this one waited
            if stored is None:
                report = run_report_compute(run=run)
                if run_settled_fingerprint(run) == before:
                    run_report_store(run_id=run.pk, fingerprint=key, report=report)
                return report
    run.refresh_from_db(
        fields=[f.attname for f in Run._meta.concrete_fields if f.name != "manifest"]
    )
    return Report.from_doc(json.loads(stored))


def stored_report_json(*, run_id: int, key: str) -> str | None:
    """The report kept for the run under this key (`report_key`), as stored; None when none
    is kept or the kept one names another state of the ledger."""
    return (
        RunReport.objects.filter(run_id=run_id, fingerprint=key)
        .values_list("report_json", flat=True)
        .first()
    )


def run_report_settled(*, run: Run) -> dict[str, Any]:
    """`run_report_settled_compute` as JSON (`report_doc`)."""
    return report_doc(run_report_settled_compute(run=run))


def report_key(fingerprint: tuple[Any, ...]) -> str:
    """The name a settled report is stored under (`run_settled_fingerprint`'s tuple)."""
    return sha256_hex([REPORT_CACHE_VERSION, *[str(v) for v in fingerprint]])


def run_report_row(*, run_id: int, fingerprint: str, report: Report) -> dict[str, Any]:
    """The stored row's columns: the report's JSON and what the runs list sorts on."""
    scored = [t for t in report.targets if t.score.value is not None]
    best = max(scored, key=lambda t: (t.score.value, t.slug), default=None)
    return {
        "fingerprint": fingerprint,
        "report_json": json.dumps(report_doc(report)),
        "score": None if best is None else best.score.value,
        "score_kind": "none" if best is None else best.score.kind,
        "score_target": "" if best is None else best.slug,
        "known_spend_usd": report.spend.known_total_spend_usd,
        "spend_complete": report.spend.total_spend_usd is not None,
        "complete": report.complete,
    }


def run_report_store(*, run_id: int, fingerprint: str, report: Report) -> None:
    """Keep a settled report with the columns the runs list sorts on (upsert: last wins)."""
    RunReport.objects.update_or_create(
        run_id=run_id,
        defaults=run_report_row(run_id=run_id, fingerprint=fingerprint, report=report),
    )


def run_reports_compute(*, runs: list[Run]) -> dict[int, Report]:
    """The typed reports of several runs from one set of queries."""
    batch = ReportBatch.read(runs)
    return {run.pk: report_from_batch(run, batch) for run in runs}


def run_reports(*, runs: list[Run]) -> dict[int, dict[str, Any]]:
    """`run_reports_compute` as JSON (`report_doc`)."""
    return {pk: report_doc(r) for pk, r in run_reports_compute(runs=runs).items()}


def _run_totals(targets: list[TargetReport]) -> Counts:
    """The run's counts over its targets. A count a target leaves unknown (a preview run
    grades nothing) keeps the total unknown."""

    def total(name: str) -> Any:
        values = [getattr(t, name) for t in targets]
        return None if any(v is None for v in values) else sum(values)

    return Counts(**{k: total(k) for k in COUNT_FIELDS})


def incomplete_reasons(run: Run, totals: Counts) -> tuple[str, ...]:
    """Why the run's report is not complete (empty when it is)."""
    reasons = []
    if run.status != RunStatus.COMPLETED:
        reasons.append(f"run is {run.status}")
    if run.stop_reason:
        reasons.append(run.stop_reason)
    if totals.completed < totals.planned:
        reasons.append(
            f"{totals.planned - totals.completed} of {totals.planned} "
            "planned cells have no completed result"
        )
    return tuple(reasons)


def report_from_batch(run: Run, batch: ReportBatch) -> Report:
    # One target report per target of the run's manifest, in the manifest's order.
    known = batch.provenance if batch.provenance is not None else runs_data_provenance([run])
    provenance = known.get(run.pk, {})
    targets = [
        _target_report(run, snapshot, batch, provenance) for snapshot in run.manifest["targets"]
    ]
    totals = _run_totals(targets)
    return Report(
        run=RunHead.of_run(run),
        incomplete_reasons=incomplete_reasons(run, totals),
        not_run=tuple(run.manifest.get("not_run", [])),
        counts=totals,
        targets=tuple(targets),
        usage_correction=Correction.of(batch.corrections.get(run.pk)),
        spend=run_spend(
            targets,
            # A run that sent no call spent nothing (a preview answered nothing: no figure).
            batch.spend.get(run.pk, None if run.mode == Run.Mode.PREVIEW else NO_CALL_SPEND),
            run.is_terminal,
            sum(
                n["gateway_resent"]
                for (r, _t, _role), n in (batch.notes or {}).items()
                if r == run.pk
            ),
        ),
    )
