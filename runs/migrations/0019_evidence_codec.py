"""Call evidence names its codec (issue 38 item 5, runs/evidence.py). Every row written before
this column existed is zlib: the default fills them in without rewriting a byte, so they read
back as they did."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0018_target_api_call_reasoning")]

    operations = [
        migrations.AddField(
            model_name="callevidence",
            name="codec",
            field=models.CharField(
                choices=[("zlib", "Zlib"), ("identity", "Identity")],
                default="zlib",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="callevidence",
            constraint=models.CheckConstraint(
                condition=models.Q(("codec__in", ("zlib", "identity"))),
                name="evidence_codec_known",
            ),
        ),
    ]
