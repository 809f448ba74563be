"""API shapes of recipes and route previews."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from recipes.models import Recipe
from recipes.selectors import recipe_confirmations

INT64_MAX = 2**63 - 1


class RecipeSummarySerializer(serializers.ModelSerializer):
    target = serializers.CharField(source="target.slug", read_only=True)
    redaction_count = serializers.SerializerMethodField()
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = Recipe
        fields = [
            "id",
            "run",
            "target",
            "captured_at",
            "projection_sha256",
            "source_config_hash",
            "generated_config_hash",
            "active_config_hash",
            "etag",
            "redaction_count",
            "download_url",
        ]
        read_only_fields = fields

    def get_redaction_count(self, recipe: Recipe) -> int:
        return len(recipe.redactions)

    def get_download_url(self, recipe: Recipe) -> str:
        return reverse("recipes-api-download", args=[recipe.pk])


class RecipeDetailSerializer(RecipeSummarySerializer):
    recipe = serializers.JSONField(source="body", read_only=True)
    redactions = serializers.JSONField(read_only=True)
    confirmations = serializers.SerializerMethodField()

    class Meta(RecipeSummarySerializer.Meta):
        fields = [*RecipeSummarySerializer.Meta.fields, "confirmations", "redactions", "recipe"]
        read_only_fields = fields

    def get_confirmations(self, recipe: Recipe) -> dict[str, int | None]:
        return recipe_confirmations(run=recipe.run, target=recipe.target)


class RoutePreviewRequestSerializer(serializers.Serializer):
    prompt = serializers.CharField(
        required=False, max_length=200_000, trim_whitespace=False, allow_blank=False
    )
    messages = serializers.ListField(
        child=serializers.DictField(), required=False, allow_empty=False, max_length=1000
    )
    session_id = serializers.CharField(required=False, allow_null=True, max_length=256)
    conversation_id = serializers.CharField(required=False, allow_null=True, max_length=256)
    sampling_seed = serializers.IntegerField(
        required=False, allow_null=True, min_value=-INT64_MAX - 1, max_value=INT64_MAX
    )

    def to_internal_value(self, data: Any) -> Any:
        # The router refuses unknown fields; refusing them here says so before any request.
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({k: "not a route preview field" for k in unknown})
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("prompt" in attrs) == ("messages" in attrs):
            raise serializers.ValidationError("Give either prompt or messages.")
        return attrs
