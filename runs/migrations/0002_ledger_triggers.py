from django.db import migrations

from srbench.dbguards import (
    FUNCTION_SQL,
    append_only_sql,
    drop_trigger_sql,
    frozen_columns_sql,
    run_on_postgres,
)

APPEND_ONLY = ["runs_callevidence", "runs_runevent", "runs_usagecorrection"]

FORWARD = [
    FUNCTION_SQL,
    *[append_only_sql(t) for t in APPEND_ONLY],
    frozen_columns_sql(
        "runs_run", ["manifest", "plan_sha256", "dataset_id", "parent_id"], "frozen run manifest"
    ),
    # A finished call is what was paid for; its outcome and usage never change in place
    # (corrections are appended separately, R2.2).
    "CREATE TRIGGER runs_call_finished BEFORE UPDATE ON runs_call FOR EACH ROW "
    "WHEN (OLD.status IN ('completed', 'failed', 'cancelled') AND ("
    "OLD.status IS DISTINCT FROM NEW.status OR OLD.usage_raw IS DISTINCT FROM NEW.usage_raw "
    "OR OLD.cost_usd IS DISTINCT FROM NEW.cost_usd OR OLD.content IS DISTINCT FROM NEW.content "
    "OR OLD.input_tokens IS DISTINCT FROM NEW.input_tokens "
    "OR OLD.output_tokens IS DISTINCT FROM NEW.output_tokens)) "
    "EXECUTE FUNCTION srbench_refuse_change('finished call');",
    frozen_columns_sql("runs_call", ["request", "cell_id", "role", "sequence"], "sent request"),
]
BACKWARD = [
    *[drop_trigger_sql(t, "append_only") for t in APPEND_ONLY],
    drop_trigger_sql("runs_run", "frozen"),
    drop_trigger_sql("runs_call", "finished"),
    drop_trigger_sql("runs_call", "frozen"),
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial"), ("datasets", "0001_initial")]

    operations = [
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
