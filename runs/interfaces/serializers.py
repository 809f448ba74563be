"""API shapes. Target secrets are not fields here and never will be (write-only in the admin)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from runs.interfaces.public import (
    EFFECTIVE_COST_FIELDS,
    EFFECTIVE_TOKEN_FIELDS,
    grade_reasons,
    public_call_content,
    public_cell_error,
    public_event_payload,
    public_grade,
)
from runs.ledger import selectors
from runs.ledger.accounting import CALL_USAGE_COLUMNS
from runs.models import Call, Cell, Run, RunEvent, Target
from runs.reporting.report import timing_shown
from srbench.money import money_text


class BlankAsNullURLField(serializers.URLField):
    """An optional URL column stores "" for none; the API says null (unknown is null)."""

    def to_representation(self, value: Any) -> str | None:
        return value or None


class MoneyField(serializers.CharField):
    """A ledger amount as its exact decimal string (srbench.money): ``"0.0000011"``, never the
    column's padded scale nor a JSON float. Read-only; null is unknown."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: Decimal) -> str:
        # A serializer never asks a field to represent None (it writes null itself).
        text = money_text(value)
        assert text is not None
        return text


class TargetSerializer(serializers.ModelSerializer):
    preview_url = BlankAsNullURLField(read_only=True, allow_null=True)

    class Meta:
        model = Target
        fields = [
            "slug",
            "name",
            "kind",
            "base_url",
            "api",
            "model",
            "fixed_params",
            "prices",
            "config_hash",
            "preview_url",
            "capture_recipe",
            "max_inference_calls",
            "errors_billed",
            "active",
        ]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    progress = serializers.SerializerMethodField()
    elapsed_seconds = serializers.SerializerMethodField()
    last_update_at = serializers.SerializerMethodField()
    target_types = serializers.SerializerMethodField()
    result = serializers.SerializerMethodField()
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "name",
            "mode",
            "status",
            "profile",
            "plan_sha256",
            "dataset",
            "parent",
            "owner",
            "idempotency_key",
            "created_at",
            "updated_at",
            "started_at",
            "finished_at",
            "cancel_requested_at",
            "stop_reason",
            "progress",
            "elapsed_seconds",
            "last_update_at",
            "target_types",
            "result",
        ]
        read_only_fields = fields

    def get_progress(self, run: Run) -> dict[str, int | None]:
        if not hasattr(run, "cells_total"):  # not annotated: read the run's summary row
            run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        return {
            "completed": run.cells_completed,
            "denominator": run.cells_total,
            "failed": run.cells_failed,
        }

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "description": "an ended run's stored report in brief (null until it is computed): "
            "the best target's score, its kind (sr-bench, subset or none) and slug, the known "
            "spend in USD (text), whether the spend and the results are complete, and the "
            "completed share of planned cells",
        }
    )
    def get_result(self, run: Run) -> dict[str, Any] | None:
        if not hasattr(run, "report_score_kind"):
            run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        if run.report_score_kind is None:  # no stored report yet (the run has not ended)
            return None
        spend = run.report_known_spend_usd
        total = run.cells_total
        return {
            "score": run.report_score,
            "score_kind": run.report_score_kind,
            "score_target": run.report_score_target or None,
            "known_spend_usd": None if spend is None else money_text(spend),
            "spend_complete": run.report_spend_complete,
            "complete": run.report_complete,
            "completeness": None if not total else run.cells_completed / total,
        }

    def get_elapsed_seconds(self, run: Run) -> float | None:
        return selectors.run_elapsed_seconds(run)

    def get_last_update_at(self, run: Run) -> str | None:
        last = getattr(run, "last_event_at", None) or run.updated_at
        return max(last, run.updated_at).isoformat()

    def get_target_types(self, run: Run) -> list[str]:
        # From the manifest if loaded, else cached by the run's frozen identity: a poll does
        # not read a standard run's megabytes of case list (issue 25).
        return selectors.manifest_target_kinds([run])[run.pk]


class ResultSerializer(serializers.ModelSerializer):
    """A cell as a member sees it: grade, reasons and error pass the rule in runs.interfaces.public."""

    target = serializers.CharField(source="target.slug")
    question_native_id = serializers.CharField(source="question.native_id")
    subject = serializers.CharField(source="question.subject")
    grade = serializers.SerializerMethodField(help_text="the grade without hidden criteria")
    reasons = serializers.SerializerMethodField(help_text="the verdict's reasons in words")
    error = serializers.SerializerMethodField()

    class Meta:
        model = Cell
        fields = [
            "id",
            "benchmark",
            "target",
            "question",
            "question_native_id",
            "subject",
            "slot",
            "status",
            "correct",
            "scored",
            "grade",
            "reasons",
            "final_answer",
            "error",
            "started_at",
            "finished_at",
        ]

    @extend_schema_field(
        {"type": "object", "additionalProperties": {}, "nullable": True, "readOnly": True}
    )
    def get_grade(self, cell: Cell) -> dict[str, Any] | None:
        return public_grade(cell.grade)

    def get_reasons(self, cell: Cell) -> list[str]:
        return grade_reasons(public_grade(cell.grade))

    def get_error(self, cell: Cell) -> str:
        return public_cell_error(cell.error)


