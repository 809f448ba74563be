"""The Results of a run still running, from the trigger-kept sums (issue 25, R1, R10.2, R13.2).

The full report (`runs.reporting.report.run_report_compute`) aggregates every cell and call of the run:
715 ms at 100,000 calls, on every view of a running run's Results tab. What that tab shows of
a running run is sums, and those are kept exact by migration 0011's triggers
(`runs.models.live`): this module builds the same typed `Report` from those rows — counts,
tokens, costs, spend and waste, Σ request durations — reading a few rows per target at any
run size. Unknown stays unknown: a sum over no known value is None, and a total is given only
when every call's value is known, exactly as the full report decides it (the same
`runs.reporting.report` functions make the decisions; only the inputs are read differently).

Not sums, and so not kept by triggers: the TTFT and latency percentiles and a MoM target's
routing counts come from a snapshot (`LiveSnapshot`) recomputed at most every
`SNAPSHOT_SECONDS` and shown with its time; the question-level Wilson intervals, the score and
the official scorers are given only when the run has ended (the Results tab does not show
them for a running run). A running run's figures are never final: the report says the run is
running in its incomplete reasons, and the ended run's stored report (`RunReport`) stays the
source of truth.

Used only for a run that is running, not a preview, with no usage correction (corrections
and regrades apply to ended runs only: `runs.reporting.reconcile`, `runs.settlement.regrade`); every other run
takes `run_report_settled_compute`, unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from runs.models import (
    LiveCallSums,
    LiveCellSums,
    LiveSnapshot,
    Run,
    RunStatus,
    Target,
    UsageCorrection,
)
from runs.models.live import CELL_SUM_FIELDS
from runs.reporting.effective import NOTE_COUNTS, RunKnownFailure, known_failures
from runs.reporting.report import (
    CELL_STATES,
    ReportBatch,
    call_timings,
    completed_question_scores,
    mom_routing,
    question_interval,
    refreshed_head,
    report_from_batch,
    run_report_settled_compute,
    timing_shown,
    unbilled_failures,
)
from runs.reporting.report_spend import BUCKETS
from runs.reporting.report_types import Counts, Report

# A running run's percentiles and routing are recomputed at most this often (a request that
# finds the snapshot older recomputes it; concurrent requests show the older one meanwhile).
SNAPSHOT_SECONDS = 30
# The worker driving a run keeps its snapshot younger than this (`snapshot_keep`, from the
# driver's checkpoints, off the ledger's database thread), so no page pays for the
# computation (157-212 ms at 100,000 calls) while a worker drives the run; a page still
# recomputes one older than SNAPSHOT_SECONDS (no worker keeps it).
SNAPSHOT_KEEP_SECONDS = 20
# pg_try_advisory_xact_lock(class, run id): one snapshot computation per run at a time.
SNAPSHOT_LOCK_CLASS = 25025
SNAPSHOT_FIELDS = ("ttft_p50_ms", "latency_p50_ms", "latency_p95_ms")


@dataclass(frozen=True)
class ResultsReport:
    """The report the Results tab shows, and for a running run the time its percentiles and
    routing were computed (None: the report is the full one, or nothing is timed yet)."""

    report: Report
    live: bool
    snapshot_at: datetime | None = None


def live_applies(run: Run) -> bool:
    """Whether the run's Results come from the live sums: running, not a preview, and no
    usage correction (which a running run never has; the check keeps the rule exact)."""
    return (
        run.status == RunStatus.RUNNING
        and run.mode != Run.Mode.PREVIEW
        and not UsageCorrection.objects.filter(run_id=run.pk).exists()
    )


def run_results_compute(*, run: Run) -> ResultsReport:
    """The Results tab's report: the live one for a running run, else the settled one."""
    if live_applies(run):
        return run_report_live_compute(run=run)
    return ResultsReport(run_report_settled_compute(run=run), live=False)


