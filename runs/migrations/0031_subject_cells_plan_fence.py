"""The live sums' "cells with a subject call" count, looked up cell by cell (issue 38 item 2).

Migration 0011's call triggers count a cell once when its first subject call is inserted (and
uncount it when its last is deleted) with `NOT EXISTS (SELECT 1 FROM runs_call c WHERE
c.cell_id = n.cell_id AND c.role = 'subject' …)` over the statement's transition table. PostgreSQL
turned that into an anti-join and, on a table whose statistics did not yet know its size (every
new database until autovacuum's first ANALYZE, and the bench's), planned it as a scan of every
subject call of the table per new call (the index on (cell_id, role, sequence) read by role
alone; the cell matched as a join filter): a batch of n opens cost n × (calls already in the
table). Seen with auto_explain in `bench/engine_throughput.py` at C = 1,024 with the opens
written 128 a transaction: 350-410 ms in the trigger for 128 opens late in the run, and
PostgreSQL's CPU for the run 13-15 s instead of 3 (docs/performance.md, session 13).

`OFFSET 0` keeps each sub-select a sub-plan run once per new (or removed) call with its cell as
the parameter — an index lookup of that cell's subject calls, whatever the statistics say. The
same condition, so the same counts: only how PostgreSQL runs it changes. The other functions of
0011 and 0025 are unchanged.
"""

from importlib import import_module

from django.db import migrations

from srbench.dbguards import run_on_postgres

live = import_module("runs.migrations.0011_live_sums")
notes = import_module("runs.migrations.0025_live_note_counts")

# PostgreSQL never pulls up an EXISTS sub-select with an OFFSET (its optimisation fence).
FENCED_ADDED = live.SUBJECT_ADDED.replace(
    "AND c.id NOT IN (SELECT id FROM new_rows))",
    "AND c.id NOT IN (SELECT id FROM new_rows) OFFSET 0)",
)
FENCED_REMOVED = live.SUBJECT_REMOVED.replace(
    "WHERE c.cell_id = o.cell_id AND c.role = 'subject')",
    "WHERE c.cell_id = o.cell_id AND c.role = 'subject' OFFSET 0)",
)
assert FENCED_ADDED != live.SUBJECT_ADDED and FENCED_REMOVED != live.SUBJECT_REMOVED


def _functions(added: str, removed: str) -> list[str]:
    """Migration 0025's insert and delete functions of the call triggers, with these
    subject-cell counts."""
    body = notes._calls_body
    return [
        live._function(
            "srbench_live_calls_insert",
            body(notes.CALL_IN, added, notes.CALL_COLS, notes.NOTES),
        ),
        live._function(
            "srbench_live_calls_delete",
            body(notes.CALL_OUT, removed, notes.CALL_COLS, notes.NOTES),
        ),
    ]


FORWARD = _functions(FENCED_ADDED, FENCED_REMOVED)
BACKWARD = _functions(live.SUBJECT_ADDED, live.SUBJECT_REMOVED)


class Migration(migrations.Migration):
    dependencies = [("runs", "0030_recovery_plan_chunks")]

    operations = [migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD))]
