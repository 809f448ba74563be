"""API shapes for sources, datasets and questions.

Every field is listed explicitly. `QuestionSecret` is not reachable from any serializer here,
and a question's `content_sha256` is left out on purpose: it hashes the secret too, so for a
multiple-choice question a client could test each letter against it (R9.3).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from datasets.benchmarks import ADAPTERS
from datasets.models import FrozenDataset, Question, Source
from datasets.selectors import dataset_coverage, dataset_sources, dataset_subject_groups
from srbench.api import StrictFieldsSerializer


class SourceSerializer(serializers.ModelSerializer):
    short = serializers.BooleanField(read_only=True)

    class Meta:
        model = Source
        fields = [
            "id",
            "benchmark",
            "profile",
            "seed",
            "split",
            "count",
            "requested_count",
            "short",
            "synthetic",
            "content_sha256",
            "provenance",
            "created_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Source) -> dict[str, Any]:
        """The path the server read is a deployment detail: staff see it whole, a member its
        last name only (the provenance's label and the files' hashes say the rest)."""
        data = super().to_representation(instance)
        request = self.context.get("request")
        provenance = data.get("provenance")
        staff = request is not None and request.user.is_staff
        if isinstance(provenance, dict) and not staff:
            path = provenance.get("source_path")
            if isinstance(path, str):
                data["provenance"] = {**provenance, "source_path": PurePath(path).name}
        return data


class DatasetListSerializer(serializers.ModelSerializer):
    question_count = serializers.IntegerField(read_only=True, allow_null=True)
    sources = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    # Null for a dataset frozen by a command or a fixture rather than a user.
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = FrozenDataset
        fields = [
            "id",
            "name",
            "identity_sha256",
            "profile",
            "seed",
            "split",
            "selection",
            "question_count",
            "sources",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class CoverageSerializer(serializers.Serializer):
    benchmark = serializers.CharField()
    kind = serializers.CharField()
    count = serializers.IntegerField()
    requested_count = serializers.IntegerField()
    short = serializers.BooleanField()
    synthetic = serializers.BooleanField()
    source_id = serializers.IntegerField()


class SubjectGroupSerializer(serializers.Serializer):
    benchmark = serializers.CharField()
    subject = serializers.CharField(allow_null=True)
    count = serializers.IntegerField()


class DatasetDetailSerializer(DatasetListSerializer):
    coverage = serializers.SerializerMethodField()
    subject_groups = serializers.SerializerMethodField()
    sources = serializers.SerializerMethodField()  # type: ignore[assignment]

    class Meta(DatasetListSerializer.Meta):
        fields = [*DatasetListSerializer.Meta.fields, "coverage", "subject_groups"]
        read_only_fields = fields

    @extend_schema_field(CoverageSerializer(many=True))
    def get_coverage(self, dataset: FrozenDataset) -> list[dict[str, Any]]:
        return dataset_coverage(dataset=dataset)

    @extend_schema_field(SubjectGroupSerializer(many=True))
    def get_subject_groups(self, dataset: FrozenDataset) -> list[dict[str, Any]]:
        return dataset_subject_groups(dataset=dataset)

    @extend_schema_field(SourceSerializer(many=True))
    def get_sources(self, dataset: FrozenDataset) -> Any:
        return SourceSerializer(
            dataset_sources(dataset=dataset), many=True, context=self.context
        ).data


class QuestionSerializer(serializers.ModelSerializer):
    """The public payload only: task text, options, and the full input of code/agent tasks."""

    kind = serializers.SerializerMethodField()
    position = serializers.IntegerField(read_only=True, required=False, allow_null=True)

    class Meta:
        model = Question
        fields = ["id", "benchmark", "kind", "native_id", "subject", "position", "payload"]
        read_only_fields = fields

    def get_kind(self, question: Question) -> str:
        return ADAPTERS[question.benchmark].kind


class ComposeRequestSerializer(StrictFieldsSerializer):
    sources = serializers.ListField(
        child=serializers.IntegerField(min_value=1), min_length=1, max_length=50
    )
    benchmarks = serializers.ListField(
        child=serializers.ChoiceField(choices=list(ADAPTERS)),
        required=False,
        allow_empty=False,
    )
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)

    def validate_sources(self, value: list[int]) -> list[int]:
        known = set(Source.objects.filter(pk__in=value).values_list("pk", flat=True))
        missing = sorted(set(value) - known)
        if missing:
            raise serializers.ValidationError(
                f"unknown source id(s): {', '.join(map(str, missing))}"
            )
        return value


class ComposeReceiptSerializer(serializers.Serializer):
    dataset = DatasetDetailSerializer()
    created = serializers.BooleanField()
    model_requests = serializers.IntegerField()


class ConflictSerializer(serializers.Serializer):
    kind = serializers.CharField()
    detail = serializers.CharField()


class ComposeConflictSerializer(serializers.Serializer):
    error = serializers.CharField()
    code = serializers.CharField()
    detail = serializers.DictField()


class ProfileTotalSerializer(serializers.Serializer):
    profile = serializers.CharField()
    total = serializers.IntegerField()
    sources = serializers.IntegerField()
    label = serializers.CharField()
