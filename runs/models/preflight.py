"""A target's preflight and its own calls (issue 39), beside `Target` in the registry.

A preflight is a handful of tiny model calls that find a server's quirks before a run pays for
them: whether a stream carries usage, cached-token fields, whether a second request cuts the
stream in progress (and up to what concurrency streams stay whole), the served model against the
registered price keys, the finish_reason of a max_tokens cut and the largest prompt accepted.

Its calls are not `Call` rows: a `Call` belongs to a cell of a run (a non-null foreign key, a
unique sequence per cell and role), and every report, comparison, live sum and recovery reads
calls through runs. A preflight is not a run, so its calls are kept here, with the same
discipline: each row is committed with status `sent` before its request leaves and is never
sent again, and it keeps its usage, buckets and cost (unknown stays null, never 0)
(docs/decisions.md "Where a preflight's calls are kept"). Lives in its own module to keep
`runs/models.py` within its size; `runs.apps.RunsConfig.import_models` imports it so Django
registers it with `runs` while the app registry loads.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from runs.models.fields import StoredCharField, StoredJSONField, StoredTextField


class PreflightStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class TargetPreflight(models.Model):
    """One preflight of a target: its quote, its findings in words and the facts a plan reads."""

    target = models.ForeignKey("runs.Target", on_delete=models.PROTECT, related_name="preflights")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    idempotency_key = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=10, choices=PreflightStatus, default=PreflightStatus.RUNNING
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # What the target looked like when it was checked (a later edit makes the preflight stale).
    base_url = models.URLField(max_length=500)
    model = models.CharField(max_length=200)
    # The quote, stated before the first call: the calls it may send and their worst case
    # (`runs.ledger.accounting.worst_case_call_cost`); null when a price is missing.
    planned_calls = models.PositiveSmallIntegerField()
    worst_case_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    # What it spent: null when any call's cost is unknown; the known part beside it.
    cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    known_cost_usd = models.DecimalField(max_digits=40, decimal_places=18, default=0)
    # The facts a plan review reads; null = not found out.
    stream_usage = models.BooleanField(null=True, blank=True)
    plain_usage = models.BooleanField(null=True, blank=True)
    cached_fields = models.BooleanField(null=True, blank=True)
    max_whole_streams = models.PositiveIntegerField(null=True, blank=True)
    cuts_at = models.PositiveIntegerField(null=True, blank=True)
    served_model = StoredCharField(max_length=200, blank=True)
    served_model_priced = models.BooleanField(null=True, blank=True)
    length_finish_reason = StoredCharField(max_length=32, blank=True)
    context_tokens = models.PositiveIntegerField(null=True, blank=True)
    context_source = StoredCharField(max_length=200, blank=True)
    # [{"key", "verdict": ok | quirk | unknown, "observed", "effect"}] in the order checked.
    findings = StoredJSONField(default=list, blank=True)
    error = StoredTextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["target", "-created_at"], name="preflight_target_latest")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=PreflightStatus.values), name="preflight_status_known"
            ),
            # One preflight of a target at a time: the concurrency probe of a second one would
            # cut the first one's streams.
            models.UniqueConstraint(
                fields=["target"],
                condition=Q(status=PreflightStatus.RUNNING),
                name="preflight_one_running_per_target",
            ),
            models.UniqueConstraint(
                fields=["target", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="preflight_idempotency_key_once",
            ),
        ]

    def __str__(self) -> str:
        return f"preflight {self.pk} of {self.target_id}"


class PreflightCallStatus(models.TextChoices):
    SENT = "sent"  # committed before the request left; still so = outcome unknown
    COMPLETED = "completed"
    FAILED = "failed"


class PreflightCall(models.Model):
    """One request of a preflight, committed with status `sent` before it leaves."""

    preflight = models.ForeignKey(TargetPreflight, on_delete=models.PROTECT, related_name="calls")
    sequence = models.PositiveSmallIntegerField()
    purpose = models.CharField(max_length=40)
    status = models.CharField(
        max_length=10, choices=PreflightCallStatus, default=PreflightCallStatus.SENT
    )
    stream = models.BooleanField()
    request = StoredJSONField()
    worst_case_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    served_model = StoredCharField(max_length=200, blank=True)
    finish_reason = StoredCharField(max_length=32, blank=True)
    saw_done = models.BooleanField(null=True, blank=True)
    usage_raw = StoredJSONField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    cached_input_tokens = models.BigIntegerField(null=True, blank=True)
    cache_write_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    cost_note = models.CharField(max_length=200, blank=True)
    # An HTTP error answer its target does not bill: `runs.ledger.accounting.known_failure_unbilled`
    # decided it off the wire when the row settled (the row has no column the rule reads), so
    # its cost counts a known 0 while `cost_usd` stays the recorded unknown.
    error_unbilled = models.BooleanField(default=False)
    content = StoredTextField(blank=True)
    error = StoredTextField(blank=True)
    sent_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["preflight", "sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["preflight", "sequence"], name="preflight_call_unique_sequence"
            ),
            models.CheckConstraint(
                condition=Q(status__in=PreflightCallStatus.values),
                name="preflight_call_status_known",
            ),
            models.CheckConstraint(
                condition=Q(cost_usd__isnull=True) | Q(output_tokens__isnull=False),
                name="preflight_call_cost_needs_usage",
            ),
            models.CheckConstraint(
                condition=Q(cost_usd__isnull=True) | Q(cost_usd__gte=0),
                name="preflight_call_cost_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"preflight call {self.preflight_id}#{self.sequence} ({self.purpose})"

    @property
    def effective_cost_usd(self) -> Decimal | None:
        """The cost the preflight's total counts for this call, as a run's report counts a
        run's call (`runs.reporting.effective.call_effective_costs`): a known 0 for an error
        answer its target does not bill, else the recorded cost (unknown stays None)."""
        return Decimal(0) if self.error_unbilled else self.cost_usd
