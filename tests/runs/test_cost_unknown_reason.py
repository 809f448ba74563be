"""A target's cost unknown for a reason other than a stream without usage is said too (outside
probe "kb", 2026-12-07): a router whose receipts are hostile left every subject call unpriced,
and the report, the run page, the comparison and the CLI showed "unknown" with no reason (its
`usage_unknown_reason` was null). Real worker, the simulator on loopback."""

from __future__ import annotations

import pytest

from compare.services import comparison_build
from runs.interfaces.cli import report_text
from runs.models import Call
from runs.planning.services import run_create
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

BENCHMARKS = ["mmlu-pro", "simpleqa"]  # the router sends simpleqa to sim-weak


def both_targets_run(models: dict[str, dict[str, object]]):
    with es.simulator(BENCHMARKS, models=models) as url:
        es.sim_targets(url)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "unknown-cost",
                "dataset": es.fixture_dataset(BENCHMARKS).pk,
                "targets": ["sim-strong", "sim-router"],
                "judges": {"simpleqa": "sim-judge"},
                "limits": {"concurrency": 2},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=90)
        stats = es.sim_stats(url)
    assert run.status == "completed"
    assert all(n == 1 for n in stats["by_call_id"].values())
    return run


def target_of(report: dict[str, object], slug: str) -> dict[str, object]:
    return next(t for t in report["targets"] if t["slug"] == slug)  # type: ignore[index, union-attr]


def test_a_router_whose_receipts_are_hostile_says_why_its_cost_is_unknown(celery_worker):
    hostile = {"faults": ["hostile-headers"]}
    run = both_targets_run({"sim-strong": hostile, "sim-weak": hostile})
    calls = Call.objects.filter(cell__run=run, cell__target__slug="sim-router", role="subject")
    n = calls.count()
    assert n and not calls.filter(cost_usd__isnull=False).exists()
    report = run_report(run=run)
    router = target_of(report, "sim-router")
    assert router["subject_cost_usd"] is None and router["known_cost_usd"] is None
    reason = router["usage_unknown_reason"]
    assert reason is not None, "a null cost with no reason"
    assert f"{n} of {n} subject calls have no known cost" in reason
    assert "cost note" in reason
    # The single model beside it, fully priced, says nothing.
    assert target_of(report, "sim-strong")["usage_unknown_reason"] is None
    # Every surface reads the one reason: the comparison and the CLI.
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    assert doc["comparisons"][0]["usage"]["usage_unknown_reason"] == reason
    assert f"usage: {reason}" in report_text(report)


def test_calls_without_stream_usage_are_not_counted_twice(celery_worker):
    """The router's calls to the weak model carry neither usage nor a receipt: the report's
    words for a stream without usage already name them; no second count is added."""
    run = both_targets_run({"sim-weak": {"faults": ["no-usage", "no-receipt"]}})
    router = target_of(run_report(run=run), "sim-router")
    unpriced = Call.objects.filter(
        cell__run=run, cell__target__slug="sim-router", cost_usd__isnull=True
    ).count()
    assert unpriced and router["subject_cost_usd"] is None
    reason = router["usage_unknown_reason"]
    assert reason.startswith("this server reports no usage when streaming")
    assert "have no known cost" not in reason


def test_a_judge_without_stream_usage_says_why_the_evaluation_cost_is_unknown(celery_worker):
    """The judge's streams carry no usage: the judge cost and the total spend are unknown,
    and the report said "judge unknown" with no reason; the subject cost stays known."""
    run = both_targets_run({"sim-judge": {"faults": ["no-usage"]}})
    report = run_report(run=run)
    for slug in ("sim-strong", "sim-router"):
        target = target_of(report, slug)
        judged = Call.objects.filter(cell__run=run, cell__target__slug=slug, role="judge")
        n = judged.count()
        assert n and not judged.filter(cost_usd__isnull=False).exists()
        assert target["subject_cost_usd"] is not None  # the judge is evaluation cost
        assert target["evaluation_cost_usd"] is None and target["total_spend_usd"] is None
        reason = target["usage_unknown_reason"]
        assert reason is not None, "a null judge cost with no reason"
        assert f"{n} of {n} judge calls have no known cost" in reason
        assert f"usage: {reason}" in report_text(report)
    # The comparison's total savings say it is the total spend that is incomplete (the subject
    # costs are complete and their savings stated): "the candidate's cost is incomplete" misled.
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    [c] = doc["comparisons"]
    assert c["savings"]["subject_cost_pct"] is not None
    assert c["savings"]["total_spend_pct"] is None
    assert c["savings"]["total_spend_unknown_reason"] == (
        "the candidate's total spend (subject and evaluation calls) is incomplete"
    )
