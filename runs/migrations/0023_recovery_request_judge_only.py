"""A recovery request stores a judge-only recovery as ``judge_only`` (issue 34's third mode),
no longer as ``undispatched``: since judge-only also re-sends a judge call that failed at no
cost, "undispatched" was not true of it. Rows written before are corrected from their child's
manifest, which always said the mode."""

from typing import Any

from django.conf import settings
from django.db import migrations, models

MODES = ("undispatched", "failed", "judge_only")


def judge_only_rows_named(apps: Any, schema_editor: Any) -> None:
    RecoveryRequest = apps.get_model("runs", "RecoveryRequest")
    for request in RecoveryRequest.objects.filter(mode="undispatched").select_related("child"):
        recovery = (request.child.manifest or {}).get("recovery") if request.child else None
        if isinstance(recovery, dict) and recovery.get("mode") == "judge_only":
            request.mode = "judge_only"
            request.save(update_fields=["mode"])


def judge_only_rows_as_before(apps: Any, schema_editor: Any) -> None:
    RecoveryRequest = apps.get_model("runs", "RecoveryRequest")
    RecoveryRequest.objects.filter(mode="judge_only").update(mode="undispatched")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0022_stored_router_names"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="recoveryrequest", name="recovery_mode_known"),
        migrations.RemoveConstraint(model_name="recoveryrequest", name="recovery_failed_needs_ack"),
        migrations.AlterField(
            model_name="recoveryrequest",
            name="mode",
            field=models.CharField(
                choices=[
                    ("undispatched", "Undispatched"),
                    ("failed", "Failed"),
                    ("judge_only", "Judge Only"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(judge_only_rows_named, judge_only_rows_as_before),
        migrations.AddConstraint(
            model_name="recoveryrequest",
            constraint=models.CheckConstraint(
                condition=models.Q(("mode__in", MODES)), name="recovery_mode_known"
            ),
        ),
        migrations.AddConstraint(
            model_name="recoveryrequest",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("mode", "failed"), _negated=True),
                    ("acknowledged_new_attempt", True),
                    _connector="OR",
                ),
                name="recovery_failed_needs_ack",
            ),
        ),
    ]
