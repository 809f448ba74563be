"""Artefacts derived from saved evidence without any model call (R14.4).

A regrade is append-only and versioned like a usage correction: it never changes a Cell, and
running it again on the same answers with the same graders returns the same regrade.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from srbench.ledger import HEX64_REGEX, AppendOnlyModel


class Regrade(AppendOnlyModel):
    """The current grader's verdict on a run's saved final answers (mcq and grid only)."""

    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="regrades")
    version = models.PositiveIntegerField()
    # sha256 over the graded cells' answers and the grader versions: the idempotency key.
    input_sha256 = models.CharField(max_length=64)
    grader_versions = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    regraded_count = models.PositiveIntegerField()
    changed_count = models.PositiveIntegerField()
    skipped_count = models.PositiveIntegerField()
    results = models.JSONField()

    class Meta:
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


class CaseFigures(models.Model):
    """A settled run's per-cell figures, as a comparison pairs them (issue 25).

    One row per run: each cell's target, question, slot, status, outcome and effective
    subject cost (NaN when unknown), packed as a numpy record array (`compare.figures`). It is
    computed once per ledger state — `fingerprint` is the run's stored-report key, which a
    usage correction or any other change to a settled run replaces — so a comparison reads
    twenty-one small rows instead of every cell and call of its runs.
    """

    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="case_figures"
    )
    fingerprint = models.CharField(max_length=64)
    computed_at = models.DateTimeField(auto_now=True)
    cells = models.BinaryField()

    def __str__(self) -> str:
        return f"case figures of run {self.run_id}"
