"""Targets and the run ledger: runs, cells, calls, evidence, corrections, events, recovery.

The invariants of DESIGN §3 are database constraints here; services are the second line.
Evidence rows use PROTECT so nothing that cost money can be deleted by a cascade.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q

from runs.models.correction_entries import UsageCorrectionEntry  # noqa: F401

# Defined in its own module to keep this one small; imported here so Django registers it with
# `runs` and callers find it beside `UsageCorrection`.
from runs.models.evidence import CODECS, EvidenceCodec
from runs.models.fields import StoredCharField, StoredJSONField, StoredTextField
from runs.models.live import LiveCallSums, LiveCellSums, LiveSnapshot  # noqa: F401
from runs.models.regrade import Regrade  # noqa: F401
from runs.models.summaries import (  # noqa: F401
    RunReport,
    RunSummary,
    StoredRecoveryPlan,
    StoredRecoveryPlanChunk,
)
from runs.models.wire import WireApi
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from runs.vocabulary.run_modes import RunMode
from runs.vocabulary.run_states import TERMINAL_RUN_STATES, RunState
from srbench.ledger import HEX64_REGEX, AppendOnlyModel
from srbench.money import price_error

SLUG_REGEX = r"^[a-z0-9][a-z0-9._-]*$"
PRICE_BUCKETS = ("input", "cached_input", "cache_write", "output")


def validate_price_table(prices: object) -> list[str]:
    """Prices are USD per 1M tokens per bucket, keyed by the served model; input and output
    are required, the cache buckets may be absent (then cached tokens make a cost unknown).
    Each price is exact: a decimal string within the ledger's scale (`srbench.money.price_error`,
    issue 35 item 5)."""
    if not isinstance(prices, dict):
        return ["prices must be a JSON object keyed by served model."]
    errors = []
    for model_name, row in prices.items():
        if not isinstance(row, dict):
            errors.append(f"{model_name}: expected an object of bucket prices.")
            continue
        unknown = set(row) - set(PRICE_BUCKETS)
        if unknown:
            errors.append(f"{model_name}: unknown bucket(s) {', '.join(sorted(unknown))}.")
        for bucket in ("input", "output"):
            if bucket not in row:
                errors.append(f"{model_name}: '{bucket}' price is required.")
        for bucket, value in row.items():
            if bucket in PRICE_BUCKETS and (problem := price_error(value)):
                errors.append(f"{model_name}.{bucket}: {problem}")
    return errors


class Target(models.Model):
    class Kind(models.TextChoices):
        SINGLE = "single", "single model"
        MOM = "mom", "MoM router"

    slug = models.CharField(
        max_length=64,
        unique=True,
        help_text="Stable ID; also the last tie-break when choosing a baseline (R5.2).",
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=Kind, default=Kind.SINGLE)
    base_url = models.URLField(max_length=500, help_text="The API's base, e.g. …/v1")
    api = models.CharField(max_length=16, choices=WireApi, default=WireApi.OPENAI)
    model = models.CharField(max_length=200)
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        help_text="Name of an environment variable holding the API key (alternative to a "
        "stored key).",
    )
    fixed_params = models.JSONField(
        default=dict,
        blank=True,
        help_text='Request parameters that override run defaults (R8.6), e.g. {"temperature": 0}.',
    )
    prices = models.JSONField(
        default=dict,
        blank=True,
        help_text="USD per 1M tokens keyed by served model: "
        '{"model": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", '
        '"output": "15"}}.',
    )
    config_hash = models.CharField(max_length=64, blank=True)
    preview_url = models.URLField(max_length=500, blank=True)
    capture_recipe = models.BooleanField(default=False)
    max_inference_calls = models.PositiveIntegerField(null=True, blank=True)
    errors_billed = models.BooleanField(
        default=False,
        help_text="The provider bills error responses (an HTTP 4xx/5xx answered before any "
        "stream byte). Off (the usual OpenAI-compatible terms): such a failure is known to "
        "cost nothing and failed-mode recovery may retry it. Turn on for a provider that "
        "bills them, or a router that may run internal calls before it answers with an error. "
        "Frozen into each plan.",
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=("single", "mom")), name="target_kind_known"
            ),
            models.CheckConstraint(condition=Q(slug__regex=SLUG_REGEX), name="target_slug_format"),
            models.CheckConstraint(
                condition=Q(config_hash="") | Q(config_hash__regex=HEX64_REGEX),
                name="target_config_hash_hex",
            ),
            models.CheckConstraint(
                condition=Q(kind="single") | ~Q(config_hash=""), name="target_mom_needs_hash"
            ),
            models.CheckConstraint(
                condition=Q(capture_recipe=False) | (Q(kind="mom") & ~Q(preview_url="")),
                name="target_capture_needs_mom_preview",
            ),
            models.CheckConstraint(
                condition=Q(kind="single") | Q(api=WireApi.OPENAI), name="target_mom_speaks_openai"
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        """Single-row rules with messages an operator can act on (the DB constraints hold
        the same rules for every other writer)."""
        errors: dict[str, list[str]] = {}
        if self.config_hash and not re.fullmatch(HEX64_REGEX, self.config_hash):
            errors.setdefault("config_hash", []).append(
                "config_hash must be 64 lowercase hexadecimal characters."
            )
        if self.kind == self.Kind.MOM and not self.config_hash:
            errors.setdefault("config_hash", []).append("A MoM target needs a pinned config_hash.")
        if self.kind == self.Kind.MOM and self.api != WireApi.OPENAI:
            errors.setdefault("api", []).append(
                "A MoM router is evaluated through its OpenAI chat route: its routing headers, "
                "route preview and recipe capture are read there (set api to openai)."
            )
        if self.capture_recipe and self.kind != self.Kind.MOM:
            errors.setdefault("capture_recipe", []).append(
                "capture_recipe applies only to MoM targets."
            )
        if self.capture_recipe and not self.preview_url:
            errors.setdefault("preview_url", []).append(
                "capture_recipe needs the canonical preview_url (…/api/v1/routing/preview)."
            )
        if self.preview_url and not self.preview_url.rstrip("/").endswith(
            "/api/v1/routing/preview"
        ):
            errors.setdefault("preview_url", []).append(
                "preview_url must be the router's canonical …/api/v1/routing/preview URL."
            )
        if self.slug and not re.fullmatch(SLUG_REGEX, self.slug):
            errors.setdefault("slug", []).append(
                "Use lowercase letters, digits, '.', '_' and '-' (starting with a letter or digit)."
            )
        price_errors = validate_price_table(self.prices)
        if price_errors:
            errors["prices"] = price_errors
        if not isinstance(self.fixed_params, dict):
            errors["fixed_params"] = ["fixed_params must be a JSON object."]
        if errors:
            raise ValidationError(errors)


class TargetSecret(models.Model):
    """The stored API key, encrypted; write-only everywhere (admin, API, exports, logs)."""

    target = models.OneToOneField(
        Target, on_delete=models.CASCADE, primary_key=True, related_name="secret"
    )
    api_key_encrypted = models.BinaryField()
    updated_at = models.DateTimeField(auto_now=True)

    def __repr__(self) -> str:
        return f"<TargetSecret target={self.target_id} (redacted)>"

    __str__ = __repr__


class RunStatus(models.TextChoices):
    """The ledger's run states; their words are runs.vocabulary.run_states.RunState's."""

    QUEUED = RunState.QUEUED.value
    RUNNING = RunState.RUNNING.value
    COMPLETED = RunState.COMPLETED.value
    FAILED = RunState.FAILED.value
    CANCELLED = RunState.CANCELLED.value
    INTERRUPTED = RunState.INTERRUPTED.value


TERMINAL_RUN_STATUSES = tuple(RunStatus(state.value) for state in TERMINAL_RUN_STATES)
# A run that may still dispatch or be dispatched: not yet terminal.
ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class RunQuerySet(models.QuerySet["Run"]):
    """The run states the engine, the recovery pass and the pages ask for by name."""

    def active(self) -> RunQuerySet:
        """Queued or running: not yet terminal."""
        return self.filter(status__in=ACTIVE_RUN_STATUSES)

    def running(self) -> RunQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def terminal(self) -> RunQuerySet:
        return self.filter(status__in=TERMINAL_RUN_STATUSES)

    def not_stopped(self) -> RunQuerySet:
        """Neither cancelled nor stopped early: new dispatch is still allowed."""
        return self.filter(cancel_requested_at__isnull=True, stop_reason="")


class Run(models.Model):
    class Mode(models.TextChoices):
        """Its words are runs.vocabulary.run_modes.RunMode's."""

        LIVE = RunMode.LIVE.value
        PREVIEW = RunMode.PREVIEW.value

    name = models.CharField(max_length=200)
    mode = models.CharField(max_length=8, choices=Mode, default=Mode.LIVE)
    status = models.CharField(max_length=12, choices=RunStatus, default=RunStatus.QUEUED)
    profile = models.CharField(max_length=16, blank=True)
    manifest = models.JSONField()
    plan_sha256 = models.CharField(max_length=64)
    dataset = models.ForeignKey(
        "datasets.FrozenDataset", on_delete=models.PROTECT, related_name="runs"
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    # The hash of the creation request as the client sent it (`runs.planning.services.
    # request_sha256`): what a resend with the same idempotency key must match. Not the frozen
    # plan's hash, which a server-side change between the two (a target check) moves. "" for
    # runs created before runs/0024 (their resend is compared by a fresh freeze, as before).
    request_sha256 = models.CharField(max_length=64, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Why dispatch stopped early (fail-closed failure, budget, cancel, deadline); "" = it didn't.
    stop_reason = StoredTextField(blank=True)
    # Budget (DESIGN §4): Σ over calls of (known cost, else the worst-case reservation).
    # Changed only under a row lock, so several workers share one budget.
    budget_committed_usd = models.DecimalField(max_digits=40, decimal_places=18, default=0)
    last_event_seq = models.PositiveBigIntegerField(default=0)
    # The largest call id when the run was created: every call of the run has a larger one
    # (its calls are written after the run exists, ids come from one sequence), so a page of
    # its calls in id order starts there instead of walking every call of the runs before it
    # (`selectors.calls_page`). Null for runs created before runs/0013.
    calls_after_id = models.BigIntegerField(null=True, blank=True, editable=False)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "-created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_key_once_per_owner",
            ),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="run_status_known"
            ),
            models.CheckConstraint(
                condition=Q(mode__in=[str(m) for m in RunMode]), name="run_mode_known"
            ),
            models.CheckConstraint(
                condition=Q(plan_sha256__regex=HEX64_REGEX), name="run_plan_sha256_hex"
            ),
            models.CheckConstraint(
                condition=Q(parent__isnull=True) | ~Q(parent=F("id")), name="run_not_own_parent"
            ),
            models.CheckConstraint(
                condition=Q(finished_at__isnull=True) | Q(status__in=TERMINAL_RUN_STATUSES),
                name="run_finished_only_when_terminal",
            ),
        ]

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES

    @property
    def may_start(self) -> bool:
        """Queued and not cancelled: a driver may move it to running."""
        return self.status == RunStatus.QUEUED and self.cancel_requested_at is None

    @property
    def accepts_claims(self) -> bool:
        """Running, not cancelled and not stopped: workers may claim its pending cells."""
        return (
            self.status == RunStatus.RUNNING
            and self.cancel_requested_at is None
            and not self.stop_reason
        )

    def __str__(self) -> str:
        return f"run {self.pk} {self.name}"


class CellStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SENT_UNKNOWN = "sent_unknown"


# A cell with an outcome: graded (completed) or ended without a grade that will come (failed).
# Anything else (pending, running, cancelled, sent_unknown) is a case without a result:
# counted wrong for a candidate, disqualifying for a baseline (R5.1), not regraded.
CELL_OUTCOMES = (CellStatus.COMPLETED, CellStatus.FAILED)


class CellQuerySet(models.QuerySet["Cell"]):
    """The cell states of the ledger, by name (claim loop, recovery pass, recovery review)."""

    def pending(self) -> CellQuerySet:
        return self.filter(status=CellStatus.PENDING)

    def running(self) -> CellQuerySet:
        """Held by a worker under a lease."""
        return self.filter(status=CellStatus.RUNNING)

    def sent_unknown(self) -> CellQuerySet:
        return self.filter(status=CellStatus.SENT_UNKNOWN)

    def with_outcome(self) -> CellQuerySet:
        return self.filter(status__in=CELL_OUTCOMES)

    def without_outcome(self) -> CellQuerySet:
        return self.exclude(status__in=CELL_OUTCOMES)

    def lease_expired(self, now: datetime) -> CellQuerySet:
        """Running under a lease that ran out before `now`: its worker died (the recovery
        pass's scan; the partial index ``cell_running_lease`` serves it)."""
        return self.running().filter(lease_expires_at__lt=now)

    def held(self, *, cell_id: int, token: int) -> CellQuerySet:
        """This cell, only while it is running under this fencing token."""
        return self.running().filter(pk=cell_id, claim_token=token)