def run_report_live_compute(*, run: Run) -> ResultsReport:
    """A running run's report from the trigger-kept sums and the timings snapshot."""
    head = refreshed_head(run)
    counts, missing = _live_counts(head.pk)
    sums, spend, seconds, notes = _live_call_sums(head.pk)
    failures = known_failures(run_ids=[head.pk])
    _count_unbilled(sums, spend, failures)
    slugs = dict(Target.objects.filter(pk__in={t for _, t, _ in counts}).values_list("pk", "slug"))
    target_ids = {(head.pk, slugs[tid]): tid for _, tid, _ in counts}
    figures, at = _snapshot(head)
    timings: dict[tuple[int, int], dict[str, Any]] = {}
    routing: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for tid in {t for _, t, _ in counts} | {t for _, t in seconds}:
        got = figures.get(str(tid), {})
        timings[(head.pk, tid)] = {
            **{k: got.get(k) for k in SNAPSHOT_FIELDS},
            "request_seconds_sum": seconds.get((head.pk, tid)),
        }
        routing[(head.pk, tid)] = got.get("routing", [])
    batch = ReportBatch(
        counts=counts,
        scores={},  # question-level intervals: given when the run has ended
        sums=sums,
        missing=missing,
        timings=timings,
        routing=routing,
        target_ids=target_ids,
        corrections={},
        spend=spend,
        official={},  # the official scorers: given when the run has ended
        notes=notes,  # the gateway's notes, counted as they land (migration 0025)
        unbilled=unbilled_failures(failures),
    )
    return ResultsReport(report_from_batch(head, batch), live=True, snapshot_at=at)


def _live_counts(
    run_id: int,
) -> tuple[dict[tuple[int, int, str], dict[str, int]], dict[tuple[int, int], int]]:
    """Per (run, target, benchmark) the counts `runs.reporting.report._cell_counts` gives, and per
    (run, target) the planned cells without a subject call."""
    counts: dict[tuple[int, int, str], dict[str, int]] = {}
    missing: dict[tuple[int, int], int] = defaultdict(int)
    rows = LiveCellSums.objects.filter(run_id=run_id).values(
        "target_id", "benchmark", *CELL_SUM_FIELDS
    )
    for r in rows:
        planned = sum(r[s] for s in CELL_STATES)
        if planned == 0 and r["subject_cells"] == 0:
            continue  # every cell of it deleted: the full report has no row either
        key = (run_id, r["target_id"], r["benchmark"])
        counts[key] = {
            "planned": planned,
            "correct": r["correct"],
            "scored": r["scored"],
            **{s: r[s] for s in CELL_STATES},
        }
        missing[(run_id, r["target_id"])] += planned - r["subject_cells"]
    return counts, {k: v for k, v in missing.items() if v}


def _known(total: Any, known: int) -> Any:
    """A sum over the values known, None when none is (never 0 for "no value")."""
    return total if known else None


