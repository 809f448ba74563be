"""Call evidence names its codec (issue 38 item 5, runs/evidence.py). Every row written before
this column existed is zlib: the default fills them in without rewriting a byte, so they read
back as they did. The default stays in the database (`db_default`): a worker still on the code
before this column (a rolling upgrade) writes zlib evidence without naming a codec, and its rows
must be stored and read as zlib, not refused."""

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
                db_default="zlib",
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
