"""API shapes. Target secrets are not fields here and never will be (write-only in the admin)."""

from rest_framework import serializers

from runs.models import Run, Target


class TargetSerializer(serializers.ModelSerializer):
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
            "created_at",
            "updated_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields
