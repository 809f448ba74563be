"""Composing frozen datasets from prepared sources (SPEC R8.2–R8.4)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from datasets.models import DatasetQuestion, FrozenDataset, Source
from datasets.selectors import dataset_questions
from datasets.services import (
    CompositionConflict,
    CompositionInvalid,
    dataset_compose,
    dataset_compose_receipt,
    source_prepare,
)
from tests.datasets.factories import source_with_questions

pytestmark = pytest.mark.django_db


@pytest.fixture
def smoke_sources() -> dict[str, Source]:
    return {
        key: source_prepare(benchmark=key, profile="smoke") for key in ("simpleqa", "gpqa", "arc")
    }


def nothing_written() -> bool:
    return not FrozenDataset.objects.exists() and not DatasetQuestion.objects.exists()


def test_one_whole_source_keeps_one_identity(smoke_sources: dict[str, Source]) -> None:
    source = smoke_sources["simpleqa"]
    first = dataset_compose_receipt(sources=[source])
    second = dataset_compose_receipt(sources=[source], name="another name")
    assert first.created and not second.created
    assert second.dataset.pk == first.dataset.pk
    assert second.dataset.name == first.dataset.name  # the name is not part of the identity
    assert first.model_requests == 0
    # Picking that source's benchmark out of a larger selection is the same whole source.
    picked = dataset_compose(sources=list(smoke_sources.values()), benchmarks=["simpleqa"])
    assert picked.pk == first.dataset.pk
    assert FrozenDataset.objects.count() == 1


def test_a_combination_and_a_subset_are_new_reusable_datasets(
    smoke_sources: dict[str, Source],
) -> None:
    all_three = dataset_compose(sources=list(smoke_sources.values()))
    pair = dataset_compose(sources=list(smoke_sources.values()), benchmarks=["gpqa", "simpleqa"])
    single = dataset_compose(sources=[smoke_sources["gpqa"]])
    assert len({all_three.identity_sha256, pair.identity_sha256, single.identity_sha256}) == 3
    # Request order does not matter: same content, same dataset.
    assert dataset_compose(sources=[smoke_sources["gpqa"], smoke_sources["simpleqa"]]) == pair
    assert FrozenDataset.objects.count() == 3
    assert sorted(s.benchmark for s in pair.sources.all()) == ["gpqa", "simpleqa"]
    expected = sum(s.count for s in smoke_sources.values())
    assert dataset_questions(dataset=all_three).count() == expected
    # Benchmark groups keep SPEC order (simpleqa before gpqa before arc), whole and in order.
    order = list(dataset_questions(dataset=all_three).values_list("benchmark", flat=True))
    assert order == sorted(order, key=["simpleqa", "gpqa", "arc"].index)


def test_profile_mismatch_is_rejected_and_nothing_is_written() -> None:
    smoke = source_prepare(benchmark="simpleqa", profile="smoke")
    quick = source_prepare(benchmark="gpqa", profile="quick")
    with pytest.raises(CompositionConflict) as caught:
        dataset_compose(sources=[smoke, quick])
    kinds = {c["kind"] for c in caught.value.conflicts}
    assert "profile_mismatch" in kinds
    assert "smoke" in str(caught.value) and "quick" in str(caught.value)
    assert nothing_written()


def test_seed_mismatch_is_rejected_and_nothing_is_written() -> None:
    a = source_prepare(benchmark="simpleqa", profile="smoke", seed=1)
    b = source_prepare(benchmark="gpqa", profile="smoke", seed=2)
    with pytest.raises(CompositionConflict) as caught:
        dataset_compose(sources=[a, b])
    assert [c["kind"] for c in caught.value.conflicts] == ["seed_mismatch"]
    assert nothing_written()


def test_split_mismatch_is_rejected_and_nothing_is_written() -> None:
    dev = source_with_questions(benchmark="simpleqa", profile="quick", split="dev")
    holdout = source_with_questions(benchmark="gpqa", profile="quick", split="holdout")
    with pytest.raises(CompositionConflict) as caught:
        dataset_compose(sources=[dev, holdout])
    assert [c["kind"] for c in caught.value.conflicts] == ["split_mismatch"]
    assert nothing_written()


def test_a_question_in_two_sources_is_a_conflict_naming_it() -> None:
    smoke = source_with_questions(profile="smoke", native_ids=["shared-1", "only-smoke"])
    quick = source_with_questions(profile="quick", native_ids=["shared-1", "only-quick"])
    with pytest.raises(CompositionConflict) as caught:
        dataset_compose(sources=[smoke, quick])
    duplicates = [c for c in caught.value.conflicts if c["kind"] == "duplicate_question"]
    assert duplicates == [
        {
            "kind": "duplicate_question",
            "detail": f"question mmlu-pro:shared-1 is in sources #{smoke.pk}, #{quick.pk}",
            "benchmark": "mmlu-pro",
            "native_id": "shared-1",
            "sources": [smoke.pk, quick.pk],
        }
    ]
    assert nothing_written()


def test_an_empty_or_impossible_selection_is_invalid(smoke_sources: dict[str, Source]) -> None:
    with pytest.raises(CompositionInvalid):
        dataset_compose(sources=[])
    with pytest.raises(CompositionInvalid, match="hle"):
        dataset_compose(sources=[smoke_sources["gpqa"]], benchmarks=["hle"])
    assert nothing_written()


def test_cli_compose_prints_the_dataset_and_reuses_it(
    smoke_sources: dict[str, Source], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [str(s.pk) for s in smoke_sources.values()]
    call_command("benchmark", "compose", "--source", ids[0], "--source", ids[1], "--name", "pair")
    out = capsys.readouterr().out
    dataset = FrozenDataset.objects.get()
    assert out.startswith("composed") and dataset.identity_sha256 in out
    assert "model requests: 0" in out and dataset.name == "pair"
    call_command("benchmark", "compose", "--source", ids[1], "--source", ids[0])
    assert capsys.readouterr().out.startswith(f"reused  dataset #{dataset.pk}")


def test_cli_compose_conflict_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    a = source_prepare(benchmark="simpleqa", profile="smoke", seed=1)
    b = source_prepare(benchmark="gpqa", profile="smoke", seed=2)
    with pytest.raises(SystemExit) as exit_info:
        call_command("benchmark", "compose", "--source", str(a.pk), "--source", str(b.pk))
    assert exit_info.value.code == 2
    assert "seed" in capsys.readouterr().err
    assert nothing_written()


def test_cli_datasets_lists_profile_totals_with_their_label(
    smoke_sources: dict[str, Source], capsys: pytest.CaptureFixture[str]
) -> None:
    dataset_compose(sources=list(smoke_sources.values()))
    call_command("benchmark", "datasets")
    out = capsys.readouterr().out
    assert "neither a de-duplicated question count nor any run's denominator" in out
    total = sum(s.count for s in smoke_sources.values())
    assert f"smoke     {total:>6} questions in 3 prepared set(s)" in out
