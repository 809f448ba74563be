"""Preparation of sources and composition of frozen datasets (DESIGN §3, §7; SPEC R8.2–R8.4).

Everything here reads local files only: no download, no re-sampling, no model call. Each write
happens in one durable transaction, after the slow part (reading and hashing the official
files) is done outside it.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from datasets.benchmarks import ADAPTERS, Adapter, LoadedQuestion, LoadResult, get_adapter
from datasets.models import (
    DatasetQuestion,
    FrozenDataset,
    Question,
    QuestionSecret,
    Source,
    SourceQuestion,
)
from datasets.packages import LocatedPackage, locate, package_origin
from datasets.profiles import (
    DEFAULT_SEED,
    PROFILE_NAMES,
    PROFILES,
    ProfileName,
    order_questions,
    select_window,
)
from datasets.synthetic import SYNTHETIC_DEFAULT_SIZES, write_synthetic
from srbench.canonical import sha256_hex
from srbench.refusals import Refusal

# Bumped when what a Source's content hash covers changes; old hashes then stay explainable.
SOURCE_HASH_VERSION = 1
DATASET_HASH_VERSION = 1

# The demo runs the benchmarks that need neither a sandbox nor a tool loop.
DEMO_BENCHMARKS: tuple[str, ...] = ("mmlu-pro", "gpqa", "simpleqa", "hle", "arc")

# A composition conflict report lists at most this many duplicate questions; the count is exact.
MAX_LISTED_DUPLICATES = 20


class PreparationConflict(Refusal):
    """A source already prepared at this (benchmark, profile, seed, split) holds other content.

    A prepared source is frozen evidence for every run that used it, so it is never replaced.
    """

    http_status = 409
    code = "preparation_conflict"

    def __init__(self, *, existing: Source, new_content_sha256: str) -> None:
        self.existing = existing
        self.new_content_sha256 = new_content_sha256
        super().__init__(
            f"{existing} is already prepared as source #{existing.pk} with content sha256 "
            f"{existing.content_sha256}; this input gives {new_content_sha256}. A prepared "
            "source is never overwritten: prepare the new file under another seed.",
            detail={"source": existing.pk, "content_sha256": new_content_sha256},
        )


class CompositionInvalid(Refusal, ValueError):
    """The request cannot describe a composition at all (no sources, an unknown benchmark)."""

    http_status = 400
    code = "invalid"


class CompositionConflict(Refusal):
    """The chosen sources cannot be combined; `conflicts` lists every reason, each a dict with
    `kind` and a human `detail`. Nothing is written when this is raised."""

    http_status = 409
    code = "composition_conflict"

    def __init__(self, conflicts: list[dict[str, Any]]) -> None:
        self.conflicts = conflicts
        super().__init__(
            "The selected sources cannot be composed; nothing was written.",
            detail={"conflicts": conflicts},
        )

    def __str__(self) -> str:
        return "; ".join(c["detail"] for c in self.conflicts)


@dataclass(frozen=True)
class PreparedSource:
    """What `source_prepare_receipt` did: `created` is False for an idempotent no-op."""

    source: Source
    created: bool


@dataclass(frozen=True)
class CompositionReceipt:
    """What `dataset_compose_receipt` did. Composition never talks to a model."""

    dataset: FrozenDataset
    created: bool
    model_requests: int = field(default=0)


# ---------------------------------------------------------------------------------------------
# Hashing: one definition of each content address.


def question_content_sha256(question: LoadedQuestion) -> str:
    """The content address of a question, secret included: two loads that differ only in a
    reference answer are two different questions and must not share a row."""
    return sha256_hex(
        {
            "benchmark": question.benchmark,
            "native_id": question.native_id,
            "subject": question.subject,
            "payload": question.payload,
            "secret": question.secret,
        }
    )


def source_content_sha256(
    *,
    benchmark: str,
    profile: str,
    seed: int,
    split: str,
    requested_count: int,
    question_hashes: Sequence[str],
) -> str:
    """Covers the coordinate and the ordered question hashes, not file paths or provenance:
    the same questions read from another copy of the same file are the same source."""
    return sha256_hex(
        {
            "version": SOURCE_HASH_VERSION,
            "benchmark": benchmark,
            "profile": profile,
            "seed": seed,
            "split": split,
            "requested_count": requested_count,
            "questions": list(question_hashes),
        }
    )


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _origin_files(root: Path, files: Iterable[Path]) -> list[dict[str, Any]]:
    base = root if root.is_dir() else root.parent
    described = []
    for file in sorted(set(files)):
        try:
            name = str(file.relative_to(base))
        except ValueError:  # a loader may read a file beside the given path
            name = str(file)
        described.append({"path": name, "sha256": _file_sha256(file), "bytes": file.stat().st_size})
    return described


# ---------------------------------------------------------------------------------------------
# Preparation


def source_prepare_receipt(
    *,
    benchmark: str,
    profile: str,
    seed: int = DEFAULT_SEED,
    source_path: Path | str | None = None,
    from_package: bool = False,
    package: str | None = None,
) -> PreparedSource:
    """Prepare one benchmark's frozen question window and say whether anything was written.

    `from_package` reads the benchmark's public data in place from its installed registry
    package (datasets.packages; `package` may name the distribution to insist on) and records
    the distribution, version and file hashes in the provenance (SPEC R9; issue 22).

    Idempotent: identical content at an already prepared (benchmark, profile, seed, split)
    returns that Source unchanged (`created=False`); different content raises
    `PreparationConflict`. Raises `LoaderError` for a malformed file, `PackageUnavailable`
    (a ValueError) for a package that is not installed or was modified, `ValueError` for an
    unknown benchmark or profile. Nothing is written before every file has been read.
    """
    adapter, profile_name, path, located = _source_origin(
        benchmark, profile, source_path=source_path, from_package=from_package, package=package
    )
    # Slow, read-only work before any transaction: parsing and hashing large official files.
    package_provenance: dict[str, Any] = {}
    origin_files: list[dict[str, Any]] | None
    if located is not None:
        result = adapter.load_with_options(path, located.entry.options)
        package_provenance = package_origin(located, result.files)
        origin_files = package_provenance.pop("files")
    else:
        result = adapter.load_with_report(path)
        origin_files = None  # hashed below, only when a source is written
    ordered = order_questions(result.questions, seed)
    selected, split, short = select_window(ordered, profile_name, benchmark=benchmark)
    requested_count = PROFILES[benchmark].count(profile_name)
    hashed = [(question_content_sha256(q), q) for q in selected]
    content_sha256 = source_content_sha256(
        benchmark=benchmark,
        profile=profile,
        seed=seed,
        split=split,
        requested_count=requested_count,
        question_hashes=[h for h, _ in hashed],
    )
    coordinate = {"benchmark": benchmark, "profile": profile, "seed": seed, "split": split}

    existing = Source.objects.filter(**coordinate).first()
    if existing is not None:
        return PreparedSource(_same_or_conflict(existing, content_sha256), created=False)

    provenance = _source_provenance(
        adapter, path, result, located, package_provenance, origin_files, profile, requested_count
    )
    source = Source(
        **coordinate,
        content_sha256=content_sha256,
        provenance=provenance,
        requested_count=requested_count,
        count=len(selected),
        synthetic=result.synthetic,
    )
    return _source_store(source, hashed)


def _source_provenance(
    adapter: Adapter,
    path: Path,
    result: LoadResult,
    located: LocatedPackage | None,
    package_provenance: dict[str, Any],
    origin_files: list[dict[str, Any]] | None,
    profile: str,
    requested_count: int,
) -> dict[str, Any]:
    """Where a Source came from: the files read (hashed now, unless the package's are), the
    loader, what it skipped and the window taken."""
    provenance: dict[str, Any] = {
        "source_path": str(path),
        "origin_files": (
            origin_files if origin_files is not None else _origin_files(path, result.files)
        ),
        "loader_version": adapter.loader_version,
        "licence_note": adapter.licence_note,
        "synthetic": result.synthetic,
        "skipped": dict(result.skipped),
        "loaded_count": len(result.questions),
        "window": {
            "start": PROFILES[adapter.key].quick if profile == "standard" else 0,
            "size": requested_count,
        },
    }
    if located is not None:
        provenance["package"] = package_provenance
    return provenance


def _source_origin(
    benchmark: str,
    profile: str,
    *,
    source_path: Path | str | None,
    from_package: bool,
    package: str | None,
) -> tuple[Adapter, ProfileName, Path, LocatedPackage | None]:
    """Check the request and find what to read: (adapter, profile, path, located package)."""
    try:
        adapter = get_adapter(benchmark)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    if profile not in PROFILE_NAMES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILE_NAMES)}")
    profile_name: ProfileName = profile  # type: ignore[assignment]
    if package and not from_package:
        raise ValueError("a package name needs from_package")
    if not from_package:
        path = Path(source_path) if source_path is not None else adapter.fixture_path()
        return adapter, profile_name, path, None
    if source_path is not None:
        raise ValueError("choose either a source path or a package, not both")
    located = locate(benchmark, package)
    return adapter, profile_name, located.path, located


def _source_store(source: Source, hashed: Sequence[tuple[str, LoadedQuestion]]) -> PreparedSource:
    """Write a new Source and its ordered questions in one transaction; a concurrent prepare of
    the same coordinate that committed first is judged like an existing one."""
    try:
        with transaction.atomic(durable=True):
            source.save(force_insert=True)
            questions = _questions_store(hashed)
            SourceQuestion.objects.bulk_create(
                SourceQuestion(source=source, question=questions[h], position=position)
                for position, (h, _) in enumerate(hashed)
            )
    except IntegrityError:
        # A concurrent prepare of the same coordinate committed first; judge against it.
        existing = Source.objects.filter(
            benchmark=source.benchmark, profile=source.profile, seed=source.seed, split=source.split
        ).first()
        if existing is None:
            raise
        return PreparedSource(_same_or_conflict(existing, source.content_sha256), created=False)
    return PreparedSource(source, created=True)


def source_prepare(
    *,
    benchmark: str,
    profile: str,
    seed: int = DEFAULT_SEED,
    source_path: Path | str | None = None,
    from_package: bool = False,
    package: str | None = None,
) -> Source:
    """Load the official file(s) (default: the adapter's bundled fixture), take the profile's
    window of the seeded order and store it as a frozen Source; short sources are marked by
    count < requested_count and never padded.

    Idempotent: re-preparing identical input returns the same Source; different content for
    an existing coordinate raises `PreparationConflict` and writes nothing.
    """
    return source_prepare_receipt(
        benchmark=benchmark,
        profile=profile,
        seed=seed,
        source_path=source_path,
        from_package=from_package,
        package=package,
    ).source


def _same_or_conflict(existing: Source, content_sha256: str) -> Source:
    if existing.content_sha256 != content_sha256:
        raise PreparationConflict(existing=existing, new_content_sha256=content_sha256)
    return existing


def _questions_store(hashed: Sequence[tuple[str, LoadedQuestion]]) -> dict[str, Question]:
    """Content-addressed insert: questions another source already stored are reused.

    `ignore_conflicts` lets two prepares that share questions run concurrently; the secret is
    written in the same transaction so no question is ever visible without one.
    """
    Question.objects.bulk_create(
        [
            Question(
                benchmark=q.benchmark,
                native_id=q.native_id,
                subject=q.subject,
                payload=q.payload,
                content_sha256=h,
            )
            for h, q in hashed
        ],
        ignore_conflicts=True,
    )
    stored = {
        q.content_sha256: q
        for q in Question.objects.filter(content_sha256__in=[h for h, _ in hashed])
    }
    QuestionSecret.objects.bulk_create(
        [QuestionSecret(question=stored[h], data=q.secret) for h, q in hashed],
        ignore_conflicts=True,
    )
    return stored


# ---------------------------------------------------------------------------------------------
# Composition


def _benchmark_rank(benchmark: str) -> int:
    # SPEC R4.1 order, so a composition's question order does not depend on the request order.
    return list(ADAPTERS).index(benchmark)


def _mismatch(sources: Sequence[Source], attribute: str) -> dict[str, Any] | None:
    groups: dict[str, list[int]] = defaultdict(list)
    for source in sources:
        groups[str(getattr(source, attribute))].append(source.pk)
    if len(groups) < 2:
        return None
    listing = "; ".join(
        f"{value} (source {', '.join(f'#{pk}' for pk in pks)})" for value, pks in groups.items()
    )
    return {
        "kind": f"{attribute}_mismatch",
        "detail": f"selected sources must share one {attribute}; got {listing}",
        "values": dict(groups),
    }


def _composition_conflicts(sources: Sequence[Source]) -> list[dict[str, Any]]:
    conflicts = [
        conflict
        for attribute in ("profile", "seed", "split")
        if (conflict := _mismatch(sources, attribute)) is not None
    ]
    per_benchmark: dict[str, list[int]] = defaultdict(list)
    for source in sources:
        per_benchmark[source.benchmark].append(source.pk)
    for benchmark, pks in per_benchmark.items():
        if len(pks) > 1:
            conflicts.append(
                {
                    "kind": "duplicate_benchmark",
                    "detail": f"{benchmark} comes from several sources "
                    f"({', '.join(f'#{pk}' for pk in pks)}); a benchmark group is taken whole "
                    "from exactly one source",
                    "benchmark": benchmark,
                    "sources": pks,
                }
            )
    owners: dict[tuple[str, str], list[int]] = defaultdict(list)
    rows = SourceQuestion.objects.filter(source__in=sources).values_list(
        "source_id", "question__benchmark", "question__native_id"
    )
    for source_id, benchmark, native_id in rows:
        owners[(benchmark, native_id)].append(source_id)
    duplicates = sorted((key, pks) for key, pks in owners.items() if len(pks) > 1)
    for (benchmark, native_id), pks in duplicates[:MAX_LISTED_DUPLICATES]:
        conflicts.append(
            {
                "kind": "duplicate_question",
                "detail": f"question {benchmark}:{native_id} is in sources "
                f"{', '.join(f'#{pk}' for pk in sorted(pks))}",
                "benchmark": benchmark,
                "native_id": native_id,
                "sources": sorted(pks),
            }
        )
    if len(duplicates) > MAX_LISTED_DUPLICATES:
        conflicts.append(
            {
                "kind": "duplicate_question",
                "detail": f"… and {len(duplicates) - MAX_LISTED_DUPLICATES} more duplicate "
                "questions",
                "more": len(duplicates) - MAX_LISTED_DUPLICATES,
            }
        )
    return conflicts


def _default_name(profile: str, seed: int, benchmarks: Sequence[str]) -> str:
    what = "all benchmarks" if len(benchmarks) == len(ADAPTERS) else ", ".join(benchmarks)
    return f"{profile} · seed {seed} · {what}"


def dataset_compose_receipt(
    *,
    sources: Sequence[Source],
    benchmarks: Sequence[str] | None = None,
    name: str | None = None,
    user: Any = None,
) -> CompositionReceipt:
    """Compose whole benchmark groups from frozen sources into a content-addressed dataset.

    Idempotent: the identity covers the question hashes, the sources (ids and hashes), the
    profile, seed, split and selection, so the same composition returns the existing dataset
    (`created=False`; its name and creator are kept). Raises `CompositionInvalid` for an empty
    or impossible selection and `CompositionConflict` (listing every conflict, nothing
    written) when the sources disagree on profile, seed or split or share a question.
    """
    chosen = _composition_sources(sources, benchmarks)
    first = chosen[0]
    ordered = _composition_questions(chosen)
    selected_benchmarks = [s.benchmark for s in chosen]
    selection = {"benchmarks": selected_benchmarks}
    identity = sha256_hex(
        {
            "version": DATASET_HASH_VERSION,
            "profile": first.profile,
            "seed": first.seed,
            "split": first.split,
            "selection": selection,
            "sources": [
                {"id": s.pk, "benchmark": s.benchmark, "content_sha256": s.content_sha256}
                for s in chosen
            ],
            "questions": [h for _, h in ordered],
        }
    )

    existing = FrozenDataset.objects.filter(identity_sha256=identity).first()
    if existing is not None:
        return CompositionReceipt(existing, created=False)
    dataset = FrozenDataset(
        identity_sha256=identity,
        name=(name or "").strip() or _default_name(first.profile, first.seed, selected_benchmarks),
        profile=first.profile,
        seed=first.seed,
        split=first.split,
        selection=selection,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    return _dataset_store(dataset, chosen, ordered)


def _composition_sources(
    sources: Sequence[Source], benchmarks: Sequence[str] | None
) -> list[Source]:
    """The distinct chosen sources holding the wanted benchmarks, in the spec's benchmark
    order; raises `CompositionInvalid` or `CompositionConflict` (nothing written)."""
    unique = {source.pk: source for source in sources}
    if not unique:
        raise CompositionInvalid("choose at least one prepared source")
    chosen = list(unique.values())
    if benchmarks is not None:
        wanted = set(benchmarks)
        if not wanted:
            raise CompositionInvalid("choose at least one benchmark")
        missing = sorted(wanted - {s.benchmark for s in chosen})
        if missing:
            raise CompositionInvalid(
                f"no selected source holds benchmark(s) {', '.join(missing)}; "
                "composition never prepares or downloads"
            )
        chosen = [s for s in chosen if s.benchmark in wanted]
    conflicts = _composition_conflicts(chosen)
    if conflicts:
        raise CompositionConflict(conflicts)
    chosen.sort(key=lambda s: (_benchmark_rank(s.benchmark), s.pk))
    return chosen


def _composition_questions(chosen: Sequence[Source]) -> list[tuple[int, str]]:
    """(question id, content hash) of every chosen source's questions, source by source, each
    in its frozen position order."""
    rows = (
        SourceQuestion.objects.filter(source__in=chosen)
        .order_by("position")
        .values_list("source_id", "question_id", "question__content_sha256")
    )
    per_source: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for source_id, question_id, content_sha256 in rows:
        per_source[source_id].append((question_id, content_sha256))
    return [entry for source in chosen for entry in per_source[source.pk]]


def _dataset_store(
    dataset: FrozenDataset, chosen: Sequence[Source], ordered: Sequence[tuple[int, str]]
) -> CompositionReceipt:
    """Write a new dataset, its sources and its ordered questions in one transaction; the same
    composition committed concurrently is returned as existing (content addressing)."""
    try:
        with transaction.atomic(durable=True):
            dataset.save(force_insert=True)
            dataset.sources.set(chosen)
            DatasetQuestion.objects.bulk_create(
                DatasetQuestion(dataset=dataset, question_id=question_id, position=position)
                for position, (question_id, _) in enumerate(ordered)
            )
    except IntegrityError:
        # The same composition committed concurrently: content addressing makes it ours too.
        existing = FrozenDataset.objects.filter(identity_sha256=dataset.identity_sha256).first()
        if existing is None:
            raise
        return CompositionReceipt(existing, created=False)
    return CompositionReceipt(dataset, created=True)


def dataset_compose(
    *,
    sources: Sequence[Source],
    benchmarks: Sequence[str] | None = None,
    name: str | None = None,
    user: Any = None,
) -> FrozenDataset:
    """Compose whole benchmark groups from sources sharing profile, seed and split (R8.2–R8.4).

    Idempotent: one whole source, or any given composition, always maps to the same dataset;
    a subset or combination yields a new reusable one. Conflicts raise `CompositionConflict`
    and write nothing. No download, no re-sampling, no model call.
    """
    return dataset_compose_receipt(
        sources=sources, benchmarks=benchmarks, name=name, user=user
    ).dataset


# ---------------------------------------------------------------------------------------------
# Demo


def demo_datasets_prepare(
    *, profile: str = "smoke", seed: int = DEFAULT_SEED, work_dir: Path | str
) -> FrozenDataset:
    """Prepare the demo benchmarks (MCQ, judge and grid) from synthetic official-format files
    written into `work_dir`, sized so every profile is met, and compose them into one dataset.

    Idempotent: the generator writes the same bytes for the same seed, so a second call
    finds the same sources and returns the same dataset. If a non-synthetic source already
    occupies one of these coordinates, `PreparationConflict` says so rather than mixing.
    """
    root = Path(work_dir)
    sources = []
    for benchmark in DEMO_BENCHMARKS:
        # A fixed size per benchmark (not the profile's count): the seeded order is over the
        # whole file, so the file must not change with the profile asked for.
        path = write_synthetic(
            benchmark, root / benchmark, SYNTHETIC_DEFAULT_SIZES[benchmark], seed
        )
        sources.append(
            source_prepare(benchmark=benchmark, profile=profile, seed=seed, source_path=path)
        )
    return dataset_compose(sources=sources, name=f"demo · {profile} · synthetic")
