"""Known failures are retryable (issue 20 point 2, R15.3): a call the server answered with a
complete HTTP error before any stream byte cost nothing when the target's frozen registry entry
says error responses are not billed, so failed mode offers its cell; a stream cut mid-way, an
idle timeout after bytes arrived or a target that bills errors stays "cost unclear"."""

from __future__ import annotations

import httpx
import pytest
from django.utils import timezone

from runs.ledger.accounting import HTTP_ERROR_BODY_CAP
from runs.models import Call, Cell, RecoveryRequest, Run, Target
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan, recovery_submit
from runs.settlement.recovery_rules import REASONS
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.runs.test_recovery import coordinates, ledger_checksum

BENCHMARKS = ["mmlu-pro"]
FAST = {"ttft_s": 0.0, "tokens_per_second": 0.0}


def failed_run(owner, targets: list[str]) -> Run:
    """A real run over `targets` that keeps dispatching after failures, so every cell ends with
    its one call answered the way the simulator's faults say."""
    dataset = es.fixture_dataset(BENCHMARKS)
    run, _ = run_create(
        owner=owner,
        plan={
            "name": "known failures",
            "dataset": dataset.pk,
            "targets": targets,
            "failure_policy": "continue",
            "limits": {"concurrency": 2, "idle_timeout_s": 1, "total_timeout_s": 20},
        },
    )
    wait_until(lambda: es.terminal(run), timeout=90)
    assert run.status == "failed"
    return run


def clear_faults(url: str) -> None:
    config = httpx.get(f"{url}/api/v1/config").json()
    for model in config.get("models", {}).values():
        model["faults"] = []
    assert httpx.put(f"{url}/api/v1/config", json=config).status_code == 200


def cells_of(run: Run, slug: str) -> set[int]:
    return set(Cell.objects.filter(run=run, target__slug=slug).values_list("pk", flat=True))


@pytest.mark.worker
def test_failed_mode_retries_429_and_500_cells_once_each_and_keeps_the_parent(celery_worker):
    owner = f.user_create()
    models = {"sim-strong": {**FAST, "faults": ["429"]}, "sim-weak": {**FAST, "faults": ["500"]}}
    with es.simulator(BENCHMARKS, models=models) as url:
        es.sim_targets(url)
        run = failed_run(owner, ["sim-strong", "sim-weak"])
        calls = Call.objects.filter(cell__run=run)
        assert set(calls.values_list("error_code", flat=True)) == {"http_429", "http_500"}
        assert not calls.filter(cost_usd__isnull=False).exists()  # the ledger keeps null

        # A later registry change does not alter this run's rule: the plan froze it.
        Target.objects.filter(slug__in=["sim-strong", "sim-weak"]).update(errors_billed=True)
        plan = recovery_plan(run=run, mode="failed")
        failed = set(Cell.objects.filter(run=run, status="failed").values_list("pk", flat=True))
        assert failed == set(Cell.objects.filter(run=run).values_list("pk", flat=True))
        assert {e["cell"] for e in plan["eligible_cells"]} == failed
        assert plan["excluded"] == []
        assert {e["previous_attempt_cost_usd"] for e in plan["eligible_cells"]} == {"0"}
        before = ledger_checksum(run)

        clear_faults(url)  # the provider recovered
        child, created = recovery_submit(
            run=run,
            plan={**plan, "selected_cells": sorted(failed)},
            idempotency_key="known-failures-1",
            acknowledge_new_attempt=True,
            user=owner,
        )
        assert created
        wait_until(lambda: es.terminal(child), timeout=90)
        stats = es.sim_stats(url)

    assert child.status == "completed"
    parent_cells = Cell.objects.filter(run=run)
    assert coordinates(child.cells.all()) == {
        (c.question_id, c.target_id, c.slot + 1) for c in parent_cells
    }
    # Every call of the parent and of the child reached the server exactly once.
    all_calls = Call.objects.filter(cell__run__in=[run, child])
    assert stats["by_call_id"] == {str(pk): 1 for pk in all_calls.values_list("pk", flat=True)}
    assert Call.objects.filter(cell__run=child).count() == len(failed)
    assert ledger_checksum(run) == before
    assert RecoveryRequest.objects.get(child=child).mode == "failed"


