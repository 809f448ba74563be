"""Preparing frozen sources from official files (DESIGN §7): windows, idempotency, provenance."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest
from django.core.management import call_command

from datasets.benchmarks import ADAPTERS, get_adapter
from datasets.models import FrozenDataset, Question, QuestionSecret, Source, SourceQuestion
from datasets.profiles import DEFAULT_SEED, PROFILES
from datasets.services import (
    DEMO_BENCHMARKS,
    PreparationConflict,
    demo_datasets_prepare,
    source_prepare,
)
from datasets.synthetic import write_synthetic
from tests.datasets.factories import copy_tree

pytestmark = pytest.mark.django_db


def native_ids(source: Source) -> list[str]:
    return list(
        SourceQuestion.objects.filter(source=source)
        .order_by("position")
        .values_list("question__native_id", flat=True)
    )


@pytest.fixture
def gpqa_full(tmp_path: Path) -> Path:
    # 198 rows = quick 40 + standard 158: every profile is met exactly.
    return write_synthetic("gpqa", tmp_path / "gpqa", 198, seed=7)


def test_each_profile_takes_its_count_and_split(gpqa_full: Path) -> None:
    counts = PROFILES["gpqa"]
    for profile, expected, split in (
        ("smoke", counts.smoke, "dev"),
        ("quick", counts.quick, "dev"),
        ("standard", counts.standard, "holdout"),
    ):
        source = source_prepare(benchmark="gpqa", profile=profile, source_path=gpqa_full)
        assert (source.count, source.requested_count, source.split) == (expected, expected, split)
        assert not source.short and source.synthetic
        assert SourceQuestion.objects.filter(source=source).count() == expected


def test_smoke_is_the_head_of_quick_and_standard_never_overlaps_quick(gpqa_full: Path) -> None:
    smoke = native_ids(source_prepare(benchmark="gpqa", profile="smoke", source_path=gpqa_full))
    quick = native_ids(source_prepare(benchmark="gpqa", profile="quick", source_path=gpqa_full))
    standard = native_ids(
        source_prepare(benchmark="gpqa", profile="standard", source_path=gpqa_full)
    )
    assert smoke == quick[: len(smoke)]
    assert not set(quick) & set(standard)
    # Shared questions are stored once (content-addressed), with their secret.
    assert Question.objects.filter(benchmark="gpqa").count() == len(quick) + len(standard)
    assert QuestionSecret.objects.count() == Question.objects.count()


def test_same_seed_again_returns_the_same_source_and_writes_nothing(gpqa_full: Path) -> None:
    first = source_prepare(benchmark="gpqa", profile="quick", source_path=gpqa_full)
    rows = (Source.objects.count(), Question.objects.count(), SourceQuestion.objects.count())
    again = source_prepare(benchmark="gpqa", profile="quick", source_path=gpqa_full)
    assert again.pk == first.pk and again.content_sha256 == first.content_sha256
    assert rows == (
        Source.objects.count(),
        Question.objects.count(),
        SourceQuestion.objects.count(),
    )


def test_another_seed_gives_another_order_of_the_same_file(gpqa_full: Path) -> None:
    a = source_prepare(benchmark="gpqa", profile="quick", seed=1, source_path=gpqa_full)
    b = source_prepare(benchmark="gpqa", profile="quick", seed=2, source_path=gpqa_full)
    assert a.pk != b.pk and a.content_sha256 != b.content_sha256
    assert native_ids(a) != native_ids(b)


def test_short_source_is_marked_and_never_padded() -> None:
    # The bundled MMLU-Pro fixture holds 12 questions; smoke asks for 14.
    source = source_prepare(benchmark="mmlu-pro", profile="smoke")
    assert source.requested_count == 14
    assert source.count == 12 and source.short
    assert SourceQuestion.objects.filter(source=source).count() == 12


def test_changed_content_at_a_prepared_coordinate_is_a_conflict_not_an_overwrite(
    tmp_path: Path,
) -> None:
    fixture = get_adapter("simpleqa").fixture_path()
    path = copy_tree(fixture, tmp_path / "simpleqa")
    original = source_prepare(benchmark="simpleqa", profile="smoke", source_path=path)
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["answer"] = f"corrected {row['answer']}"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["metadata", "problem", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    questions_before = Question.objects.count()

    with pytest.raises(PreparationConflict, match=r"never overwritten") as caught:
        source_prepare(benchmark="simpleqa", profile="smoke", source_path=path)

    assert caught.value.existing.pk == original.pk
    assert Source.objects.get().content_sha256 == original.content_sha256
    assert Question.objects.count() == questions_before


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_provenance_records_the_hash_of_each_origin_file() -> None:
    simpleqa = get_adapter("simpleqa").fixture_path()
    source = source_prepare(benchmark="simpleqa", profile="smoke")
    [origin] = source.provenance["origin_files"]
    assert origin["path"] == simpleqa.name and origin["sha256"] == sha256_of(simpleqa)
    assert source.provenance["source_path"] == str(simpleqa)
    assert source.provenance["loader_version"] == ADAPTERS["simpleqa"].loader_version
    assert source.provenance["licence_note"] == ADAPTERS["simpleqa"].licence_note
    assert source.provenance["synthetic"] is False and source.synthetic is False

    arc = get_adapter("arc").fixture_path()
    source = source_prepare(benchmark="arc", profile="smoke")
    recorded = {f["path"]: f["sha256"] for f in source.provenance["origin_files"]}
    on_disk = {str(p.relative_to(arc)): sha256_of(p) for p in arc.glob("*.json")}
    assert recorded == on_disk


def test_skipped_rows_are_counted_in_provenance() -> None:
    # The HLE fixture carries one image question a text-only loader skips.
    source = source_prepare(benchmark="hle", profile="smoke")
    assert source.provenance["skipped"] == {"image": 1}


def test_cli_prepare_reports_each_source_with_count_short_flag_and_hash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    call_command("benchmark", "prepare", "--benchmark", "all", "--profile", "smoke")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(ADAPTERS)
    mmlu = Source.objects.get(benchmark="mmlu-pro")
    [line] = [line for line in lines if line.split()[1].startswith("mmlu-pro/")]
    assert line.startswith("prepared")
    assert "12/14 questions (SHORT)" in line and mmlu.content_sha256 in line

    call_command("benchmark", "prepare", "--benchmark", "mmlu-pro", "--profile", "smoke")
    assert capsys.readouterr().out.startswith("unchanged")


def test_cli_loader_error_names_file_row_and_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "simple_qa_test_set.csv"
    broken.write_text(
        "metadata,problem,answer\n\"{'topic': 'Art'}\",Who painted it?,Someone\n"
        "not-a-dict,Second?,x\n",
        encoding="utf-8",
    )
    with pytest.raises(SystemExit) as exit_info:
        call_command(
            "benchmark",
            "prepare",
            "--benchmark",
            "simpleqa",
            "--profile",
            "smoke",
            "--source-path",
            str(broken),
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(broken) in err and "row 2" in err and "'metadata'" in err
    assert not Source.objects.exists()


def test_cli_conflict_exits_2_with_the_existing_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_synthetic("arc", tmp_path / "a", 20, seed=1)
    existing = source_prepare(benchmark="arc", profile="smoke", source_path=path)
    other = write_synthetic("arc", tmp_path / "b", 20, seed=2)
    with pytest.raises(SystemExit) as exit_info:
        call_command(
            "benchmark", "prepare", "--benchmark", "arc", "--profile", "smoke",
            "--source-path", str(other),
        )  # fmt: skip
    assert exit_info.value.code == 2
    assert f"source #{existing.pk}" in capsys.readouterr().err


def test_demo_datasets_are_synthetic_full_and_idempotent(tmp_path: Path) -> None:
    dataset = demo_datasets_prepare(profile="smoke", work_dir=tmp_path)
    sources = list(dataset.sources.all())
    assert sorted(s.benchmark for s in sources) == sorted(DEMO_BENCHMARKS)
    for source in sources:
        assert source.synthetic and source.provenance["synthetic"] is True
        assert source.count == PROFILES[source.benchmark].smoke and not source.short
        assert source.seed == DEFAULT_SEED

    again = demo_datasets_prepare(profile="smoke", work_dir=tmp_path)
    assert again.pk == dataset.pk
    assert FrozenDataset.objects.count() == 1 and Source.objects.count() == len(DEMO_BENCHMARKS)
