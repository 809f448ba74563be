"""The known failures whose cost the accounting rule decides (session 9): a partial index, so a
running run's results read them in a few rows whatever the run's size. Built concurrently: the
calls table of a busy deployment keeps taking writes meanwhile."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0026_stored_recovery_plan"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="call",
            index=models.Index(
                condition=models.Q(
                    ("cost_usd__isnull", True), ("http_status__gte", 400), ("status", "failed")
                ),
                fields=["cell"],
                name="call_http_error_cost_unknown",
            ),
        ),
    ]
