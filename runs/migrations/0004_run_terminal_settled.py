from django.db import migrations

from srbench.dbguards import drop_trigger_sql, run_on_postgres, terminal_run_settled_sql

# The terminal statuses as of this migration (runs.models.TERMINAL_RUN_STATUSES).
TERMINAL = ("completed", "failed", "cancelled", "interrupted")

FORWARD = terminal_run_settled_sql(TERMINAL)
BACKWARD = [
    drop_trigger_sql("runs_run", "terminal_settled"),
    drop_trigger_sql("runs_run", "terminal_settled_on_insert"),
    "DROP FUNCTION IF EXISTS srbench_run_terminal_settled();",
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_engine_fields")]

    operations = [
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