def _live_call_sums(run_id: int) -> tuple[dict, dict, dict, dict]:
    """Per (run, target, role) the sums `runs.reporting.effective.effective_call_sums` gives; per run the
    spend `effective_run_spend` gives; per (run, target) Σ request seconds (`call_timings`);
    per (run, target, role) the note counts `cost_note_counts` gives (a group where none
    says anything absent, as there)."""
    acc: dict[tuple[int, int, str], dict[str, Any]] = {}
    spend = {"known": Decimal(0), "cost_known": 0, "calls": 0}
    spend.update(waste_known=Decimal(0), waste_cost_known=0, waste_calls=0)
    duration: dict[int, list[Any]] = defaultdict(lambda: [Decimal(0), 0])
    for r in LiveCallSums.objects.filter(run_id=run_id, calls__gt=0).values():
        a = acc.setdefault((run_id, r["target_id"], r["role"]), defaultdict(int))
        for name, value in r.items():
            if name not in ("id", "run_id", "target_id", "role", "waste"):
                a[name] += value
        spend["known"] += r["cost_usd"]
        spend["cost_known"] += r["cost_usd_known"]
        spend["calls"] += r["calls"]
        if r["waste"]:
            spend["waste_known"] += r["cost_usd"]
            spend["waste_cost_known"] += r["cost_usd_known"]
            spend["waste_calls"] += r["calls"]
        duration[r["target_id"]][0] += r["duration_ms"]
        duration[r["target_id"]][1] += r["duration_ms_known"]
    sums = {
        key: {
            "calls": a["calls"],
            "usage_unknown": a["calls"] - a["output_tokens_known"],
            "cost_unknown": a["calls"] - a["cost_usd_known"],
            "neutral_unknown": a["calls"] - a["cache_neutral_cost_usd_known"],
            **{b: _known(a[b], a[f"{b}_known"]) for b in BUCKETS},
            "cost": _known(a["cost_usd"], a["cost_usd_known"]),
            "neutral": _known(a["cache_neutral_cost_usd"], a["cache_neutral_cost_usd_known"]),
        }
        for key, a in acc.items()
    }
    run_spend = {}
    if spend["calls"]:  # a run with no call has no spend row (as effective_run_spend)
        run_spend[run_id] = {
            "known": _known(spend["known"], spend["cost_known"]),
            "unknown": spend["calls"] - spend["cost_known"],
            "waste_known": _known(spend["waste_known"], spend["waste_cost_known"]),
            "waste_unknown": spend["waste_calls"] - spend["waste_cost_known"],
            "waste_calls": spend["waste_calls"],
        }
    seconds = {
        (run_id, tid): timing_shown(float(ms / 1000), "seconds")
        for tid, (ms, known) in duration.items()
        if known
    }
    notes = {}
    for key, a in acc.items():
        counts = {name: a[name] for name in NOTE_COUNTS}
        if any(counts.values()):
            notes[key] = counts
    return sums, run_spend, seconds, notes


def _count_unbilled(
    sums: dict[tuple[int, int, str], dict[str, Any]],
    spend: dict[int, dict[str, Any]],
    failures: list[RunKnownFailure],
) -> None:
    """The trigger-kept sums hold the ledger's null cost of a known failure; the effective
    cost every other reader sums is a known 0 when its target's frozen terms do not bill
    errors (`runs.ledger.accounting.known_failure_unbilled`): counted so here too, so a call
    has the same cost while the run runs as after. The failures are read just after the sums,
    not in their snapshot: one that closed in between is not in the sums' unknown counts, so a
    count is never taken below zero (the next view counts it)."""
    for f in failures:
        if not f.unbilled:
            continue
        role = sums.get((f.run_id, f.target_id, f.role))
        if role is not None and role["cost_unknown"] > 0 and role["neutral_unknown"] > 0:
            role["cost_unknown"] -= 1
            role["neutral_unknown"] -= 1
            role["cost"] = role["cost"] if role["cost"] is not None else Decimal(0)
            role["neutral"] = role["neutral"] if role["neutral"] is not None else Decimal(0)
        run = spend.get(f.run_id)
        # A failed call is waste (WASTE_CALL_STATUSES).
        if run is not None and run["unknown"] > 0 and run["waste_unknown"] > 0:
            run["unknown"] -= 1
            run["waste_unknown"] -= 1
            run["known"] = run["known"] if run["known"] is not None else Decimal(0)
            run["waste_known"] = (
                run["waste_known"] if run["waste_known"] is not None else Decimal(0)
            )


def snapshot_keep(*, run_id: int) -> datetime | None:
    """What the worker driving a run calls every few seconds: the run's percentile snapshot
    recomputed when older than `SNAPSHOT_KEEP_SECONDS` (one computation at a time, across
    workers and pages). Returns the snapshot's time; None when the run's Results are not
    live (ended, a preview)."""
    run = Run.objects.defer("manifest").get(pk=run_id)
    if not live_applies(run):
        return None
    return _snapshot(refreshed_head(run), max_age=SNAPSHOT_KEEP_SECONDS)[1]


