"""A kept recovery plan in a small summary row and chunks of its per-cell lists, so a page reads
O(page) rows (runs/settlement/recovery_store.py). The plans kept whole are derived and named by
the code's version: they are dropped (the next review computes each afresh)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0029_preflight_call_error_unbilled"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="storedrecoveryplan",
            name="plan_json",
        ),
        # Emptied after the old column goes and before the new one comes, both ways: the
        # column added back going backwards is NOT NULL too.
        migrations.RunSQL(
            "DELETE FROM runs_storedrecoveryplan",
            reverse_sql="DELETE FROM runs_storedrecoveryplan",
        ),
        migrations.AddField(
            model_name="storedrecoveryplan",
            name="summary_json",
            field=models.TextField(default="{}"),
            preserve_default=False,
        ),
        migrations.CreateModel(
            name="StoredRecoveryPlanChunk",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("plan_list", models.CharField(max_length=16)),
                ("seq", models.IntegerField()),
                ("last_cell", models.BigIntegerField()),
                ("items_json", models.TextField()),
                (
                    "plan",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.storedrecoveryplan",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("plan", "plan_list", "last_cell"), name="recovery_chunk_last_cell"
                    ),
                    models.UniqueConstraint(
                        fields=("plan", "plan_list", "seq"), name="recovery_chunk_seq"
                    ),
                ],
            },
        ),
    ]
