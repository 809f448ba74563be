"""`make demo`'s plan. The demo itself, on the README's embedded path (no DATABASE_URL, no
broker server), is tested end to end in a browser by tests/e2e/test_readme_path.py."""

import pytest


@pytest.mark.django_db
def test_without_a_sandbox_the_demo_leaves_code_benchmarks_out_of_its_plan():
    """Issue 18: no bubblewrap means the code and agent benchmarks are not run (said before any
    model call), never failed cells inside an otherwise complete run."""
    from datasets.services import dataset_compose
    from srbench.demo import demo_benchmarks, demo_plan
    from tests.datasets.factories import source_with_questions

    sources = [source_with_questions(benchmark=b) for b in ("mmlu-pro", "livecodebench", "scicode")]
    dataset = dataset_compose(sources=sources, name="demo-without-sandbox")
    assert demo_benchmarks(dataset, sandbox=True) == (
        ["livecodebench", "mmlu-pro", "scicode"],
        [],
    )
    run, not_run = demo_benchmarks(dataset, sandbox=False)
    assert (run, not_run) == (["mmlu-pro"], ["livecodebench", "scicode"])
    assert demo_plan(dataset, run)["benchmarks"] == ["mmlu-pro"]


@pytest.mark.django_db
def test_the_headline_run_asks_held_out_questions_the_smoke_run_never_showed(tmp_path):
    """Issue 35: the headline run reads MMLU-Pro's standard window (split holdout, 2,000
    questions) from the demo's own synthetic file, disjoint from the smoke questions, and its
    plan freezes the non-inferiority margin before any call."""
    from datasets.profiles import DEFAULT_SEED
    from datasets.services import dataset_compose, source_prepare
    from datasets.synthetic import SYNTHETIC_DEFAULT_SIZES, write_synthetic
    from srbench.demo import DemoData, headline_dataset, headline_plan

    path = write_synthetic(
        "mmlu-pro", tmp_path / "mmlu-pro", SYNTHETIC_DEFAULT_SIZES["mmlu-pro"], DEFAULT_SEED
    )
    smoke = source_prepare(benchmark="mmlu-pro", profile="smoke", source_path=path)
    data = DemoData(dataset_compose(sources=[smoke], name="demo-smoke"), {"mmlu-pro": "synthetic"})
    held = headline_dataset(data)
    assert held.split == "holdout"
    held_ids = set(held.questions.values_list("native_id", flat=True))
    smoke_ids = set(data.dataset.questions.values_list("native_id", flat=True))
    assert len(held_ids) == 2000 and len(smoke_ids) == 14
    assert not held_ids & smoke_ids
    plan = headline_plan(held)
    assert plan["non_inferiority_margin"] == "0.10"
    assert plan["targets"] == ["sim-strong", "sim-weak", "sim-router"]
