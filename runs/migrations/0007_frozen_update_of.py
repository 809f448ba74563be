"""The frozen-column triggers of runs and calls fire only for an UPDATE that names a frozen
column (srbench.dbguards.frozen_columns_sql): appending events (which updates the run row) and
checkpointing a streaming call no longer compare the manifest or the request (issue 25)."""

from django.db import migrations

from srbench.dbguards import drop_trigger_sql, frozen_columns_sql, run_on_postgres

FROZEN = [
    ("runs_run", ["manifest", "plan_sha256", "dataset_id", "parent_id"], "frozen run manifest"),
    ("runs_call", ["request", "cell_id", "role", "sequence"], "sent request"),
]


def _recreate(any_update: bool) -> list[str]:
    out = []
    for table, columns, why in FROZEN:
        out.append(drop_trigger_sql(table, "frozen"))
        out.append(frozen_columns_sql(table, columns, why, any_update=any_update))
    return out


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_run_summary")]

    operations = [
        migrations.RunPython(run_on_postgres(_recreate(False)), run_on_postgres(_recreate(True))),
    ]