class Cell(models.Model):
    """One (question × target × attempt slot) unit of work."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="cells")
    question = models.ForeignKey("datasets.Question", on_delete=models.PROTECT, related_name="+")
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="cells")
    slot = models.PositiveSmallIntegerField(default=0)
    benchmark = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=CellStatus, default=CellStatus.PENDING)
    # Fencing token: bumped by every claim, checked by every finish, so a zombie cannot write.
    claim_token = models.PositiveIntegerField(default=0)
    claimed_by = models.CharField(max_length=255, blank=True)
    # Renewed by the worker while it holds the cell; an expired lease means the worker died.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    correct = models.BooleanField(null=True, blank=True)
    scored = models.BooleanField(default=False)
    grade = StoredJSONField(null=True, blank=True)
    final_answer = StoredTextField(blank=True)
    error = StoredTextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = CellQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["run", "status"]),
            models.Index(fields=["run", "target", "benchmark"]),
            # A run's cells in id order (the Questions tab and the results API page by id): by
            # the primary key alone a page of a later run walks every cell of the runs before.
            models.Index(fields=["run", "id"], name="cell_run_id"),
            # The recovery pass scans for expired leases every few seconds in every worker;
            # only running cells carry a lease, a small part of a large table.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status=CellStatus.RUNNING),
                name="cell_running_lease",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "question", "target", "slot"], name="cell_unique_coordinate"
            ),
            models.CheckConstraint(
                condition=Q(status__in=CellStatus.values), name="cell_status_known"
            ),
            models.CheckConstraint(
                condition=Q(correct__isnull=True) | Q(scored=True), name="cell_correct_needs_score"
            ),
        ]

    def __str__(self) -> str:
        return f"cell {self.pk}"


class CallStatus(models.TextChoices):
    SENT = "sent"
    STREAMING = "streaming"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SENT_UNKNOWN = "sent_unknown"


# A call in these states may have reached the model and is not settled yet.
OPEN_CALL_STATUSES = (CallStatus.SENT, CallStatus.STREAMING)


class CallQuerySet(models.QuerySet["Call"]):
    def open(self) -> CallQuerySet:
        """Sent or streaming: committed before its request left, outcome not yet recorded."""
        return self.filter(status__in=OPEN_CALL_STATUSES)


class Call(models.Model):
    """One HTTP request to a model. Committed with status `sent` before the request leaves."""

    class Role(models.TextChoices):
        SUBJECT = "subject"
        JUDGE = "judge"
        SIMULATOR = "simulator"

    class Stage(models.TextChoices):
        PREPARING = "preparing"
        WAITING = "waiting"
        STREAMING = "streaming"
        GRADING = "grading"
        DONE = "done"

    cell = models.ForeignKey(Cell, on_delete=models.PROTECT, related_name="calls")
    role = models.CharField(max_length=10, choices=Role)
    sequence = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=CallStatus, default=CallStatus.SENT)
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="calls")
    request = StoredJSONField()
    worker = models.CharField(max_length=255, blank=True)
    claim_token = models.PositiveIntegerField(null=True, blank=True)  # at open: dbguards.fencing
    served_model = StoredCharField(max_length=200, blank=True)
    selected_model = StoredCharField(max_length=200, blank=True)
    selected_decision = StoredCharField(max_length=200, blank=True)
    config_hash_ack = StoredCharField(max_length=64, blank=True)
    inference_call_count = models.PositiveIntegerField(null=True, blank=True)
    response_headers = StoredJSONField(default=dict, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    finish_reason = StoredCharField(max_length=32, blank=True)
    content = StoredTextField(blank=True)
    reasoning = StoredTextField(blank=True)
    tool_calls = StoredJSONField(null=True, blank=True)
    # Usage: the raw object as received, the four exclusive buckets, reasoning; null = unknown.
    usage_raw = StoredJSONField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    cached_input_tokens = models.BigIntegerField(null=True, blank=True)
    cache_write_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveBigIntegerField(null=True, blank=True)  # part of output
    cached_reported = models.BooleanField(null=True, blank=True)
    cache_write_reported = models.BooleanField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    cache_neutral_cost_usd = models.DecimalField(
        max_digits=40, decimal_places=18, null=True, blank=True
    )
    cost_note = models.CharField(max_length=200, blank=True)
    reserved_cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True, blank=True)
    # Timings and live activity (R10.2, R10.3).
    stage = models.CharField(max_length=10, choices=Stage, default=Stage.PREPARING)
    sent_at = models.DateTimeField()
    first_token_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    bytes_received = models.BigIntegerField(default=0)
    error_code = models.CharField(max_length=64, blank=True)
    error = StoredTextField(blank=True)

    objects = CallQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["cell", "role"]),
            # The known failures whose cost the accounting rule decides
            # (runs.reporting.effective.known_failures): read on every view of a running run's
            # results, a few rows whatever the run's size.
            models.Index(
                fields=["cell"],
                condition=Q(status=CallStatus.FAILED, http_status__gte=400, cost_usd__isnull=True),
                name="call_http_error_cost_unknown",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["cell", "role", "sequence"], name="call_unique_sequence"
            ),
            models.CheckConstraint(
                condition=Q(status__in=CallStatus.values), name="call_status_known"
            ),
            models.CheckConstraint(
                condition=Q(role__in=("subject", "judge", "simulator")), name="call_role_known"
            ),
            models.CheckConstraint(
                condition=(
                    (Q(input_tokens__isnull=True) | Q(input_tokens__gte=0))
                    & (Q(cached_input_tokens__isnull=True) | Q(cached_input_tokens__gte=0))
                    & (Q(cache_write_tokens__isnull=True) | Q(cache_write_tokens__gte=0))
                    & (Q(output_tokens__isnull=True) | Q(output_tokens__gte=0))
                ),
                name="call_tokens_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(cost_usd__isnull=True) | Q(cost_usd__gte=0),
                name="call_cost_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(cost_usd__isnull=True) | Q(output_tokens__isnull=False),
                name="call_cost_needs_usage",
            ),
        ]

    def __str__(self) -> str:
        return f"call {self.pk} ({self.role} #{self.sequence})"


class CallEvidence(AppendOnlyModel):
    """The raw SSE bytes of a call as runs.models.evidence encoded them (`codec`), written once."""

    call = models.OneToOneField(
        Call, on_delete=models.PROTECT, primary_key=True, related_name="evidence"
    )
    body = models.BinaryField()
    codec = models.CharField(
        max_length=16,
        choices=EvidenceCodec,
        default=EvidenceCodec.ZLIB,
        db_default=EvidenceCodec.ZLIB,  # writers from before migration 0019 wrote zlib
    )
    raw_size = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(sha256__regex=HEX64_REGEX), name="evidence_sha256_hex"
            ),
            models.CheckConstraint(condition=Q(codec__in=CODECS), name="evidence_codec_known"),
        ]


class UsageCorrection(AppendOnlyModel):
    """An append-only, versioned cost correction rebuilt from saved evidence (R2)."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="usage_corrections")
    version = models.PositiveIntegerField()
    evidence_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    verified_count = models.PositiveIntegerField()
    changed_count = models.PositiveIntegerField()
    unverifiable_count = models.PositiveIntegerField()
    old_known_cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True)
    new_known_cost_usd = models.DecimalField(max_digits=40, decimal_places=18, null=True)
    corrections = models.JSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "evidence_sha256"], name="correction_once_per_evidence"
            ),
            models.UniqueConstraint(fields=["run", "version"], name="correction_version_once"),
            models.CheckConstraint(condition=Q(version__gte=1), name="correction_version_positive"),
        ]