USAGE_FIELDS = list(CALL_USAGE_COLUMNS)


class MillisecondsField(serializers.FloatField):
    """A measured duration in milliseconds, to the microsecond (runs.reporting.report.timing_shown):
    553.229290, not the clock difference's 553.2292899999902. Read-only; null is unknown."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: float) -> float | None:
        return timing_shown(value)


class CallSummarySerializer(serializers.ModelSerializer):
    target = serializers.CharField(source="target.slug")
    cell = serializers.IntegerField(source="cell_id")
    benchmark = serializers.CharField(source="cell.benchmark")
    live = serializers.SerializerMethodField()
    cost_usd = MoneyField(help_text="as the ledger recorded it (null: unknown; see cost_note)")
    cache_neutral_cost_usd = MoneyField(help_text="as the ledger recorded it")
    # As every report counts the call (runs.interfaces.public.with_effective_costs).
    effective_cost_usd = MoneyField(
        help_text="the cost the run's report counts for this call: the recorded one, a usage "
        "correction's, or a known 0 for an HTTP error its target does not bill"
    )
    effective_cache_neutral_cost_usd = MoneyField(help_text="likewise, cache-neutral")
    effective_cost_note = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="why the effective cost is not the recorded one (null: it is)",
    )
    effective_input_tokens = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="the uncached input tokens the run's report counts for this call: the "
        "recorded ones or a usage correction's (null: unknown)",
    )
    effective_cached_input_tokens = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="likewise, cache-read input"
    )
    effective_cache_write_tokens = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="likewise, cache-write input"
    )
    effective_output_tokens = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="likewise, output (reasoning included)"
    )
    ttft_ms = MillisecondsField()
    duration_ms = MillisecondsField()

    class Meta:
        model = Call
        fields = [
            "id",
            "cell",
            "benchmark",
            "role",
            "sequence",
            "status",
            "target",
            "served_model",
            "selected_model",
            "selected_decision",
            "finish_reason",
            "http_status",
            "sent_at",
            "first_token_at",
            "finished_at",
            "ttft_ms",
            "duration_ms",
            "error_code",
            "error",
            "live",
            *USAGE_FIELDS,
            *EFFECTIVE_COST_FIELDS,
            *EFFECTIVE_TOKEN_FIELDS,
        ]

    def get_live(self, call: Call) -> dict[str, Any]:
        return selectors.call_live_view(call)


class CallDetailSerializer(CallSummarySerializer):
    """A call's content as a member sees it (runs.interfaces.public): a judge call shows neither its
    request nor its reply, exactly as the call page."""

    withheld = serializers.CharField(
        allow_null=True, read_only=True, help_text="why request and reply are not shown"
    )
    request = serializers.JSONField(allow_null=True, read_only=True)
    content = serializers.CharField(allow_null=True, read_only=True)
    reasoning = serializers.CharField(allow_null=True, read_only=True)
    tool_calls = serializers.JSONField(allow_null=True, read_only=True)
    response_headers = serializers.JSONField(read_only=True)

    class Meta(CallSummarySerializer.Meta):
        fields = [
            *CallSummarySerializer.Meta.fields,
            "withheld",
            "request",
            "content",
            "reasoning",
            "tool_calls",
            "usage_raw",
            "response_headers",
            "config_hash_ack",
            "inference_call_count",
            "worker",
        ]

    def to_representation(self, call: Call) -> dict[str, Any]:
        # The stored request and reply are replaced by what runs.interfaces.public shows a member.
        shown = public_call_content(call)
        data = super().to_representation(call)
        for key in (
            "withheld",
            "request",
            "content",
            "reasoning",
            "tool_calls",
            "response_headers",
        ):
            data[key] = shown[key]
        return data


class EventSerializer(serializers.ModelSerializer):
    payload = serializers.SerializerMethodField()

    class Meta:
        model = RunEvent
        fields = ["seq", "created_at", "type", "payload"]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_payload(self, event: RunEvent) -> Any:
        return public_event_payload(event.type, event.payload)
