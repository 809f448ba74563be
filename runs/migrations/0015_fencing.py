"""Fencing in the database (issue 34): a call opened under a cell's claim carries the claim's
token, and triggers refuse every write of a worker that lost its claim — an open call for a
cell not running under that claim or in a terminal run, a settled call reopened, a cell of a
terminal run set running again, evidence for a settled call (srbench.dbguards.fencing_sql)."""

from django.db import migrations, models

from srbench.dbguards import (
    FENCING_FUNCTIONS,
    FENCING_TRIGGERS,
    drop_trigger_sql,
    fencing_sql,
    run_on_postgres,
)

# The terminal statuses as of this migration (runs.models.TERMINAL_RUN_STATUSES).
TERMINAL = ("completed", "failed", "cancelled", "interrupted")

FORWARD = fencing_sql(TERMINAL)
BACKWARD = [
    *[drop_trigger_sql(table, suffix) for table, suffix in FENCING_TRIGGERS],
    *[f"DROP FUNCTION IF EXISTS {name}();" for name in FENCING_FUNCTIONS],
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0014_runevent_recipe_not_captured")]

    operations = [
        migrations.AddField(
            model_name="call",
            name="claim_token",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