@pytest.mark.worker
def test_a_target_that_bills_errors_keeps_its_500_cells_excluded_as_cost_unclear(celery_worker):
    owner = f.user_create()
    models = {"sim-strong": {**FAST, "faults": ["500"]}, "sim-weak": {**FAST, "faults": ["500"]}}
    with es.simulator(BENCHMARKS, models=models) as url:
        es.sim_targets(url)
        Target.objects.filter(slug="sim-strong").update(errors_billed=True)
        run = failed_run(owner, ["sim-strong", "sim-weak"])
        # Even a registry that later stops billing errors does not change the frozen rule.
        Target.objects.filter(slug="sim-strong").update(errors_billed=False)
        plan = recovery_plan(run=run, mode="failed")

    billed, free = cells_of(run, "sim-strong"), cells_of(run, "sim-weak")
    assert {e["cell"] for e in plan["eligible_cells"]} == free
    assert {e["cell"]: e["reason"] for e in plan["excluded"]} == dict.fromkeys(
        billed, "error_responses_billed"
    )
    assert all(e["detail"] == REASONS["error_responses_billed"] for e in plan["excluded"])
    assert "cost unclear" in REASONS["error_responses_billed"]
    assert not any("previous_attempt_cost_usd" in e for e in plan["excluded"])


@pytest.mark.worker
@pytest.mark.parametrize(
    ("fault", "code"), [("disconnect", "stream_disconnected"), ("stall-mid", "idle_timeout")]
)
def test_a_stream_cut_mid_way_stays_excluded_as_cost_unclear(celery_worker, fault, code):
    owner = f.user_create()
    with es.simulator(BENCHMARKS, models={"sim-strong": {**FAST, "faults": [fault]}}) as url:
        es.sim_targets(url)
        run = failed_run(owner, ["sim-strong"])
        plan = recovery_plan(run=run, mode="failed")

    calls = Call.objects.filter(cell__run=run)
    assert set(calls.values_list("error_code", flat=True)) == {code}
    assert not calls.filter(bytes_received=0).exists()  # bytes had arrived
    assert plan["eligible_cells"] == []
    reasons = {e["reason"] for e in plan["excluded"]}
    assert reasons == {"ambiguous_saved_result_requires_reconciliation"}
    assert all("cost unclear" in e["detail"] for e in plan["excluded"])


@pytest.mark.django_db
def test_only_a_complete_error_answer_of_a_target_whose_plan_says_unbilled_is_offered():
    owner = f.user_create()
    target = f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    dataset = es.fixture_dataset(BENCHMARKS)
    run, _ = run_create(
        owner=owner,
        plan={"name": "rows", "dataset": dataset.pk, "targets": ["sim-strong"]},
    )
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    complete, cut_body, router_worked = list(Cell.objects.filter(run=run).order_by("pk")[:3])
    Cell.objects.filter(pk__in=[complete.pk, cut_body.pk, router_worked.pk]).update(status="failed")
    error = {"status": "failed", "http_status": 503, "error_code": "http_503"}
    f.call_create(cell=complete, target=target, bytes_received=120, **error)
    f.call_create(cell=cut_body, target=target, bytes_received=HTTP_ERROR_BODY_CAP + 1, **error)
    f.call_create(cell=router_worked, target=target, inference_call_count=2, **error)

    plan = recovery_plan(run=run, mode="failed")
    assert [e["cell"] for e in plan["eligible_cells"]] == [complete.pk]
    reasons = {e["cell"]: e["reason"] for e in plan["excluded"]}
    assert reasons[cut_body.pk] == "ambiguous_saved_result_requires_reconciliation"
    assert reasons[router_worked.pk] == "ambiguous_saved_result_requires_reconciliation"

    # A run frozen before the registry said anything about billing errors: unknown = billed.
    manifest = {**run.manifest, "targets": [dict(t) for t in run.manifest["targets"]]}
    for snapshot in manifest["targets"]:
        del snapshot["errors_billed"]
    old = f.run_create(manifest=manifest, owner=owner, dataset=run.dataset)
    cell = f.cell_create(run=old, target=target, question=complete.question, status="failed")
    f.call_create(cell=cell, target=target, bytes_received=120, **error)
    Run.objects.filter(pk=old.pk).update(status="failed", finished_at=timezone.now())
    old.refresh_from_db()
    plan = recovery_plan(run=old, mode="failed")
    assert plan["eligible_cells"] == []
    assert [(e["cell"], e["reason"]) for e in plan["excluded"]] == [
        (cell.pk, "error_responses_billed")
    ]
