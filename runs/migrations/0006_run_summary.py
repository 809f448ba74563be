"""Run summary (issue 25, R7.1): a run's cells counted by status, kept exact by PostgreSQL
triggers in the transaction that changes the cells, so a run poll reads one row instead of
joining the run's cells with its events."""

import django.db.models.deletion
from django.db import migrations, models

from srbench.dbguards import run_on_postgres

# The cell statuses as of this migration (runs.models.CellStatus); the cell table's
# cell_status_known constraint refuses any other, and the apply function checks it again.
STATUSES = ("pending", "running", "completed", "failed", "cancelled", "sent_unknown")

_columns = ", ".join(STATUSES)
_sums = ",\n      ".join(
    f"coalesce(sum(d.n) FILTER (WHERE d.status = '{s}'), 0) AS {s}" for s in STATUSES
)
_adds = ", ".join(f"{s} = t.{s} + delta.{s}" for s in STATUSES)
_known = ", ".join(f"'{s}'" for s in STATUSES)
_zeros = ", ".join("0" for _ in STATUSES)

APPLY = f"""
CREATE OR REPLACE FUNCTION srbench_run_summary_apply(r bigint[], s text[], n bigint[])
RETURNS void AS $$
BEGIN
  IF r IS NULL OR cardinality(r) = 0 THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(s) AS x(status) WHERE x.status NOT IN ({_known})) THEN
    RAISE EXCEPTION 'srbench: run summary does not count cell status %', s
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  -- The run rows first, in id order: the summary row is then always locked after its run,
  -- the order every engine transaction already takes (events_append, claims, budget).
  PERFORM 1 FROM runs_run WHERE id = ANY(r) ORDER BY id FOR NO KEY UPDATE;
  -- Every run gets its row on insert (and the backfill); this only guards the invariant.
  INSERT INTO runs_runsummary (run_id, {_columns})
  SELECT DISTINCT x.run_id, {_zeros} FROM unnest(r) AS x(run_id)
  ON CONFLICT (run_id) DO NOTHING;
  UPDATE runs_runsummary AS t SET {_adds}
  FROM (
    SELECT d.run_id,
      {_sums}
    FROM unnest(r, s, n) AS d(run_id, status, n)
    GROUP BY d.run_id
  ) AS delta
  WHERE t.run_id = delta.run_id;
END;
$$ LANGUAGE plpgsql;
"""


def _statement_function(name: str, deltas: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$
DECLARE
  r bigint[];
  s text[];
  n bigint[];
BEGIN
  SELECT array_agg(d.run_id), array_agg(d.status), array_agg(d.n) INTO r, s, n
  FROM ({deltas}) AS d(run_id, status, n);
  PERFORM srbench_run_summary_apply(r, s, n);
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


# Per (run, status): rows added minus rows removed by the statement. An UPDATE's old and new
# rows are the same cells, so a statement that changes no status (lease renewals, grades)
# nets to nothing and takes no lock.
INSERTED = "SELECT run_id, status, count(*) FROM new_rows GROUP BY run_id, status"
DELETED = "SELECT run_id, status, -count(*) FROM old_rows GROUP BY run_id, status"
UPDATED = (
    "SELECT run_id, status, sum(c) FROM ("
    "SELECT run_id, status, -1 AS c FROM old_rows "
    "UNION ALL SELECT run_id, status, 1 FROM new_rows) x "
    "GROUP BY run_id, status HAVING sum(c) <> 0"
)

RUN_INSERTED = f"""
CREATE OR REPLACE FUNCTION srbench_run_summary_run_insert() RETURNS trigger AS $$
BEGIN
  INSERT INTO runs_runsummary (run_id, {_columns})
  SELECT id, {_zeros} FROM new_rows
  ON CONFLICT (run_id) DO NOTHING;
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""

FORWARD = [
    # No cell or run is written while the triggers are created and the rows backfilled.
    "LOCK TABLE runs_run, runs_cell IN SHARE MODE;",
    APPLY,
    _statement_function("srbench_run_summary_cells_insert", INSERTED),
    _statement_function("srbench_run_summary_cells_update", UPDATED),
    _statement_function("srbench_run_summary_cells_delete", DELETED),
    RUN_INSERTED,
    "CREATE TRIGGER runs_cell_summary_insert AFTER INSERT ON runs_cell "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION srbench_run_summary_cells_insert();",
    # Transition tables exclude a column list (UPDATE OF status): every UPDATE statement
    # fires it, and one that changes no status returns before any lock.
    "CREATE TRIGGER runs_cell_summary_update AFTER UPDATE ON runs_cell "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION srbench_run_summary_cells_update();",
    "CREATE TRIGGER runs_cell_summary_delete AFTER DELETE ON runs_cell "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION srbench_run_summary_cells_delete();",
    "CREATE TRIGGER runs_run_summary_insert AFTER INSERT ON runs_run "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION srbench_run_summary_run_insert();",
    # Backfill: every existing run, counted once under the locks above.
    f"INSERT INTO runs_runsummary (run_id, {_columns}) "
    "SELECT r.id, "
    + ", ".join(f"count(c.id) FILTER (WHERE c.status = '{s}')" for s in STATUSES)
    + " FROM runs_run r LEFT JOIN runs_cell c ON c.run_id = r.id GROUP BY r.id;",
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS runs_cell_summary_insert ON runs_cell;",
    "DROP TRIGGER IF EXISTS runs_cell_summary_update ON runs_cell;",
    "DROP TRIGGER IF EXISTS runs_cell_summary_delete ON runs_cell;",
    "DROP TRIGGER IF EXISTS runs_run_summary_insert ON runs_run;",
    "DROP FUNCTION IF EXISTS srbench_run_summary_cells_insert();",
    "DROP FUNCTION IF EXISTS srbench_run_summary_cells_update();",
    "DROP FUNCTION IF EXISTS srbench_run_summary_cells_delete();",
    "DROP FUNCTION IF EXISTS srbench_run_summary_run_insert();",
    "DROP FUNCTION IF EXISTS srbench_run_summary_apply(bigint[], text[], bigint[]);",
]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0005_target_errors_billed"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunSummary",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="summary",
                        serialize=False,
                        to="runs.run",
                    ),
                ),
                ("pending", models.BigIntegerField(default=0)),
                ("running", models.BigIntegerField(default=0)),
                ("completed", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("cancelled", models.BigIntegerField(default=0)),
                ("sent_unknown", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("pending__gte", 0),
                            ("running__gte", 0),
                            ("completed__gte", 0),
                            ("failed__gte", 0),
                            ("cancelled__gte", 0),
                            ("sent_unknown__gte", 0),
                        ),
                        name="run_summary_counts_not_negative",
                    )
                ],
            },
        ),
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
