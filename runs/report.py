"""The run report (R1, R3, R4.2): what is known, from SQL aggregates over the whole ledger.

Never from a loaded page of details (R13.2). Unknown is None: a token bucket or a cost is
given only when every planned cell contributes a known value; the partial sum is labelled.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from django.db.models import Count, Q, Sum
from django.utils import timezone

from compare.stats import accuracy, weighted_quality, wilson_interval
from datasets.benchmarks import ADAPTERS
from runs.models import Call, Cell, Run, UsageCorrection

BUCKETS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")
CELL_STATES = ("pending", "running", "completed", "failed", "cancelled", "sent_unknown")


def _money(value: Decimal | None) -> str | None:
    return None if value is None else format(value.normalize(), "f")


def _percentile(values: list[float], q: float) -> float | None:
    return None if not values else float(np.percentile(np.asarray(values, dtype=float), q))


def _cell_counts(run: Run) -> dict[tuple[int, str], dict[str, int]]:
    rows = (
        Cell.objects.filter(run=run)
        .values("target_id", "benchmark")
        .annotate(
            planned=Count("id"),
            correct=Count("id", filter=Q(correct=True)),
            scored=Count("id", filter=Q(scored=True)),
            **{s: Count("id", filter=Q(status=s)) for s in CELL_STATES},
        )
    )
    return {(r.pop("target_id"), r.pop("benchmark")): r for r in rows}


def _call_sums(run: Run) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (target of the cell, role): sums of buckets and costs, and how many are unknown."""
    rows = (
        Call.objects.filter(cell__run=run)
        .values("cell__target_id", "role")
        .annotate(
            calls=Count("id"),
            usage_unknown=Count("id", filter=Q(output_tokens__isnull=True)),
            cost_unknown=Count("id", filter=Q(cost_usd__isnull=True)),
            neutral_unknown=Count("id", filter=Q(cache_neutral_cost_usd__isnull=True)),
            cost=Sum("cost_usd"),
            neutral=Sum("cache_neutral_cost_usd"),
            **{b: Sum(b) for b in BUCKETS},
        )
    )
    return {(r.pop("cell__target_id"), r.pop("role")): r for r in rows}


def _cells_without_subject_call(run: Run) -> dict[int, int]:
    rows = (
        Cell.objects.filter(run=run)
        .exclude(calls__role="subject")
        .values("target_id")
        .annotate(n=Count("id"))
    )
    return {r["target_id"]: r["n"] for r in rows}


