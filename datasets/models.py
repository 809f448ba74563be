"""Prepared sources, frozen datasets and questions (DESIGN §3, SPEC R8–R9).

Question secrets (reference answers, hidden tests, tool credentials) live in their own table
that no serializer, template or export touches (R9.3).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from srbench.ledger import HEX64_REGEX

BENCHMARK_KEYS = (
    "mmlu-pro",
    "simpleqa",
    "gpqa",
    "hle",
    "arc",
    "livecodebench",
    "scicode",
    "terminal-bench",
    "tau3",
)


class Profile(models.TextChoices):
    SMOKE = "smoke"
    QUICK = "quick"
    STANDARD = "standard"


class Split(models.TextChoices):
    DEV = "dev"
    HOLDOUT = "holdout"


class Question(models.Model):
    """One benchmark question, content-addressed: the same content is stored once."""

    benchmark = models.CharField(max_length=32)
    native_id = models.CharField(max_length=255)
    subject = models.CharField(max_length=255, blank=True)
    payload = models.JSONField()
    content_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["benchmark", "subject"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(benchmark__in=BENCHMARK_KEYS), name="question_benchmark_known"
            ),
            models.CheckConstraint(
                condition=Q(content_sha256__regex=HEX64_REGEX), name="question_sha256_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.benchmark}:{self.native_id}"


class QuestionSecret(models.Model):
    question = models.OneToOneField(
        Question, on_delete=models.PROTECT, primary_key=True, related_name="secret"
    )
    data = models.JSONField()

    def __str__(self) -> str:
        return f"secret of {self.question_id}"


class Source(models.Model):
    """A prepared, frozen question set for one benchmark under (profile, seed, split)."""

    benchmark = models.CharField(max_length=32)
    profile = models.CharField(max_length=16, choices=Profile)
    seed = models.BigIntegerField()
    split = models.CharField(max_length=16, choices=Split)
    content_sha256 = models.CharField(max_length=64)
    provenance = models.JSONField()
    requested_count = models.PositiveIntegerField()
    count = models.PositiveIntegerField()
    synthetic = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    questions = models.ManyToManyField(Question, through="SourceQuestion", related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["benchmark", "profile", "seed", "split"], name="source_unique_coordinate"
            ),
            models.CheckConstraint(
                condition=Q(benchmark__in=BENCHMARK_KEYS), name="source_benchmark_known"
            ),
            models.CheckConstraint(
                condition=Q(profile__in=Profile.values), name="source_profile_known"
            ),
            models.CheckConstraint(condition=Q(split__in=Split.values), name="source_split_known"),
            models.CheckConstraint(
                condition=Q(count__lte=models.F("requested_count")), name="source_never_padded"
            ),
            models.CheckConstraint(
                condition=Q(content_sha256__regex=HEX64_REGEX), name="source_sha256_hex"
            ),
        ]

    @property
    def short(self) -> bool:
        return self.count < self.requested_count

    def __str__(self) -> str:
        return f"{self.benchmark}/{self.profile}/{self.seed}/{self.split}"


class SourceQuestion(models.Model):
    source = models.ForeignKey(Source, on_delete=models.PROTECT, related_name="entries")
    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "position"], name="sourcequestion_position"),
            models.UniqueConstraint(fields=["source", "question"], name="sourcequestion_once"),
        ]


class FrozenDataset(models.Model):
    """Content-addressed: composing the same content twice returns the same dataset (R8.4)."""

    identity_sha256 = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    profile = models.CharField(max_length=16, choices=Profile)
    seed = models.BigIntegerField()
    split = models.CharField(max_length=16, choices=Split)
    selection = models.JSONField()
    sources = models.ManyToManyField(Source, related_name="datasets")
    questions = models.ManyToManyField(Question, through="DatasetQuestion", related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(identity_sha256__regex=HEX64_REGEX), name="dataset_identity_hex"
            ),
            models.CheckConstraint(
                condition=Q(profile__in=Profile.values), name="dataset_profile_known"
            ),
            models.CheckConstraint(condition=Q(split__in=Split.values), name="dataset_split_known"),
        ]

    def __str__(self) -> str:
        return self.name

    def facts_beside_name(self) -> list[str]:
        """Its profile, seed and split, each unless its name already says it (a composed
        dataset's default name is "smoke · seed 20260918 · mmlu-pro"): shown after the name,
        nothing said twice."""
        said = {part.strip() for part in self.name.split("·")}
        return [
            fact for fact in (self.profile, f"seed {self.seed}", self.split) if fact not in said
        ]


class DatasetQuestion(models.Model):
    dataset = models.ForeignKey(FrozenDataset, on_delete=models.PROTECT, related_name="entries")
    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "position"], name="datasetquestion_position"
            ),
            models.UniqueConstraint(fields=["dataset", "question"], name="datasetquestion_once"),
        ]
