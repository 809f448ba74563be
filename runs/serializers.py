"""API shapes. Target secrets are not fields here and never will be (write-only in the admin)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from runs import selectors
from runs.models import Call, Cell, Run, RunEvent, Target


class BlankAsNullURLField(serializers.URLField):
    """An optional URL column stores "" for none; the API says null (unknown is null)."""

    def to_representation(self, value: Any) -> str | None:
        return value or None


class TargetSerializer(serializers.ModelSerializer):
    preview_url = BlankAsNullURLField(read_only=True, allow_null=True)

    class Meta:
        model = Target
        fields = [
            "slug",
            "name",
            "kind",
            "base_url",
            "model",
            "fixed_params",
            "prices",
            "config_hash",
            "preview_url",
            "capture_recipe",
            "max_inference_calls",
            "active",
        ]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    progress = serializers.SerializerMethodField()
    elapsed_seconds = serializers.SerializerMethodField()
    last_update_at = serializers.SerializerMethodField()
    target_types = serializers.SerializerMethodField()
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
        ]
        read_only_fields = fields

    def get_progress(self, run: Run) -> dict[str, int | None]:
        total = getattr(run, "cells_total", None)
        if total is None:  # not annotated (detail view): count here
            run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        return {
            "completed": run.cells_completed,
            "denominator": run.cells_total,
            "failed": run.cells_failed,
        }

    def get_elapsed_seconds(self, run: Run) -> float | None:
        return selectors.run_elapsed_seconds(run)

    def get_last_update_at(self, run: Run) -> str | None:
        last = getattr(run, "last_event_at", None) or run.updated_at
        return max(last, run.updated_at).isoformat()

    def get_target_types(self, run: Run) -> list[str]:
        return selectors.target_types(run)


class ResultSerializer(serializers.ModelSerializer):
    target = serializers.CharField(source="target.slug")
    question_native_id = serializers.CharField(source="question.native_id")
    subject = serializers.CharField(source="question.subject")

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
            "final_answer",
            "error",
            "started_at",
            "finished_at",
        ]


USAGE_FIELDS = [
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cached_reported",
    "cache_write_reported",
    "cost_usd",
    "cache_neutral_cost_usd",
    "cost_note",
]


class CallSummarySerializer(serializers.ModelSerializer):
    target = serializers.CharField(source="target.slug")
    cell = serializers.IntegerField(source="cell_id")
    benchmark = serializers.CharField(source="cell.benchmark")
    live = serializers.SerializerMethodField()

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
        ]

    def get_live(self, call: Call) -> dict[str, Any]:
        return selectors.call_live_view(call)


class CallDetailSerializer(CallSummarySerializer):
    class Meta(CallSummarySerializer.Meta):
        fields = [
            *CallSummarySerializer.Meta.fields,
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


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["seq", "created_at", "type", "payload"]
