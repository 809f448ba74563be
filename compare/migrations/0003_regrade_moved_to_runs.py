# Issue 24: `Regrade` now lives in `runs` (runs/migrations/0010_regrade_moved_from_compare.py
# records it there). This drops only compare's state of the model: the table `compare_regrade`,
# its rows and its append-only trigger belong to runs.Regrade from now on (Meta.db_table).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("compare", "0002_case_figures"),
        ("runs", "0010_regrade_moved_from_compare"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Regrade")],
            database_operations=[],
        ),
    ]
