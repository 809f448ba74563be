"""Preview runs (issue 11 point 7): every case goes to the router's routing preview; zero model
calls; the report gives the routing distribution with accuracy and cost absent (not 0); a
preview run is never a comparison baseline or candidate."""

import pytest
from django.utils import timezone

from runs.models import Call, Cell
from runs.planning.services import run_create
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker
BENCHMARKS = ["mmlu-pro", "simpleqa"]


def test_preview_run_reports_routing_without_model_calls(celery_worker):
    with es.simulator(BENCHMARKS) as url:
        targets = es.sim_targets(url)
        router = targets["router"]
        router.preview_url = f"{url}/api/v1/routing/preview"
        router.save()
        dataset = es.fixture_dataset(BENCHMARKS)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "preview",
                "dataset": dataset.pk,
                "targets": ["sim-router"],
                "mode": "preview",
                "preview_context": {"session_id": "s-1"},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=90)
        stats = es.sim_stats(url)
    assert run.status == "completed", run.stop_reason
    assert (
        stats["chat_requests"] == 0
        and stats["preview_requests"] == Cell.objects.filter(run=run).count()
    )
    assert not Call.objects.filter(cell__run=run).exists()
    report = run_report(run=run)
    t = report["targets"][0]
    assert t["score"]["kind"] == "none"
    assert t["subject_cost_usd"] is None and t["known_cost_usd"] is None
    assert t["correct"] is None and report["counts"]["correct"] is None
    for benchmark in BENCHMARKS:
        entry = t["benchmarks"][benchmark]
        assert entry["accuracy"] is None and entry["wilson_95"] is None
        assert sum(entry["routing"]["selected_models"].values()) == entry["planned"]
        assert set(entry["routing"]["selected_models"]) <= {"sim-strong", "sim-weak"}
    assert sum(t["selected_models"].values()) == t["planned"]


def test_preview_mode_needs_mom_targets_with_a_preview_url(db):
    from runs.planning.plans import PlanError, plan_freeze

    f.target_create(slug="single")
    dataset = es.fixture_dataset(["mmlu-pro"])
    with pytest.raises(PlanError) as err:
        plan_freeze(
            data={"name": "p", "dataset": dataset.pk, "targets": ["single"], "mode": "preview"}
        )
    assert "preview_url" in str(err.value.errors["targets"])
    with pytest.raises(PlanError) as err:
        plan_freeze(
            data={
                "name": "p",
                "dataset": dataset.pk,
                "targets": ["single"],
                "preview_context": {"session_id": "x"},
            }
        )
    assert "preview_context" in err.value.errors


def test_preview_run_is_refused_as_a_comparison_baseline(db):
    from compare.compatibility import run_comparison_problems

    run = f.run_create(mode="preview", status="completed", finished_at=timezone.now())
    assert run_comparison_problems(run)
