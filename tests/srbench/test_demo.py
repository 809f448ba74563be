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
