"""The synthetic generator writes official-format files the loaders read back unchanged."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from datasets.benchmarks import get_adapter
from datasets.synthetic import SYNTHETIC_DEFAULT_SIZES, write_synthetic


def test_mmlu_pro_2000_rows_round_trip_field_by_field(tmp_path: Path) -> None:
    root = write_synthetic("mmlu-pro", tmp_path, 2000, seed=11)
    rows = pq.read_table(root / "data" / "test-00000-of-00001.parquet").to_pylist()
    report = get_adapter("mmlu-pro").load_with_report(root)
    assert report.synthetic and len(rows) == len(report.questions) == 2000
    for row, q in zip(rows, report.questions, strict=True):
        assert q.native_id == str(row["question_id"])
        assert q.subject == row["category"]
        assert q.payload == {
            "question": row["question"],
            "options": row["options"],
            "category": row["category"],
            "src": row["src"],
        }
        assert q.secret == {"answer": row["answer"]}
        assert row["options"][row["answer_index"]] == q.payload["options"][ord(row["answer"]) - 65]
        assert row["src"].startswith("synthetic-")
    assert len({q.subject for q in report.questions}) >= 10


@pytest.mark.parametrize("key", sorted(SYNTHETIC_DEFAULT_SIZES))
def test_default_sizes_cover_quick_plus_standard_and_are_labelled(key: str, tmp_path: Path) -> None:
    from datasets.profiles import PROFILES

    n = SYNTHETIC_DEFAULT_SIZES[key]
    assert n >= PROFILES[key].quick + PROFILES[key].standard
    report = get_adapter(key).load_with_report(write_synthetic(key, tmp_path, n, seed=5))
    assert report.synthetic and len(report.questions) == n
    if key != "mmlu-pro":  # integer ids; marked in src instead
        assert all(
            q.native_id.startswith("synthetic-") or "[synthetic" in q.payload["question"]
            for q in report.questions
        )


@pytest.mark.parametrize("key", sorted(SYNTHETIC_DEFAULT_SIZES))
def test_same_seed_same_questions_different_seed_different(key: str, tmp_path: Path) -> None:
    adapter = get_adapter(key)
    a = adapter.load(write_synthetic(key, tmp_path / "a", 30, seed=1))
    b = adapter.load(write_synthetic(key, tmp_path / "b", 30, seed=1))
    c = adapter.load(write_synthetic(key, tmp_path / "c", 30, seed=2))
    assert a == b
    assert a != c


def test_unknown_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no synthetic generator"):
        write_synthetic("tau3", tmp_path, 3, seed=1)
