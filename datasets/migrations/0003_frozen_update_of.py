"""The frozen-column triggers fire only for an UPDATE that names a frozen column
(srbench.dbguards.frozen_columns_sql)."""

from django.db import migrations

from srbench.dbguards import frozen_columns_recreate_sql, run_on_postgres

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


class Migration(migrations.Migration):
    dependencies = [("datasets", "0002_frozen_triggers")]

    operations = [
        migrations.RunPython(
            run_on_postgres(frozen_columns_recreate_sql(FROZEN, any_update=False)),
            run_on_postgres(frozen_columns_recreate_sql(FROZEN, any_update=True)),
        ),
    ]
