"""Live Results sums (issue 25): per (run, target, benchmark) cells by status, correct, scored
and cells with a subject call; per (run, target of the cell, role, waste) call counts, usage,
cost and duration sums with how many were known. Kept by statement-level triggers with
transition tables in the transaction that writes the cells and calls. A statement queues its
delta in a pending table only its own transaction sees; a deferred constraint trigger adds the
transaction's deltas to the sums when it commits, one statement per table in key order. Unlike
migration 0006 no run-row lock is taken: a worker batch that only closes calls takes none today,
while the run's finish and the reaper hold the run row and then update open calls, so a call
trigger taking it could deadlock with them. A statement that changes no sum (a lease renewal,
a stream checkpoint, `sent` -> `streaming`) queues nothing."""

import django.db.models.deletion
from django.db import migrations, models

from srbench.dbguards import run_on_postgres

# The cell statuses and waste call statuses as of this migration (runs.models.CellStatus,
# runs.reconcile.WASTE_CALL_STATUSES); a new status needs a column here and in the triggers.
STATUSES = ("pending", "running", "completed", "failed", "cancelled", "sent_unknown")
WASTE = "('failed', 'sent_unknown')"
SUMMED = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "cache_neutral_cost_usd",
    "duration_ms",
)
CELL_KEY = ("run_id", "target_id", "benchmark")
CELL_COLS = (*STATUSES, "correct", "scored", "subject_cells")
CALL_KEY = ("run_id", "target_id", "role", "waste")
CALL_COLS = ("calls", *[c for s in SUMMED for c in (s, f"{s}_known")])


def _nonzero(cols: tuple[str, ...]) -> str:
    return " OR ".join(f"d.{c} <> 0" for c in cols)


def _cell_delta(src: str) -> str:
    """Per (run, target, benchmark): what the statement's rows add (sg = 1) or remove (-1)."""
    counts = ",\n      ".join(
        [
            *[f"coalesce(sum(sg) FILTER (WHERE status = '{s}'), 0) AS {s}" for s in STATUSES],
            "coalesce(sum(sg) FILTER (WHERE correct), 0) AS correct",
            "coalesce(sum(sg) FILTER (WHERE scored), 0) AS scored",
            "0 AS subject_cells",
        ]
    )
    return f"""SELECT * FROM (
    SELECT run_id, target_id, benchmark,
      {counts}
    FROM ({src}) x GROUP BY run_id, target_id, benchmark
  ) d WHERE {_nonzero(CELL_COLS)}"""


def _call_delta(src: str) -> str:
    """Per (run, target of the cell, role, waste): what the statement's call rows add or
    remove. The cell's run and target come from the cell row (a call's cell never changes)."""
    sums = ",\n      ".join(
        [
            "sum(sg) AS calls",
            *[
                f"coalesce(sum(sg * x.{c}{'::numeric' if c == 'duration_ms' else ''}), 0) AS {c}, "
                f"coalesce(sum(sg) FILTER (WHERE x.{c} IS NOT NULL), 0) AS {c}_known"
                for c in SUMMED
            ],
        ]
    )
    return f"""SELECT * FROM (
    SELECT cell.run_id, cell.target_id, x.role, x.status IN {WASTE} AS waste,
      {sums}
    FROM ({src}) x JOIN runs_cell cell ON cell.id = x.cell_id
    GROUP BY cell.run_id, cell.target_id, x.role, x.status IN {WASTE}
  ) d WHERE {_nonzero(CALL_COLS)}"""


def _pending(table: str, keys: tuple[str, ...], cols: tuple[str, ...], delta: str) -> str:
    """Queue the statement's delta in the transaction's own pending rows: a plain insert into
    a table no other transaction reads, so a statement waits on no lock here."""
    names = ", ".join((*keys, *cols))
    return f"""INSERT INTO {table}_pending ({names})
  SELECT {", ".join(f"d.{n}" for n in (*keys, *cols))} FROM ({delta}) d;"""


