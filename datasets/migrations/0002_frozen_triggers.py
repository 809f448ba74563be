from django.db import migrations

from srbench.dbguards import FUNCTION_SQL, drop_trigger_sql, frozen_columns_sql, run_on_postgres

FORWARD = [
    FUNCTION_SQL,
    frozen_columns_sql(
        "datasets_question",
        ["benchmark", "native_id", "payload", "content_sha256"],
        "content-addressed question",
    ),
    frozen_columns_sql("datasets_questionsecret", ["data"], "content-addressed question"),
    frozen_columns_sql(
        "datasets_source",
        ["benchmark", "profile", "seed", "split", "content_sha256", "count"],
        "prepared source",
    ),
    frozen_columns_sql(
        "datasets_frozendataset", ["identity_sha256", "selection"], "frozen dataset"
    ),
]
BACKWARD = [
    drop_trigger_sql("datasets_question", "frozen"),
    drop_trigger_sql("datasets_questionsecret", "frozen"),
    drop_trigger_sql("datasets_source", "frozen"),
    drop_trigger_sql("datasets_frozendataset", "frozen"),
]


class Migration(migrations.Migration):
    dependencies = [("datasets", "0001_initial")]

    operations = [
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
