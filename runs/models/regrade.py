"""The regrade record (R14.4), beside `UsageCorrection` in the run ledger (issue 24).

A regrade is append-only and versioned like a usage correction: it never changes a Cell, and
running it again on the same answers with the same graders returns the same regrade. It lives
in its own module only to keep `runs/models.py` small; `runs/models.py` imports it so Django
registers it with the `runs` app.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from runs.models.fields import StoredJSONField
from srbench.ledger import HEX64_REGEX, AppendOnlyModel


class Regrade(AppendOnlyModel):
    """The current grader's verdict on a run's saved final answers."""

    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="regrades")
    version = models.PositiveIntegerField()
    # sha256 over the graded cells' answers and the grader versions: the idempotency key.
    input_sha256 = models.CharField(max_length=64)
    grader_versions = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    regraded_count = models.PositiveIntegerField()
    changed_count = models.PositiveIntegerField()
    skipped_count = models.PositiveIntegerField()
    results = StoredJSONField()

    class Meta:
        # The model moved from `compare` to `runs` (issue 24) as a state-only move: the table
        # keeps the name it was created with, so its rows and its append-only trigger
        # (compare/migrations/0001_initial.py) stay untouched on every existing database.
        db_table = "compare_regrade"
        constraints = [
            models.UniqueConstraint(fields=["run", "input_sha256"], name="regrade_once_per_input"),
            models.UniqueConstraint(fields=["run", "version"], name="regrade_version_once"),
            models.CheckConstraint(condition=Q(version__gte=1), name="regrade_version_positive"),
            models.CheckConstraint(
                condition=Q(input_sha256__regex=HEX64_REGEX), name="regrade_input_sha256_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"regrade v{self.version} of run {self.run_id}"
