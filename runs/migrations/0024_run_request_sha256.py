"""A run keeps the hash of its creation request as the client sent it, so a resend with the
same idempotency key is compared with what was sent, not with a fresh freeze of the plan (which
a target check finished in between moves). Older runs keep "" and the fresh-freeze comparison."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0023_recovery_request_judge_only"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="request_sha256",
            field=models.CharField(blank=True, default="", editable=False, max_length=64),
        ),
    ]
