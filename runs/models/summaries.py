"""Rows kept beside a run from its ledger: the cell counts by status (`RunSummary`, kept by
triggers) and the settled report (`RunReport`, kept at run end). Derived, never the source of
truth: either can be rebuilt from the cells and calls. `runs/models/__init__.py` imports them so
Django registers them with the `runs` app.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class RunSummary(models.Model):
    """A run's cells counted by status, kept exact by PostgreSQL triggers (R7.1, R10.2).

    What a run poll, a run page or the runs list shows of its cells is read from this one
    row, not counted over the cells: reading it costs the same at 10 cells or 100,000 (issue
    25). Statement-level triggers on `runs_cell` (INSERT, UPDATE, DELETE, with transition
    tables) add each statement's status changes here in the same transaction, so bulk
    `.update()` calls, the reaper, recovery and raw SQL are all counted. Migration 0006
    holds the triggers; a new cell status needs a column here and in them.

    Locking: a trigger locks the run row (FOR NO KEY UPDATE, in run id order) before it
    updates this row, so this row is always taken after its run and adds no new lock order;
    the engine's transactions hold that run row anyway (`events_append`, claims, budget).
    The newest event is read from `runs_runevent`'s (run, seq) index, not kept here.
    """

    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="summary"
    )
    pending = models.BigIntegerField(default=0)
    running = models.BigIntegerField(default=0)
    completed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    cancelled = models.BigIntegerField(default=0)
    sent_unknown = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(pending__gte=0)
                & Q(running__gte=0)
                & Q(completed__gte=0)
                & Q(failed__gte=0)
                & Q(cancelled__gte=0)
                & Q(sent_unknown__gte=0),
                name="run_summary_counts_not_negative",
            )
        ]

    @property
    def total(self) -> int:
        return (
            self.pending
            + self.running
            + self.completed
            + self.failed
            + self.cancelled
            + self.sent_unknown
        )


class RunReport(models.Model):
    """A settled run's report, computed once per state of its ledger and kept (issue 25).

    `fingerprint` names the ledger state and the report code it was computed from
    (`runs.reporting.report.run_report_settled`): a regrade-free settled run's report never changes, so
    pages, the API and comparisons read this row instead of recomputing. The runs list sorts
    and shows its summary columns: the best target's score and kind, the run's known spend and
    whether its spend and results are complete. The report is kept as JSON text, so its key
    order — what pages show first — is exactly what was computed.
    """

    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="stored_report"
    )
    fingerprint = models.CharField(max_length=64)
    computed_at = models.DateTimeField(auto_now=True)
    report_json = models.TextField()
    score = models.FloatField(null=True, blank=True)
    score_kind = models.CharField(max_length=16, default="none")
    score_target = models.CharField(max_length=64, blank=True)
    known_spend_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    spend_complete = models.BooleanField(default=False)
    complete = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["score"], name="runreport_score"),
            models.Index(fields=["known_spend_usd"], name="runreport_spend"),
        ]


class StoredRecoveryPlan(models.Model):
    """A reviewed recovery plan (R15), computed once per state of its parent's ledger and mode
    and read back for every later page of it (fourth outside probe: a 100,000-cell plan took
    3.5–4.4 s to compute, and `benchmark recover-plan` recomputed it for each page of 100).

    `fingerprint` names the state it was computed from (`runs.settlement.recovery_store`):
    the settled run's fingerprint, the parent's recovery claims and the plan code's version.
    A row under another fingerprint is stale and never read; it is replaced by the next
    computation. One row per (run, mode): the newest state only. Derived: deleting it costs
    one computation, nothing else. A submission never reads it — it recomputes the plan under
    the parent's lock and checks the reviewed hash (`recovery_submit`).

    This row holds the plan without its per-cell lists (`summary_json`: a few KB whatever the
    run's size, with the counts a page states over the whole plan); the lists are its
    `StoredRecoveryPlanChunk` rows, so a page reads O(page) rows, not the whole plan (a plan
    of 100,000 cells is ~25 MB of JSON: 0.4–0.6 s a page read whole). A row is never updated:
    a new state is a new row (new id), so chunks read by a plan's id are that plan's.
    """

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    mode = models.CharField(max_length=16)
    fingerprint = models.CharField(max_length=64)
    computed_at = models.DateTimeField(auto_now=True)
    summary_json = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "mode"], name="stored_recovery_plan_run_mode")
        ]


class StoredRecoveryPlanChunk(models.Model):
    """Up to `recovery_store.CHUNK_CELLS` consecutive items of one list of a kept plan
    (`plan_list`: the plan's key, "eligible_cells" or "excluded"), ascending by cell id as the
    plan lists them, `seq` 0, 1, … from the list's start. A page after cell X is the first
    chunks whose `last_cell` > X (a keyset read on the unique index below); the page-numbered
    recovery page reads chunk `offset // CHUNK_CELLS` on the other. Text, not jsonb: the items
    are served with their keys in the order the plan computed them."""

    plan = models.ForeignKey(StoredRecoveryPlan, on_delete=models.CASCADE, related_name="+")
    plan_list = models.CharField(max_length=16)
    seq = models.IntegerField()
    last_cell = models.BigIntegerField()
    items_json = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "plan_list", "last_cell"], name="recovery_chunk_last_cell"
            ),
            models.UniqueConstraint(fields=["plan", "plan_list", "seq"], name="recovery_chunk_seq"),
        ]
