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


class ResampledCostSums(models.Model):
    """One side's resampled cost sums of the savings bootstrap, kept under the address of what
    they are computed from (`compare.bootstrap_memo`): the algorithm's version, draws, seed and
    the side's per-question costs, benchmark by benchmark. The same inputs give the same sums,
    so a row is never stale; it is only what a comparison would draw again (1–2 s at 100,000
    questions). `sums`: one little-endian int64 per draw, in whole 1e-10 USD."""

    key = models.CharField(max_length=64, primary_key=True)
    sums = models.BinaryField()
    computed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"resampled cost sums {self.key[:12]}"


class PlanCases(models.Model):
    """A run's planned cases as a comparison reads them (issue 38 item 5): the frozen
    manifest's case list, which is megabytes of JSON at 100,000 cases, packed once. `digest`:
    the SHA-256 of the cases as a set of (question, content hash, benchmark) — two runs planned
    the same cases exactly when their digests agree, which is how the comparison checks it
    (`compare.compatibility.runs_differences`); `cases`: per case in the manifest's order its
    question (<i8) and the index of its benchmark in `benchmarks` (<i2). The manifest never
    changes, so neither does the row (`compare.plan_cases`). `head`: every other field of the
    manifest (targets, prices, benchmarks, limits…), which a comparison and the Compare page's
    offer read: out of a 7 MB manifest, each key costs the database a detoast of all of it."""

    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="plan_cases"
    )
    digest = models.CharField(max_length=64)
    benchmarks = models.JSONField()
    cases = models.BinaryField()
    head = models.JSONField()
    # The Compare page's offer groups runs by it (`compare.plan_cases.offer_fingerprint`).
    fingerprint = models.CharField(max_length=32, db_index=True)
    # What step 1 of the page reads of the head in SQL, a page at a time (`compare.plan_cases.
    # offer_facts`): the number of targets (null: not computed yet, a row kept before these
    # columns), the single-model slugs in target order, the lowered slugs and models a search
    # matches, and a key of the normalised prices (null when the run prices a model two ways).
    offer_targets = models.IntegerField(null=True)
    offer_singles = models.JSONField(default=list)
    offer_terms = models.JSONField(default=list)
    offer_prices = models.CharField(max_length=64, null=True)

    def __str__(self) -> str:
        return f"planned cases of run {self.run_id}"
