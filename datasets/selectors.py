"""Read paths for sources, frozen datasets and their public questions (SPEC R9).

Nothing here reads `QuestionSecret`: text search covers the public payload only, so a search
can never be used as an oracle for a reference answer (R9.3).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery, Sum, TextField
from django.db.models.functions import Cast

from datasets.benchmarks import ADAPTERS
from datasets.models import DatasetQuestion, FrozenDataset, Profile, Question, Source

# R9.6: said wherever a profile total is shown (UI, API, CLI), in these words.
PROFILE_TOTAL_LABEL = (
    "Sum of the prepared sets for this profile. Sets may overlap, so this is neither a "
    "de-duplicated question count nor any run's denominator."
)
# R9.5
TRAINING_EXPOSURE_WARNING = (
    "Browsable public questions may have been seen in a model's training data. Standard "
    "(holdout) questions must not be used for tuning."
)


@dataclass(frozen=True)
class ProfileTotal:
    profile: str
    total: int
    sources: int
    label: str = PROFILE_TOTAL_LABEL


def profile_totals() -> list[ProfileTotal]:
    """Per profile, the sum of its prepared sources' counts (R9.6). A profile with nothing
    prepared sums to 0 sets and 0 questions: that is a known empty sum, not an unknown."""
    sums = {
        row["profile"]: row
        for row in Source.objects.values("profile").annotate(
            total=Sum("count"), sources=Count("id")
        )
    }
    return [
        ProfileTotal(
            profile=profile,
            total=sums[profile]["total"] if profile in sums else 0,
            sources=sums[profile]["sources"] if profile in sums else 0,
        )
        for profile in Profile.values
    ]


def source_list(
    *,
    benchmark: str | None = None,
    profile: str | None = None,
    seed: int | None = None,
    split: str | None = None,
) -> QuerySet[Source]:
    sources = Source.objects.all()
    if benchmark:
        sources = sources.filter(benchmark=benchmark)
    if profile:
        sources = sources.filter(profile=profile)
    if seed is not None:
        sources = sources.filter(seed=seed)
    if split:
        sources = sources.filter(split=split)
    return sources.order_by("profile", "seed", "benchmark", "id")


def dataset_list(
    *, search: str | None = None, profile: str | None = None, benchmark: str | None = None
) -> QuerySet[FrozenDataset]:
    """Newest first, with `question_count`. Search matches the name or an identity prefix."""
    datasets = FrozenDataset.objects.all()
    if search:
        search = search.strip()
        datasets = datasets.filter(
            Q(name__icontains=search) | Q(identity_sha256__startswith=search.lower())
        )
    if profile:
        datasets = datasets.filter(profile=profile)
    if benchmark:
        # Exists, not a join: a join on a many-to-many would repeat a dataset per source.
        datasets = datasets.filter(
            Exists(
                FrozenDataset.sources.through.objects.filter(
                    frozendataset_id=OuterRef("pk"), source__benchmark=benchmark
                )
            )
        )
    question_count = (
        DatasetQuestion.objects.filter(dataset=OuterRef("pk"))
        .order_by()
        .values("dataset")
        .annotate(n=Count("id"))
        .values("n")
    )
    return datasets.annotate(question_count=question_count).order_by("-created_at", "-id")


def dataset_sources(*, dataset: FrozenDataset) -> list[Source]:
    return sorted(dataset.sources.all(), key=lambda s: (list(ADAPTERS).index(s.benchmark), s.pk))


def dataset_coverage(*, dataset: FrozenDataset) -> list[dict[str, Any]]:
    """Per benchmark in SPEC order: questions in the dataset, what the profile asked for and
    whether the source was short."""
    counts = dict(
        DatasetQuestion.objects.filter(dataset=dataset)
        .values("question__benchmark")
        .annotate(n=Count("id"))
        .values_list("question__benchmark", "n")
    )
    coverage = []
    for source in dataset_sources(dataset=dataset):
        coverage.append(
            {
                "benchmark": source.benchmark,
                "kind": ADAPTERS[source.benchmark].kind,
                "count": counts.get(source.benchmark, 0),
                "requested_count": source.requested_count,
                "short": source.short,
                "synthetic": source.synthetic,
                "source_id": source.pk,
            }
        )
    return coverage


def dataset_subject_groups(*, dataset: FrozenDataset) -> list[dict[str, Any]]:
    """(benchmark, subject, count) in SPEC benchmark order then subject name. A blank subject
    is reported as None: the loader did not know it."""
    rows = (
        DatasetQuestion.objects.filter(dataset=dataset)
        .values("question__benchmark", "question__subject")
        .annotate(n=Count("id"))
    )
    groups = [
        {
            "benchmark": row["question__benchmark"],
            "subject": row["question__subject"] or None,
            "count": row["n"],
        }
        for row in rows
    ]
    groups.sort(key=lambda g: (list(ADAPTERS).index(g["benchmark"]), g["subject"] or ""))
    return groups


def dataset_subjects_by_benchmark(*, dataset: FrozenDataset) -> dict[str, list[str]]:
    subjects: dict[str, list[str]] = defaultdict(list)
    for group in dataset_subject_groups(dataset=dataset):
        if group["subject"]:
            subjects[group["benchmark"]].append(group["subject"])
    return dict(subjects)


def dataset_questions(
    *,
    dataset: FrozenDataset,
    benchmark: str | None = None,
    subject: str | None = None,
    text: str | None = None,
) -> QuerySet[Question]:
    """The dataset's questions in frozen order, annotated with `position`. The text search
    reads the native id, the subject and the public payload, never the secret."""
    # DatasetQuestion has no reverse accessor on Question (related_name "+"), so membership
    # and position are subqueries on its unique (dataset, question) index.
    questions = Question.objects.filter(
        pk__in=DatasetQuestion.objects.filter(dataset=dataset).values("question_id")
    )
    if benchmark:
        questions = questions.filter(benchmark=benchmark)
    if subject:
        questions = questions.filter(subject=subject)
    if text:
        text = text.strip()
        questions = questions.annotate(payload_text=Cast("payload", TextField())).filter(
            Q(native_id__icontains=text)
            | Q(subject__icontains=text)
            | Q(payload_text__icontains=text)
        )
    return questions.annotate(position=_position(dataset)).order_by("position")


def _position(dataset: FrozenDataset) -> Subquery:
    return Subquery(
        DatasetQuestion.objects.filter(dataset=dataset, question=OuterRef("pk")).values("position")[
            :1
        ]
    )


def dataset_question_get(*, dataset: FrozenDataset, question_id: int) -> Question | None:
    return dataset_questions(dataset=dataset).filter(pk=question_id).first()
