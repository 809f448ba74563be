"""The frozen-column triggers fire only for an UPDATE that names a frozen column
(srbench.dbguards.frozen_columns_sql)."""

from django.db import migrations

from srbench.dbguards import drop_trigger_sql, frozen_columns_sql, run_on_postgres

FROZEN = [
    (
        "datasets_question",
        ["benchmark", "native_id", "payload", "content_sha256"],
        "content-addressed question",
    ),
    ("datasets_questionsecret", ["data"], "content-addressed question"),
    (
        "datasets_source",
        ["benchmark", "profile", "seed", "split", "content_sha256", "count"],
        "prepared source",
    ),
    ("datasets_frozendataset", ["identity_sha256", "selection"], "frozen dataset"),
]


def _recreate(any_update: bool) -> list[str]:
    out = []
    for table, columns, why in FROZEN:
        out.append(drop_trigger_sql(table, "frozen"))
        out.append(frozen_columns_sql(table, columns, why, any_update=any_update))
    return out


class Migration(migrations.Migration):
    dependencies = [("datasets", "0002_frozen_triggers")]

    operations = [
        migrations.RunPython(run_on_postgres(_recreate(False)), run_on_postgres(_recreate(True))),
    ]
