"""Where a run came from and what was recovered from it (R15.4), and the known spend of runs
that recovery plans and lineage pages show. Reads only."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Count, Q

from runs.models import Cell, CellStatus, RecoveryRequest, Run, RunStatus
from runs.reporting.effective import effective_call_sums
from srbench.api import Keyset
from srbench.money import money_text

# R13.3 with R13.1: lists are read ≤ 100 at a time (runs.settlement.recovery_pages.MAX_RECOVERY_PAGE).
MAX_LINEAGE_PAGE = 100
# A run's descendants, ascending by id, null when none follows (srbench.api.Keyset's one rule).
CHILDREN_PAGE = Keyset("after", tail=False)
# How deep the lineage tree is read (recoveries of recoveries of …): far beyond any real one.
MAX_LINEAGE_DEPTH = 1000


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


# --- lineage (R15.4) -----------------------------------------------------------------------------


# The lineage mode of a re-judge child (runs/settlement/rejudge.py): the parent's judged answers sent to
# the judge again; a recovery's mode is the one it was submitted with ("undispatched", "failed").
REJUDGE_MODE = "rejudge"


def lineage_mode(run: Run) -> str | None:
    """How a child run came from its parent: its recovery mode, "rejudge" for a re-judge
    child, None for a run that is neither. A recovery of a re-judge child inherits the
    ``rejudge`` marker and is a recovery first."""
    manifest = run.manifest if isinstance(run.manifest, dict) else {}
    if recovery := manifest.get("recovery"):
        return str(recovery["mode"])
    if manifest.get("rejudge"):
        return REJUDGE_MODE
    return None


def _run_line(run: Run, spend: dict[str, Any], progress: dict[str, int]) -> dict[str, Any]:
    return {
        "id": run.pk,
        "name": run.name,
        "status": run.status,
        "mode": lineage_mode(run),
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
            completed=Count("id", filter=Q(status=CellStatus.COMPLETED)),
            failed=Count("id", filter=Q(status__in=[CellStatus.FAILED, CellStatus.SENT_UNKNOWN])),
            pending=Count("id", filter=Q(status__in=[CellStatus.PENDING, CellStatus.RUNNING])),
        )
    )
    empty = {"denominator": 0, "completed": 0, "failed": 0, "pending": 0}
    out = {r: dict(empty) for r in run_ids}
    for row in rows:
        out[row.pop("run_id")] = row
    return out


def _rejudged_from(run: Run) -> dict[str, Any] | None:
    """What a re-judge child judged again (its manifest's ``rejudge`` marker): None for any
    other run, a recovery of a re-judge child included (its `recovered_from` says whence)."""
    if lineage_mode(run) != REJUDGE_MODE:
        return None
    marker = run.manifest["rejudge"]
    return {
        "parent": marker["parent_run"],
        "judge_calls": marker["judge_calls"],
        "confirmed_judge_cost_usd": marker["confirmed_judge_cost_usd"],
        "rejudge_sha256": marker["rejudge_sha256"],
    }


def _descendants(run_id: int, after: int, limit: int) -> list[tuple[int, int, int]]:
    """(id, parent id, depth) of the run's descendants — its children (depth 1), their
    children (2), and so on — with an id above ``after``, ascending by id, at most ``limit``.
    One recursive query over the parent column's index."""
    table = connection.ops.quote_name(Run._meta.db_table)
    sql = f"""
        WITH RECURSIVE tree (id, parent_id, depth) AS (
            SELECT id, parent_id, 1 FROM {table} WHERE parent_id = %s
            UNION ALL
            SELECT r.id, r.parent_id, t.depth + 1
            FROM {table} r JOIN tree t ON r.parent_id = t.id
            WHERE t.depth < %s
        )
        SELECT id, parent_id, depth FROM tree WHERE id > %s ORDER BY id LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [run_id, MAX_LINEAGE_DEPTH, after, limit])
        return [(int(i), int(p), int(d)) for i, p, d in cursor.fetchall()]


def _children(run: Run, after: int, limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the run's descendants with their own progress and known cost, and the
    cursor of the next page (null when none follows)."""
    limit = max(1, min(limit, MAX_LINEAGE_PAGE))
    tree = _descendants(run.pk, after, limit + 1)
    more = len(tree) > limit
    tree = tree[:limit]
    rows = Run.objects.in_bulk([i for i, _p, _d in tree])
    children = [rows[i] for i, _p, _d in tree]
    ids = [c.pk for c in children]
    spend, progress = run_known_spend(run_ids=ids), _progress_of(ids)
    lines = [
        {**_run_line(c, spend[c.pk], progress[c.pk]), "parent": p, "depth": d}
        for c, (_i, p, d) in zip(children, tree, strict=True)
    ]
    return lines, CHILDREN_PAGE.next_cursor(children, more=more)


def run_lineage(*, run: Run, children_after: int = 0, limit: int = 25) -> dict[str, Any]:
    """Where a run came from and what was recovered or re-judged from it, each with its own
    progress and known cost (R15.4): a child's denominator is its selection only, and the
    original's known cost is never merged with its children's. ``children`` is the whole tree
    below the run — recoveries and re-judges of its children too —, ascending by id, each with
    its ``parent`` and ``depth`` (1: a child of this run). Reads only."""
    children, following = _children(run, children_after, limit)
    parent = run.parent
    ids = [run.pk, *([parent.pk] if parent else [])]
    spend = run_known_spend(run_ids=ids)
    progress = _progress_of(ids)
    request = RecoveryRequest.objects.filter(child=run).first()
    return {
        "run": {
            **_run_line(run, spend[run.pk], progress[run.pk]),
            # A recovered run is never complete through its children (R15.4).
            "benchmark_complete": run.status == RunStatus.COMPLETED and run.parent_id is None,
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
        "rejudged_from": _rejudged_from(run),
        "children": children,
        "next_children_after": following,
        "model_requests": 0,
    }


def recovery_page_lineage(*, run: Run) -> dict[str, Any]:
    """What the recovery page shows of the lineage: the first page of the run's descendants
    with their figures, its parent's id and what a re-judge child judged again — not the run's
    own known spend and progress (the plan states them), which cost a sum over every call of
    the run (about 150 ms at 100,000 cells)."""
    children, following = _children(run, 0, 25)
    return {
        "children": children,
        "next_children_after": following,
        "parent": None if run.parent_id is None else {"id": run.parent_id},
        "rejudged_from": _rejudged_from(run),
    }
