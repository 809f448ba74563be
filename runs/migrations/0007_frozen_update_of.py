"""The frozen-column triggers of runs and calls fire only for an UPDATE that names a frozen
column (srbench.dbguards.frozen_columns_sql): appending events (which updates the run row) and
checkpointing a streaming call no longer compare the manifest or the request (issue 25)."""

from django.db import migrations

from srbench.dbguards import frozen_columns_recreate_sql, run_on_postgres

FROZEN = [
    ("runs_run", ["manifest", "plan_sha256", "dataset_id", "parent_id"], "frozen run manifest"),
    ("runs_call", ["request", "cell_id", "role", "sequence"], "sent request"),
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_run_summary")]

    operations = [
        migrations.RunPython(
            run_on_postgres(frozen_columns_recreate_sql(FROZEN, any_update=False)),
            run_on_postgres(frozen_columns_recreate_sql(FROZEN, any_update=True)),
        ),
    ]
