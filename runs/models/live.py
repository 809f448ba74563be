"""A running run's Results sums, kept exact by PostgreSQL triggers (issue 25, R1, R7.1).

The Results tab of a run still running showed the full report, recomputed over every cell and
call on each view (715 ms at 100,000 calls). What that tab shows of a running run is sums —
cells by status, correct and scored per (run, target, benchmark), call counts, tokens and
costs per (run, target, role) — so statement-level triggers keep those sums here in the
transaction that writes the cells and calls, like `RunSummary` (migration 0006): bulk
`.update()` calls, the reaper, recovery and raw SQL are all counted. Migration 0011 holds
the triggers: each statement queues its delta, and the transaction's deltas are added here when
it commits, in key order, without locking the run row (why: the migration's docstring). Unknown stays unknown: every sum has beside it how many of its rows were known,
so a sum over no known value is None, never 0, and "cost unknown for k calls" is exact.

What is not a sum (latency and TTFT percentiles, a MoM target's routing counts) is kept in
`LiveSnapshot`, recomputed at most every `runs.reporting.live_report.SNAPSHOT_SECONDS` and shown with
its time. An ended run's Results read its stored report (`RunReport`), as before: these rows
serve only the running run's page.

It lives in its own module only to keep `runs/models.py` small; `runs/models.py` imports it
so Django registers it with the `runs` app.
"""

from __future__ import annotations

from django.db import models

CELL_SUM_FIELDS = (
    "pending",
    "running",
    "completed",
    "failed",
    "cancelled",
    "sent_unknown",
    "correct",
    "scored",
    "subject_cells",
)
# Per bucket/money column of a call: its sum and how many calls it was known for.
CALL_SUMMED = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "cache_neutral_cost_usd",
    "duration_ms",
)


class LiveCellSums(models.Model):
    """Per (run, target, benchmark): cells by status, correct and scored cells, and the cells
    with at least one subject call (what the report's "planned cells have no subject call"
    counts). Planned is the sum of the six statuses."""

    # No database constraint: a constraint check would take a share lock on the run row at
    # commit, which is what the sums are applied without (migration 0011).
    run = models.ForeignKey(
        "runs.Run", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    target = models.ForeignKey(
        "runs.Target", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    benchmark = models.CharField(max_length=40)
    pending = models.BigIntegerField(default=0)
    running = models.BigIntegerField(default=0)
    completed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    cancelled = models.BigIntegerField(default=0)
    sent_unknown = models.BigIntegerField(default=0)
    correct = models.BigIntegerField(default=0)
    scored = models.BigIntegerField(default=0)
    subject_cells = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "target", "benchmark"], name="live_cell_sums_key"
            )
        ]


class LiveCallSums(models.Model):
    """Per (run, target of the cell, role, waste): calls, and per usage bucket, cost and
    duration the sum over the calls where it is known and how many those are. ``waste`` is a
    failed or unknown-outcome call (`runs.reporting.effective.WASTE_CALL_STATUSES`)."""

    # No database constraint: a constraint check would take a share lock on the run row at
    # commit, which is what the sums are applied without (migration 0011).
    run = models.ForeignKey(
        "runs.Run", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    target = models.ForeignKey(
        "runs.Target", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    role = models.CharField(max_length=10)
    waste = models.BooleanField()
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    input_tokens_known = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens_known = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cache_write_tokens_known = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    output_tokens_known = models.BigIntegerField(default=0)
    # Unbounded numerics: a sum of the ledger's exact costs, never rounded.
    cost_usd = models.DecimalField(max_digits=40, decimal_places=18, default=0)
    cost_usd_known = models.BigIntegerField(default=0)
    cache_neutral_cost_usd = models.DecimalField(max_digits=40, decimal_places=18, default=0)
    cache_neutral_cost_usd_known = models.BigIntegerField(default=0)
    duration_ms = models.DecimalField(max_digits=50, decimal_places=20, default=0)
    duration_ms_known = models.BigIntegerField(default=0)
    # The calls whose cost notes say each of `runs.reporting.effective.NOTE_COUNTS` (migration
    # 0025): a running run's report counts the gateway's notes as they land. A database default
    # too: a statement written before them (migration 0011's backfill) counts none.
    no_stream_usage = models.BigIntegerField(default=0, db_default=0)
    usage_estimated = models.BigIntegerField(default=0, db_default=0)
    gateway_resent = models.BigIntegerField(default=0, db_default=0)
    gateway_answered = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "target", "role", "waste"], name="live_call_sums_key"
            )
        ]


class LiveSnapshot(models.Model):
    """A running run's figures that are not sums, as of ``computed_at``: per target id its
    timing percentiles and a MoM target's routing counts (`runs.reporting.live_report`)."""

    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    computed_at = models.DateTimeField()
    figures = models.JSONField()
