"""A usage correction's per-call entries as rows (session 9, helper rc): the index of a
correction's ``corrections["calls"]`` by call.

A correction's JSON holds every corrected call of the run; a page of 100 calls that read its
own entries from it expanded the whole document (10,000 entries) once per call of the page:
2 s a page. The database writes the rows from the JSON as the correction is inserted (a
trigger, runs/migrations/0028_usage_correction_entries.py), so they cannot drift from it, and
they are append-only like it; `runs.reporting.effective._effective_calls_sql` (the one rule
every reader sums) reads them. The JSON stays the correction's document.
"""

from __future__ import annotations

from django.db import models

from srbench.ledger import AppendOnlyModel


class UsageCorrectionEntry(AppendOnlyModel):
    """One call's corrected usage in one correction (null: unknown, as in the JSON)."""

    correction = models.ForeignKey(
        "runs.UsageCorrection", on_delete=models.PROTECT, related_name="entries"
    )
    call = models.ForeignKey("runs.Call", on_delete=models.PROTECT, related_name="+")
    input_tokens = models.BigIntegerField(null=True)
    cached_input_tokens = models.BigIntegerField(null=True)
    cache_write_tokens = models.BigIntegerField(null=True)
    output_tokens = models.BigIntegerField(null=True)
    cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True)
    cache_neutral_cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True)
    outcome = models.CharField(max_length=16, null=True)
    reason = models.TextField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["call", "correction"], name="correction_entry_once"),
        ]
