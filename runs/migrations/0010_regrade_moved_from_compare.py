# Issue 24: `Regrade` moves from `compare` to `runs` (beside `UsageCorrection`), state only.
# The table `compare_regrade`, its rows and its append-only trigger stay as
# compare/migrations/0001_initial.py made them; the model keeps that table through
# Meta.db_table. compare/migrations/0003_regrade_moved_to_runs.py then drops the old state.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_cell_running_lease_index"),
        # The table and its trigger are created there; this migration only records the model.
        ("compare", "0002_case_figures"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Regrade",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("version", models.PositiveIntegerField()),
                        ("input_sha256", models.CharField(max_length=64)),
                        ("grader_versions", models.JSONField()),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("regraded_count", models.PositiveIntegerField()),
                        ("changed_count", models.PositiveIntegerField()),
                        ("skipped_count", models.PositiveIntegerField()),
                        ("results", models.JSONField()),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="regrades",
                                to="runs.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "compare_regrade",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "input_sha256"), name="regrade_once_per_input"
                            ),
                            models.UniqueConstraint(
                                fields=("run", "version"), name="regrade_version_once"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("version__gte", 1)),
                                name="regrade_version_positive",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("input_sha256__regex", "^[0-9a-f]{64}$")),
                                name="regrade_input_sha256_hex",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
