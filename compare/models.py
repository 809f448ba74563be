"""Artefacts a comparison derives from settled runs.

The regrade record that lived here moved beside `UsageCorrection` in `runs` (issue 24):
`runs.models.regrade.Regrade`.
"""

from __future__ import annotations

from django.db import models


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


class SavingsIntervalMemo(models.Model):
    """One candidate's subject-savings bootstrap interval, kept under the address of what it
    was computed from (`compare.bootstrap_memo`): the algorithm's version, draws, seed, α and
    the per-question costs of both sides, benchmark by benchmark. The same inputs give the same
    interval, so a row is never stale; it is only the answer a comparison would compute again
    (1–2 s at 100,000 cases, most of it the generator's draws). Null bounds: the interval is
    unknown for those inputs (a resample whose baseline cost sums to zero)."""

    key = models.CharField(max_length=64, primary_key=True)
    lower = models.FloatField(null=True)
    upper = models.FloatField(null=True)
    computed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"savings interval {self.key[:12]}"
