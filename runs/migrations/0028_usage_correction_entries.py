"""A usage correction's per-call entries as rows (runs/models/correction_entries.py): a page of
calls reads its own entries by index instead of expanding the whole correction's JSON. The
rows of every existing correction are filled from its JSON, as the reconcile writes them."""

import django.db.models.deletion
from django.db import migrations, models

from srbench.dbguards import append_only_sql, drop_trigger_sql, run_on_postgres

TABLE = "runs_usagecorrectionentry"
COLUMNS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "cache_neutral_cost_usd",
    "outcome",
    "reason",
)
RECORD = (
    'x("call_id" bigint, "input_tokens" bigint, "cached_input_tokens" bigint, '
    '"cache_write_tokens" bigint, "output_tokens" bigint, "cost_usd" numeric, '
    '"cache_neutral_cost_usd" numeric, "outcome" text, "reason" text)'
)


def _insert(source: str) -> str:
    """The entries of the corrections ``source`` names (``uc``), from their JSON."""
    return (
        f"INSERT INTO {TABLE} (correction_id, call_id, {', '.join(COLUMNS)}) "
        f"SELECT uc.id, x.call_id, {', '.join('x.' + c for c in COLUMNS)} FROM {source} "
        f"CROSS JOIN LATERAL jsonb_to_recordset(uc.corrections -> 'calls') AS {RECORD}"
    )


# Written by the database as each correction is inserted, in its statement: whoever appends a
# correction (the reconcile, a fixture, a bench) gets its rows, and they cannot drift from it.
FORWARD = [
    append_only_sql(TABLE),
    "CREATE FUNCTION runs_usagecorrection_entries() RETURNS trigger LANGUAGE plpgsql AS $$ "
    f"BEGIN {_insert('(SELECT NEW.id AS id, NEW.corrections AS corrections) uc')}; "
    "RETURN NULL; END $$;",
    "CREATE TRIGGER runs_usagecorrection_entries AFTER INSERT ON runs_usagecorrection "
    "FOR EACH ROW EXECUTE FUNCTION runs_usagecorrection_entries();",
    _insert("runs_usagecorrection uc"),
]
BACKWARD = [
    drop_trigger_sql("runs_usagecorrection", "entries"),
    "DROP FUNCTION IF EXISTS runs_usagecorrection_entries();",
    drop_trigger_sql(TABLE, "append_only"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0027_call_http_error_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageCorrectionEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("input_tokens", models.BigIntegerField(null=True)),
                ("cached_input_tokens", models.BigIntegerField(null=True)),
                ("cache_write_tokens", models.BigIntegerField(null=True)),
                ("output_tokens", models.BigIntegerField(null=True)),
                ("cost_usd", models.DecimalField(decimal_places=18, max_digits=40, null=True)),
                (
                    "cache_neutral_cost_usd",
                    models.DecimalField(decimal_places=18, max_digits=40, null=True),
                ),
                ("outcome", models.CharField(max_length=16, null=True)),
                ("reason", models.TextField(null=True)),
                (
                    "call",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="runs.call",
                    ),
                ),
                (
                    "correction",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="entries",
                        to="runs.usagecorrection",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("call", "correction"), name="correction_entry_once"
                    )
                ],
            },
        ),
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