def _apply(table: str, keys: tuple[str, ...], cols: tuple[str, ...]) -> str:
    """Move the transaction's pending rows into the sums in ONE statement, in key order (the
    rows this transaction sees in the pending table are its own: others' are uncommitted and
    committed ones never remain). Runs gone by then keep no sums."""
    key_list = ", ".join(keys)
    sums = ", ".join(f"sum(m.{c}) AS {c}" for c in cols)
    adds = ", ".join(f"{c} = t.{c} + EXCLUDED.{c}" for c in cols)
    return f"""WITH moved AS (DELETE FROM {table}_pending RETURNING *)
  INSERT INTO {table} AS t ({key_list}, {", ".join(cols)})
  SELECT * FROM (
    SELECT {", ".join(f"m.{k}" for k in keys)}, {sums} FROM moved m
    WHERE EXISTS (SELECT 1 FROM runs_run r WHERE r.id = m.run_id)
    GROUP BY {", ".join(f"m.{k}" for k in keys)}
  ) d WHERE {_nonzero(cols)}
  ORDER BY {", ".join(f"d.{k}" for k in keys)}
  ON CONFLICT ({key_list}) DO UPDATE SET {adds};"""


def _function(name: str, body: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$
BEGIN
  {body}
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


CELL_COLUMNS = "run_id, target_id, benchmark, status, correct, scored"
CELL_IN = f"SELECT 1 AS sg, {CELL_COLUMNS} FROM new_rows"
CELL_OUT = f"SELECT -1 AS sg, {CELL_COLUMNS} FROM old_rows"
CALL_COLUMNS = "id, cell_id, role, status, " + ", ".join(SUMMED)
CALL_IN = f"SELECT 1 AS sg, {CALL_COLUMNS} FROM new_rows"
CALL_OUT = f"SELECT -1 AS sg, {CALL_COLUMNS} FROM old_rows"

# Cells with a subject call: a subject call inserted for a cell that had none before this
# statement adds its cell once; a delete that leaves a cell with no subject call removes it.
# A call's cell and role never change (migration 0002's frozen columns), so an UPDATE of calls
# never changes this count. Read after the run lock, in a fresh statement snapshot.
_subject = "0 AS " + ", 0 AS ".join(STATUSES) + ", 0 AS correct, 0 AS scored"
SUBJECT_ADDED = f"""SELECT cell.run_id, cell.target_id, cell.benchmark, {_subject},
      count(DISTINCT n.cell_id) AS subject_cells
    FROM new_rows n JOIN runs_cell cell ON cell.id = n.cell_id
    WHERE n.role = 'subject' AND NOT EXISTS (
      SELECT 1 FROM runs_call c WHERE c.cell_id = n.cell_id AND c.role = 'subject'
      AND c.id NOT IN (SELECT id FROM new_rows))
    GROUP BY cell.run_id, cell.target_id, cell.benchmark"""
SUBJECT_REMOVED = f"""SELECT cell.run_id, cell.target_id, cell.benchmark, {_subject},
      -count(DISTINCT o.cell_id) AS subject_cells
    FROM old_rows o JOIN runs_cell cell ON cell.id = o.cell_id
    WHERE o.role = 'subject' AND NOT EXISTS (
      SELECT 1 FROM runs_call c WHERE c.cell_id = o.cell_id AND c.role = 'subject')
    GROUP BY cell.run_id, cell.target_id, cell.benchmark"""

CELLS_T, CALLS_T = "runs_livecellsums", "runs_livecallsums"


def _cells_body(src: str) -> str:
    return _pending(CELLS_T, CELL_KEY, CELL_COLS, _cell_delta(src))


def _calls_body(src: str, subject: str | None) -> str:
    body = _pending(CALLS_T, CALL_KEY, CALL_COLS, _call_delta(src))
    if subject:
        body += f"\n  {_pending(CELLS_T, CELL_KEY, CELL_COLS, subject)}"
    return body


def _trigger(name: str, table: str, event: str, function: str) -> str:
    refs = {
        "INSERT": "NEW TABLE AS new_rows",
        "DELETE": "OLD TABLE AS old_rows",
        "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
    }[event]
    return (
        f"CREATE TRIGGER {name} AFTER {event} ON {table} REFERENCING {refs} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}();"
    )


FUNCTIONS = {
    "srbench_live_cells_insert": _cells_body(CELL_IN),
    "srbench_live_cells_update": _cells_body(f"{CELL_IN} UNION ALL {CELL_OUT}"),
    "srbench_live_cells_delete": _cells_body(CELL_OUT),
    "srbench_live_calls_insert": _calls_body(CALL_IN, SUBJECT_ADDED),
    "srbench_live_calls_update": _calls_body(f"{CALL_IN} UNION ALL {CALL_OUT}", None),
    "srbench_live_calls_delete": _calls_body(CALL_OUT, SUBJECT_REMOVED),
}
TRIGGERS = [
    ("runs_cell_live_insert", "runs_cell", "INSERT", "srbench_live_cells_insert"),
    ("runs_cell_live_update", "runs_cell", "UPDATE", "srbench_live_cells_update"),
    ("runs_cell_live_delete", "runs_cell", "DELETE", "srbench_live_cells_delete"),
    ("runs_call_live_insert", "runs_call", "INSERT", "srbench_live_calls_insert"),
    ("runs_call_live_update", "runs_call", "UPDATE", "srbench_live_calls_update"),
    ("runs_call_live_delete", "runs_call", "DELETE", "srbench_live_calls_delete"),
]

_cell_counts = ", ".join(
    [
        *[f"count(*) FILTER (WHERE cell.status = '{s}')" for s in STATUSES],
        "count(*) FILTER (WHERE cell.correct)",
        "count(*) FILTER (WHERE cell.scored)",
        "count(*) FILTER (WHERE EXISTS (SELECT 1 FROM runs_call c "
        "WHERE c.cell_id = cell.id AND c.role = 'subject'))",
    ]
)
_call_sums = ", ".join(
    [
        "count(*)",
        *[
            f"coalesce(sum(c.{s}{'::numeric' if s == 'duration_ms' else ''}), 0), count(c.{s})"
            for s in SUMMED
        ],
    ]
)
# Backfill: every existing run's rows, summed once under the locks FORWARD takes.
BACKFILL = [
    f"INSERT INTO {CELLS_T} ({', '.join((*CELL_KEY, *CELL_COLS))}) "
    f"SELECT cell.run_id, cell.target_id, cell.benchmark, {_cell_counts} "
    "FROM runs_cell cell GROUP BY cell.run_id, cell.target_id, cell.benchmark;",
    f"INSERT INTO {CALLS_T} ({', '.join((*CALL_KEY, *CALL_COLS))}) "
    f"SELECT cell.run_id, cell.target_id, c.role, c.status IN {WASTE}, {_call_sums} "
    "FROM runs_call c JOIN runs_cell cell ON cell.id = c.cell_id "
    f"GROUP BY cell.run_id, cell.target_id, c.role, c.status IN {WASTE};",
]

# The pending rows: each transaction's deltas, moved into the sums when it commits.
PENDING = [
    f"CREATE TABLE {CELLS_T}_pending AS SELECT {', '.join((*CELL_KEY, *CELL_COLS))} "
    f"FROM {CELLS_T} WITH NO DATA;",
    f"CREATE TABLE {CALLS_T}_pending AS SELECT {', '.join((*CALL_KEY, *CALL_COLS))} "
    f"FROM {CALLS_T} WITH NO DATA;",
]
# Applied at commit (a deferred constraint trigger), cells' sums then calls' sums, each in one
# statement in key order: a committing transaction waits only for sums rows, which only other
# committing transactions hold, all taken in that same order, so no wait can close a cycle;
# and no statement of the ledger waits on the sums at all (no run-row lock is added to any
# transaction). The first pending row's trigger moves them all; the later ones find none.
APPLY = _function(
    "srbench_live_apply",
    f"{_apply(CELLS_T, CELL_KEY, CELL_COLS)}\n  {_apply(CALLS_T, CALL_KEY, CALL_COLS)}",
)
APPLY_TRIGGERS = [
    f"CREATE CONSTRAINT TRIGGER {t}_apply AFTER INSERT ON {t}_pending "
    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION srbench_live_apply();"
    for t in (CELLS_T, CALLS_T)
]

FORWARD = [
    # No cell or call is written while the triggers are created and the rows backfilled.
    "LOCK TABLE runs_run, runs_cell, runs_call IN SHARE MODE;",
    *PENDING,
    APPLY,
    *APPLY_TRIGGERS,
    *[_function(name, body) for name, body in FUNCTIONS.items()],
    *[_trigger(*t) for t in TRIGGERS],
    *BACKFILL,
]
BACKWARD = [
    *[f"DROP TRIGGER IF EXISTS {name} ON {table};" for name, table, _, _ in TRIGGERS],
    *[f"DROP FUNCTION IF EXISTS {name}();" for name in FUNCTIONS],
    *[f"DROP TABLE IF EXISTS {t}_pending;" for t in (CELLS_T, CALLS_T)],
    "DROP FUNCTION IF EXISTS srbench_live_apply();",
]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_regrade_moved_from_compare"),
    ]

    operations = [
        migrations.CreateModel(
            name="LiveSnapshot",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="runs.run",
                    ),
                ),
                ("computed_at", models.DateTimeField()),
                ("figures", models.JSONField()),
            ],
        ),
        migrations.CreateModel(
            name="LiveCallSums",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("role", models.CharField(max_length=10)),
                ("waste", models.BooleanField()),
                ("calls", models.BigIntegerField(default=0)),
                ("input_tokens", models.BigIntegerField(default=0)),
                ("input_tokens_known", models.BigIntegerField(default=0)),
                ("cached_input_tokens", models.BigIntegerField(default=0)),
                ("cached_input_tokens_known", models.BigIntegerField(default=0)),
                ("cache_write_tokens", models.BigIntegerField(default=0)),
                ("cache_write_tokens_known", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("output_tokens_known", models.BigIntegerField(default=0)),
                ("cost_usd", models.DecimalField(decimal_places=10, default=0, max_digits=40)),
                ("cost_usd_known", models.BigIntegerField(default=0)),
                (
                    "cache_neutral_cost_usd",
                    models.DecimalField(decimal_places=10, default=0, max_digits=40),
                ),
                ("cache_neutral_cost_usd_known", models.BigIntegerField(default=0)),
                ("duration_ms", models.DecimalField(decimal_places=20, default=0, max_digits=50)),
                ("duration_ms_known", models.BigIntegerField(default=0)),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.run",
                    ),
                ),
                (
                    "target",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.target",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "target", "role", "waste"), name="live_call_sums_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="LiveCellSums",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("benchmark", models.CharField(max_length=40)),
                ("pending", models.BigIntegerField(default=0)),
                ("running", models.BigIntegerField(default=0)),
                ("completed", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("cancelled", models.BigIntegerField(default=0)),
                ("sent_unknown", models.BigIntegerField(default=0)),
                ("correct", models.BigIntegerField(default=0)),
                ("scored", models.BigIntegerField(default=0)),
                ("subject_cells", models.BigIntegerField(default=0)),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.run",
                    ),
                ),
                (
                    "target",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.target",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "target", "benchmark"), name="live_cell_sums_key"
                    )
                ],
            },
        ),
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
