"""A target's preflight and its own calls (issue 39, runs/models_preflight.py): a new pair of
tables beside the registry; no existing table changes."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_exact_money"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="TargetPreflight",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("idempotency_key", models.CharField(blank=True, max_length=200)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("running", "Running"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                        ],
                        default="running",
                        max_length=10,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("base_url", models.URLField(max_length=500)),
                ("model", models.CharField(max_length=200)),
                ("planned_calls", models.PositiveSmallIntegerField()),
                (
                    "worst_case_usd",
                    models.DecimalField(blank=True, decimal_places=18, max_digits=40, null=True),
                ),
                (
                    "cost_usd",
                    models.DecimalField(blank=True, decimal_places=18, max_digits=40, null=True),
                ),
                (
                    "known_cost_usd",
                    models.DecimalField(decimal_places=18, default=0, max_digits=40),
                ),
                ("stream_usage", models.BooleanField(blank=True, null=True)),
                ("plain_usage", models.BooleanField(blank=True, null=True)),
                ("cached_fields", models.BooleanField(blank=True, null=True)),
                ("max_whole_streams", models.PositiveIntegerField(blank=True, null=True)),
                ("cuts_at", models.PositiveIntegerField(blank=True, null=True)),
                ("served_model", models.CharField(blank=True, max_length=200)),
                ("served_model_priced", models.BooleanField(blank=True, null=True)),
                ("length_finish_reason", models.CharField(blank=True, max_length=32)),
                ("context_tokens", models.PositiveIntegerField(blank=True, null=True)),
                ("context_source", models.CharField(blank=True, max_length=200)),
                ("findings", models.JSONField(blank=True, default=list)),
                ("error", models.TextField(blank=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "target",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="preflights",
                        to="runs.target",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="PreflightCall",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sequence", models.PositiveSmallIntegerField()),
                ("purpose", models.CharField(max_length=40)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("sent", "Sent"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                        ],
                        default="sent",
                        max_length=10,
                    ),
                ),
                ("stream", models.BooleanField()),
                ("request", models.JSONField()),
                (
                    "worst_case_usd",
                    models.DecimalField(blank=True, decimal_places=18, max_digits=40, null=True),
                ),
                ("http_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("served_model", models.CharField(blank=True, max_length=200)),
                ("finish_reason", models.CharField(blank=True, max_length=32)),
                ("saw_done", models.BooleanField(blank=True, null=True)),
                ("usage_raw", models.JSONField(blank=True, null=True)),
                ("input_tokens", models.BigIntegerField(blank=True, null=True)),
                ("cached_input_tokens", models.BigIntegerField(blank=True, null=True)),
                ("cache_write_tokens", models.BigIntegerField(blank=True, null=True)),
                ("output_tokens", models.BigIntegerField(blank=True, null=True)),
                (
                    "cost_usd",
                    models.DecimalField(blank=True, decimal_places=18, max_digits=40, null=True),
                ),
                ("cost_note", models.CharField(blank=True, max_length=200)),
                ("content", models.TextField(blank=True)),
                ("error", models.TextField(blank=True)),
                ("sent_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "preflight",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="calls",
                        to="runs.targetpreflight",
                    ),
                ),
            ],
            options={
                "ordering": ["preflight", "sequence"],
            },
        ),
        migrations.AddIndex(
            model_name="targetpreflight",
            index=models.Index(fields=["target", "-created_at"], name="preflight_target_latest"),
        ),
        migrations.AddConstraint(
            model_name="targetpreflight",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["running", "completed", "failed"])),
                name="preflight_status_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="targetpreflight",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "running")),
                fields=("target",),
                name="preflight_one_running_per_target",
            ),
        ),
        migrations.AddConstraint(
            model_name="targetpreflight",
            constraint=models.UniqueConstraint(
                condition=models.Q(("idempotency_key", ""), _negated=True),
                fields=("target", "idempotency_key"),
                name="preflight_idempotency_key_once",
            ),
        ),
        migrations.AddConstraint(
            model_name="preflightcall",
            constraint=models.UniqueConstraint(
                fields=("preflight", "sequence"), name="preflight_call_unique_sequence"
            ),
        ),
        migrations.AddConstraint(
            model_name="preflightcall",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["sent", "completed", "failed"])),
                name="preflight_call_status_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="preflightcall",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("cost_usd__isnull", True), ("output_tokens__isnull", False), _connector="OR"
                ),
                name="preflight_call_cost_needs_usage",
            ),
        ),
        migrations.AddConstraint(
            model_name="preflightcall",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("cost_usd__isnull", True), ("cost_usd__gte", 0), _connector="OR"
                ),
                name="preflight_call_cost_not_negative",
            ),
        ),
    ]