def _target_report(
    run: Run,
    snapshot: dict[str, Any],
    target_id: int,
    counts: dict[str, dict[str, int]],
    sums: dict[str, dict[str, Any]],
    missing_subject: int,
) -> dict[str, Any]:
    manifest = run.manifest
    weights = {b: Fraction(v["weight"]) for b, v in manifest["benchmarks"].items()}
    benchmarks: dict[str, Any] = {}
    total = defaultdict(int)
    accs: dict[str, Fraction] = {}
    for b in manifest["benchmarks"]:
        c = counts.get(
            b, {"planned": 0, "correct": 0, "scored": 0, **dict.fromkeys(CELL_STATES, 0)}
        )
        for k, v in c.items():
            total[k] += v
        planned = c["planned"]
        acc = accuracy(c["correct"], planned) if planned else None
        if acc is not None:
            accs[b] = acc
        interval = wilson_interval(c["correct"], planned) if planned else None
        benchmarks[b] = {
            "planned": planned,
            "completed": c["completed"],
            "correct": c["correct"],
            "scored": c["scored"],
            "failed": c["failed"],
            "pending": c["pending"] + c["running"],
            "sent_unknown": c["sent_unknown"],
            "cancelled": c["cancelled"],
            # Accuracy is over the planned cases: a failed or missing case counts as wrong.
            "accuracy": None if acc is None else float(acc),
            "wilson_95": None if interval is None else list(interval),
            "complete": planned > 0 and c["completed"] == planned,
        }

    subject = sums.get("subject", {})
    cells_all_subject_known = (
        missing_subject == 0 and total["planned"] > 0 and total["completed"] == total["planned"]
    )
    usage_complete = cells_all_subject_known and subject.get("usage_unknown", 1) == 0
    cost_complete = cells_all_subject_known and subject.get("cost_unknown", 1) == 0
    neutral_complete = cells_all_subject_known and subject.get("neutral_unknown", 1) == 0
    evaluation = [sums[r] for r in ("judge", "simulator") if r in sums]
    evaluation_known = sum((e["cost"] or Decimal(0) for e in evaluation), Decimal(0))
    evaluation_complete = all(e["cost_unknown"] == 0 for e in evaluation)
    subject_known = subject.get("cost") or Decimal(0)
    all_complete = cost_complete and evaluation_complete

    latencies = list(
        Call.objects.filter(
            cell__run=run, cell__target_id=target_id, role="subject", status="completed"
        ).values_list("duration_ms", "ttft_ms")
    )
    durations = [d for d, _ in latencies if d is not None]
    ttfts = [t for _, t in latencies if t is not None]
    all_durations = list(
        Call.objects.filter(
            cell__run=run, cell__target_id=target_id, duration_ms__isnull=False
        ).values_list("duration_ms", flat=True)
    )

    run_complete = run.status == "completed" and all(v["complete"] for v in benchmarks.values())
    nine = set(manifest["benchmarks"]) == set(ADAPTERS)
    score: dict[str, Any]
    if accs and run_complete and nine and run.parent_id is None:
        score = {
            "kind": "sr-bench",
            "value": float(weighted_quality(accs, weights)),
            "exact": str(weighted_quality(accs, weights)),
        }
    elif accs:
        q = weighted_quality(accs, weights)
        score = {
            "kind": "subset",
            "label": "selected-benchmark subset macro average (not an sr-bench score)",
            "benchmarks": sorted(accs),
            "value": float(q),
            "exact": str(q),
        }
    else:
        score = {"kind": "none", "value": None}

    report: dict[str, Any] = {
        "slug": snapshot["slug"],
        "kind": snapshot["kind"],
        "model": snapshot["model"],
        "planned": total["planned"],
        "completed": total["completed"],
        "correct": total["correct"],
        "scored": total["scored"],
        "failed": total["failed"],
        "pending": total["pending"] + total["running"],
        "sent_unknown": total["sent_unknown"],
        "cancelled": total["cancelled"],
        "benchmarks": benchmarks,
        "score": score,
        "tokens": {
            b.removesuffix("_tokens"): (subject.get(b) if usage_complete else None) for b in BUCKETS
        },
        "tokens_known_partial": {b.removesuffix("_tokens"): subject.get(b) for b in BUCKETS},
        "subject_cost_usd": _money(subject_known) if cost_complete else None,
        "known_cost_usd": _money(subject_known),
        "evaluation_cost_usd": _money(evaluation_known) if evaluation_complete else None,
        "known_evaluation_cost_usd": _money(evaluation_known),
        "total_spend_usd": _money(subject_known + evaluation_known) if all_complete else None,
        "known_total_spend_usd": _money(subject_known + evaluation_known),
        "cache_neutral_cost_usd": _money(subject.get("neutral")) if neutral_complete else None,
        "ttft_p50_ms": _percentile(ttfts, 50),
        "latency_p50_ms": _percentile(durations, 50),
        "latency_p95_ms": _percentile(durations, 95),
        "request_seconds_sum": (sum(all_durations) / 1000) if all_durations else None,
    }
    if snapshot["kind"] == "mom":
        routed = (
            Call.objects.filter(cell__run=run, cell__target_id=target_id, role="subject")
            .values("selected_model", "selected_decision")
            .annotate(n=Count("id"))
        )
        models: dict[str, int] = defaultdict(int)
        decisions: dict[str, int] = defaultdict(int)
        for r in routed:
            models[r["selected_model"] or "unknown"] += r["n"]
            decisions[r["selected_decision"] or "unknown"] += r["n"]
        report["selected_models"] = dict(models)
        report["selected_decisions"] = dict(decisions)
    return report


def run_report(*, run: Run) -> dict[str, Any]:
    """The full report of a run. Reads only; no model call."""
    run.refresh_from_db()
    manifest = run.manifest
    counts = _cell_counts(run)
    sums = _call_sums(run)
    missing = _cells_without_subject_call(run)
    target_ids = dict(
        Cell.objects.filter(run=run).values_list("target__slug", "target_id").distinct()
    )
    targets = []
    for snapshot in manifest["targets"]:
        tid = target_ids.get(snapshot["slug"])
        by_benchmark = {b: c for (t, b), c in counts.items() if t == tid}
        by_role = {r: s for (t, r), s in sums.items() if t == tid}
        targets.append(
            _target_report(run, snapshot, tid, by_benchmark, by_role, missing.get(tid, 0))
        )
    totals = {
        k: sum(t[k] for t in targets)
        for k in ("planned", "completed", "correct", "scored", "failed", "pending", "sent_unknown")
    }
    now = timezone.now()
    wall = None
    if run.started_at:
        wall = ((run.finished_at or now) - run.started_at).total_seconds()
    reasons = []
    if run.status != "completed":
        reasons.append(f"run is {run.status}")
    if run.stop_reason:
        reasons.append(run.stop_reason)
    if totals["completed"] < totals["planned"]:
        reasons.append(
            f"{totals['planned'] - totals['completed']} of {totals['planned']} "
            "planned cells have no completed result"
        )
    correction = UsageCorrection.objects.filter(run=run).order_by("-version").first()
    return {
        "run": {
            "id": run.pk,
            "name": run.name,
            "status": run.status,
            "mode": run.mode,
            "profile": run.profile,
            "plan_sha256": run.plan_sha256,
            "parent": run.parent_id,
            "created_at": run.created_at.isoformat(),
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "wall_seconds": wall,
            "stop_reason": run.stop_reason or None,
        },
        "complete": not reasons,
        "incomplete_reasons": reasons,
        "denominator": totals["planned"],
        "counts": totals,
        "targets": targets,
        "usage_correction": None
        if correction is None
        else {
            "version": correction.version,
            "evidence_sha256": correction.evidence_sha256,
            "created_at": correction.created_at.isoformat(),
        },
        "model_requests": 0,
    }