class RunEvent(AppendOnlyModel):
    """A readable, chronological record of every state change (R14); `seq` is the cursor."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    type = models.CharField(max_length=64)
    payload = StoredJSONField(default=dict)

    class Meta:
        ordering = ["run", "seq"]
        indexes = [
            # A run's recipe refusals (`recipes.selectors.run_recipe_availability`, every
            # run detail tab): by (run, seq) alone that read all 100,000+ events of the run
            # to keep its few refusals. Partial, so the events' hot path writes no entry; a
            # LIKE 'recipe.%' predicate is never used, the planner cannot prove it from `=`.
            models.Index(
                fields=["run", "seq"],
                condition=Q(type="recipe.not_captured"),
                name="event_recipe_not_captured",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="event_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="event_seq_positive"),
        ]


class RecoveryRequest(models.Model):
    class Mode(models.TextChoices):
        UNDISPATCHED = "undispatched"
        FAILED = "failed"
        JUDGE_ONLY = "judge_only"

    parent = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="recovery_requests")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    idempotency_key = models.CharField(max_length=255)
    mode = models.CharField(max_length=16, choices=Mode)
    plan_sha256 = models.CharField(max_length=64)
    selected_cells_sha256 = models.CharField(max_length=64)
    acknowledged_new_attempt = models.BooleanField(default=False)
    child = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.PROTECT, related_name="recovery_request"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["parent", "idempotency_key"], name="recovery_key_once_per_parent"
            ),
            models.CheckConstraint(
                condition=Q(mode__in=tuple(RecoveryPlanMode)),
                name="recovery_mode_known",
            ),
            models.CheckConstraint(
                # A new attempt (failed mode) only when acknowledged (R15.3).
                condition=~Q(mode=RecoveryPlanMode.FAILED) | Q(acknowledged_new_attempt=True),
                name="recovery_failed_needs_ack",
            ),
            models.CheckConstraint(
                condition=Q(child__isnull=True) | ~Q(child=F("parent")),
                name="recovery_child_not_parent",
            ),
        ]


class RecoveryClaim(models.Model):
    """A parent cell taken over by a recovery child; a cell can be claimed only once."""

    cell = models.OneToOneField(Cell, on_delete=models.PROTECT, related_name="recovery_claim")
    request = models.ForeignKey(RecoveryRequest, on_delete=models.PROTECT, related_name="claims")
    created_at = models.DateTimeField(auto_now_add=True)
