"""A preflight call's stored verdict of `known_failure_unbilled` (runs/models/preflight.py). Rows
settled since the rule applied say it in their note ("; counted as $0 (…)", written by that
rule alone): they get the verdict, so their page shows the 0 their preflight's total counted."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0028_usage_correction_entries"),
    ]

    operations = [
        migrations.AddField(
            model_name="preflightcall",
            name="error_unbilled",
            field=models.BooleanField(default=False),
        ),
        migrations.RunSQL(
            "UPDATE runs_preflightcall SET error_unbilled = true "
            "WHERE cost_usd IS NULL AND cost_note LIKE '%%; counted as $0 (%%'",
            migrations.RunSQL.noop,
        ),
    ]
