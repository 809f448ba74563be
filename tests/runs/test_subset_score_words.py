"""A score over a subset of the benchmarks is a WEIGHTED mean (sr-bench's weights rescaled to the
benchmarks present, srbench.stats.weighted_quality; SPEC R4.2), and every place that shows it
says so (outside probe, session 5: it was called a "subset macro average", which is the
unweighted mean): the run page, with the weights it used, the report's label the API serves,
and the CLI's report line. The API's field names do not change."""

from __future__ import annotations

from fractions import Fraction

import pytest
from django.utils import timezone

from runs.interfaces.cli import report_text
from runs.models import Cell
from runs.reporting.report import run_report
from tests import factories as f
from tests.runs.test_pages import manifest_for

pytestmark = pytest.mark.django_db


def two_benchmark_run():
    """mmlu-pro all right (weight 0.1), simpleqa all wrong (weight 0.3): the weighted subset
    average is 0.1/0.4 = 0.25, where the macro average would be 0.5."""
    target = f.target_create()
    manifest = manifest_for([target], benchmarks=("mmlu-pro", "simpleqa"))
    manifest["benchmarks"]["simpleqa"]["weight"] = "0.3"
    run = f.run_create(
        status="completed",
        manifest=manifest,
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    for benchmark, correct in (("mmlu-pro", True), ("simpleqa", False)):
        for _ in range(2):
            f.cell_create(
                run=run,
                target=target,
                question=f.question_create(benchmark=benchmark),
                status="completed",
                scored=True,
                correct=correct,
            )
    assert Cell.objects.filter(run=run).count() == 4
    return run, target


def test_the_subset_score_is_called_a_weighted_average_with_its_weights(client):
    run, target = two_benchmark_run()
    client.force_login(run.owner)
    report = run_report(run=run)
    score = report["targets"][0]["score"]
    assert set(score) == {"kind", "label", "benchmarks", "value", "exact"}  # fields unchanged
    assert score["kind"] == "subset" and Fraction(score["exact"]) == Fraction(1, 4)
    assert "weighted subset average" in score["label"] and "macro" not in score["label"]

    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "macro average" not in html
    assert "weighted subset average" in html
    weights = html.split(f'id="score-weights-{target.slug}"')[1].split("</p>")[0]
    assert "mmlu-pro 0.2500" in weights and "simpleqa 0.7500" in weights
    assert "sr-bench weight 0.1" in weights and "sr-bench weight 0.3" in weights

    lines = report_text(report)
    assert f"{target.slug} (single): weighted subset average 0.25" in lines, lines
    assert "macro" not in lines
