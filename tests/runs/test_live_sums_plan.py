"""The call triggers' "cells with a subject call" count looks each new (or removed) call's
cell up by its own index entry, whatever PostgreSQL's statistics say (migration 0031; issue 38
item 2).

Without the fence PostgreSQL turns the NOT EXISTS into an anti-join, and on a table whose size
its statistics did not know (a new database before autovacuum's first ANALYZE) it read every
subject call of the table per new call: an open of n calls cost n × (calls in the table) —
seen as 350-410 ms for 128 opens and PostgreSQL's CPU 13-15 s instead of 3 for a 4,096-call run
(docs/performance.md, session 13). The counts themselves are held equal to recomputed ones by
tests/runs/test_live_sums.py; here, how the condition is planned, on the real PostgreSQL, for
the exact text the trigger runs."""

from __future__ import annotations

import json
from importlib import import_module
from typing import Any

import pytest
from django.db import connection, transaction

from runs.models import Call, CallStatus
from tests import factories as f

pytestmark = pytest.mark.django_db(transaction=True)

live = import_module("runs.migrations.0011_live_sums")
fence = import_module("runs.migrations.0031_subject_cells_plan_fence")


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


def _plan(sql: str, table: str) -> list[dict[str, Any]]:
    """The plan nodes of the trigger's sub-select `sql`, with `table` (new_rows or old_rows)
    a table of calls like the statement's transition table."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Unanalyzed, as a transition table: the planner does not know what it holds.
        cursor.execute(f"CREATE TEMP TABLE {table} ON COMMIT DROP AS SELECT * FROM runs_call")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        doc = cursor.fetchone()[0]
    doc = json.loads(doc) if isinstance(doc, str) else doc
    return _nodes(doc[0]["Plan"])


def _calls_looked_up_by_cell(nodes: list[dict[str, Any]]) -> bool:
    """A sub-plan, run per outer row, that reads runs_call through an index on the cell."""
    return any(
        m.get("Relation Name") == "runs_call"
        and "Index" in m["Node Type"]
        and "cell_id" in m.get("Index Cond", "")
        for n in nodes
        if n.get("Parent Relationship") == "SubPlan"
        for m in _nodes(n)
    )


@pytest.fixture
def ledger():
    """Enough subject calls that a scan of them all is not the planner's only sensible plan."""
    run = f.run_create(status="running")
    target = f.target_create()
    cells = [f.cell_create(run=run, target=target) for _ in range(300)]
    f.calls_bulk_create(cells, target=target, status=lambda i: CallStatus.COMPLETED)
    return run


@pytest.mark.parametrize(
    ("fenced", "original", "table"),
    [
        (fence.FENCED_ADDED, live.SUBJECT_ADDED, "new_rows"),
        (fence.FENCED_REMOVED, live.SUBJECT_REMOVED, "old_rows"),
    ],
    ids=["insert", "delete"],
)
def test_each_cell_is_looked_up_by_its_index_entry(ledger, fenced, original, table):
    assert Call.objects.count() == 300
    assert _calls_looked_up_by_cell(_plan(fenced, table))
    # The condition before the fence: an anti-join, which PostgreSQL may plan as a scan of
    # every subject call per new call (what the fence is for).
    original_nodes = _plan(original, table)
    assert any("Anti" in n.get("Join Type", "") for n in original_nodes)
    assert not _calls_looked_up_by_cell(original_nodes)


def test_the_triggers_run_the_fenced_condition():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, prosrc FROM pg_proc WHERE proname IN "
            "('srbench_live_calls_insert', 'srbench_live_calls_delete')"
        )
        bodies = dict(cursor.fetchall())
    assert (
        "AND c.id NOT IN (SELECT id FROM new_rows) OFFSET 0)" in bodies["srbench_live_calls_insert"]
    )
    assert "c.role = 'subject' OFFSET 0)" in bodies["srbench_live_calls_delete"]