def _snapshot(
    head: Run, max_age: float = SNAPSHOT_SECONDS
) -> tuple[dict[str, Any], datetime | None]:
    """The run's percentiles and routing as of their last computation; recomputed here when
    older than `max_age`, by one caller at a time (the others get the older one)."""
    row = LiveSnapshot.objects.filter(run_id=head.pk).values_list("computed_at", "figures").first()
    now = timezone.now()
    if row is not None and (now - row[0]).total_seconds() < max_age:
        return row[1], row[0]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [SNAPSHOT_LOCK_CLASS, head.pk])
        if not cursor.fetchone()[0]:
            return (row[1], row[0]) if row is not None else ({}, None)
        figures: dict[str, Any] = defaultdict(dict)
        for (_, tid), values in call_timings([head.pk]).items():
            figures[str(tid)].update({k: values[k] for k in SNAPSHOT_FIELDS})
        for (_, tid), routed in mom_routing([head]).items():
            figures[str(tid)]["routing"] = routed
        try:
            with transaction.atomic():
                LiveSnapshot.objects.update_or_create(
                    run_id=head.pk, defaults={"computed_at": now, "figures": dict(figures)}
                )
        except DatabaseError:
            # Not kept (a caller's repeatable-read snapshot that the run row moved past):
            # the figures are still those computed now; the next view computes them again.
            pass
    return dict(figures), now


@dataclass(frozen=True)
class LiveSection:
    """What the live section of a run page shows, from one read of the run's `LiveCellSums`:
    the counters (the header's progress and the Results section's counts read these same
    numbers, issue 35 item 4) and the partial rows per (target slug, benchmark)."""

    counters: Counts
    cells: dict[tuple[int, str], dict[str, int]]
    slots: int
    intervals: dict[tuple[int, str], tuple[int, tuple[float, float] | None]]


def live_section(run: Run, manifest: dict[str, Any]) -> LiveSection:
    """The run's counters and, per (target id, benchmark), its cell counts and the interval
    the final report would give for the cells completed so far with its n in questions.

    The interval is the final report's statistic (`runs.reporting.report.question_interval`: Wilson on
    the mean question score, n = questions) over the completed cells. With one attempt per
    question the sums give it exactly (a completed cell is a question, its score is whether it
    is correct). With several attempts the sums cannot say how the completed cells fall into
    questions, so that case is computed from the cells (`completed_question_scores`): one
    grouped query over this run's completed cells (the (run, status) index), made only for a
    running run with attempts > 1."""
    cells = {
        (r["target_id"], r["benchmark"]): r
        for r in LiveCellSums.objects.filter(run_id=run.pk).values(
            "target_id", "benchmark", *CELL_SUM_FIELDS
        )
    }
    slots = int(manifest.get("slots") or 1)
    if slots > 1 and run.status == RunStatus.RUNNING:
        scores = completed_question_scores(run.pk)
    else:
        # A correct cell that is not completed is not in "the cells completed so far".
        scores = {
            k: (r["completed"], Fraction(min(r["correct"], r["completed"])))
            for k, r in cells.items()
        }
    intervals = {k: (n, question_interval(n, s)) for k, (n, s) in scores.items()}
    total = {s: sum(r[s] for r in cells.values()) for s in (*CELL_STATES, "correct", "scored")}
    counters = Counts(
        planned=sum(total[s] for s in CELL_STATES),
        completed=total["completed"],
        correct=total["correct"],
        scored=total["scored"],
        failed=total["failed"],
        pending=total["pending"] + total["running"],
        sent_unknown=total["sent_unknown"],
        cancelled=total["cancelled"],
    )
    return LiveSection(counters=counters, cells=cells, slots=slots, intervals=intervals)
