"""A judge call that failed at no cost leaves its cell judge-only (issue 34's rule, extended after
an outside probe): a SimpleQA cell whose subject answered and whose judge call failed with a
complete HTTP 500 before any stream byte, at a judge whose frozen registry entry does not bill
error responses, could be recovered only in failed mode, which buys the subject answer again.
Now judge_only mode takes it: one judge call over the stored answer, no subject call.

Real run, real worker, real HTTP: the simulator's judge model answers every request with HTTP
500 while the run is driven, then recovers; its own counters (per model, per call id) prove
that the recovery sent exactly one judge request per cell and none to the subject."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs.models import Call, Cell, Run
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan, recovery_submit
from runs.settlement.recovery_rules import JUDGE_FAILED_FREE_TEXT
from srbench.simulator import oracle
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.runs.test_recovery import ledger_checksum
from tests.runs.test_recovery_known_failures import FAST, clear_faults

pytestmark = pytest.mark.worker

WAIT_S = 120


def judge_failed_run(owner: object) -> Run:
    """A real SimpleQA run on sim-strong judged by sim-judge, driven to its end while the judge
    answers HTTP 500; it keeps dispatching after failures so every cell reaches its judge."""
    run, created = run_create(
        owner=owner,
        plan={
            "name": "judge 500",
            "dataset": es.fixture_dataset(["simpleqa"], per_benchmark=3).pk,
            "targets": ["sim-strong"],
            "judges": {"simpleqa": "sim-judge"},
            "failure_policy": "continue",
            "limits": {"concurrency": 2},
        },
    )
    assert created
    wait_until(lambda: es.terminal(run), timeout=WAIT_S)
    return run


def test_a_judge_http_500_before_any_stream_is_completed_by_a_judge_call_only(celery_worker):
    owner = f.user_create()
    models = {"sim-judge": {**FAST, "faults": ["500"]}}
    with es.simulator(["simpleqa"], models=models) as url:
        es.sim_targets(url)
        parent = judge_failed_run(owner)
        cells = list(Cell.objects.filter(run=parent).order_by("pk"))
        judge_calls = Call.objects.filter(cell__run=parent, role="judge")
        # The ledger as the engine wrote it: an answer, then a judge call failed with HTTP 500
        # before any stream byte, its cost null (no usage), the cell failed.
        assert {c.status for c in cells} == {"failed"}
        assert judge_calls.count() == len(cells)
        assert set(judge_calls.values_list("error_code", "http_status", "status")) == {
            ("http_500", 500, "failed")
        }
        assert not judge_calls.filter(cost_usd__isnull=False).exists()
        subject = Call.objects.filter(cell__run=parent, role="subject")
        assert set(subject.values_list("status", flat=True)) == {"completed"}

        plan = recovery_plan(run=parent, mode="judge_only")
        assert [e["cell"] for e in plan["eligible_cells"]] == [c.pk for c in cells]
        assert plan["excluded"] == []
        for entry in plan["eligible_cells"]:
            assert entry["why"] == JUDGE_FAILED_FREE_TEXT
            assert entry["judge_failure_cost_assumes"] == (
                "assumes sim-judge does not bill error responses (errors_billed = false)"
            )
        worst = plan["judge_cost_quote"]["worst_case_usd"]
        assert plan["judge_cost_quote"]["judge_calls"] == len(cells) and Decimal(worst) > 0
        before_parent = ledger_checksum(parent)

        clear_faults(url)  # the judge recovered
        before = es.sim_stats(url)
        child, created = recovery_submit(
            run=parent,
            plan=plan,
            idempotency_key="judge-500-1",
            confirm_judge_cost=Decimal(worst),
            user=owner,
        )
        assert created
        wait_until(lambda: es.terminal(child), timeout=WAIT_S)
        after = es.sim_stats(url)

    assert child.status == "completed", (child.status, child.stop_reason)
    assert child.manifest["recovery"]["mode"] == "judge_only"
    # One judge request per cell, none to the subject: the answers were reused, not bought.
    assert after["by_model"].get("sim-strong") == before["by_model"].get("sim-strong")
    assert after["by_model"]["sim-judge"] - before["by_model"].get("sim-judge", 0) == len(cells)
    assert after["total_requests"] - before["total_requests"] == len(cells)
    child_calls = Call.objects.filter(cell__run=child)
    assert set(child_calls.values_list("role", "sequence")) == {("judge", 0)}
    assert child_calls.count() == len(cells)
    # Each cell: the same attempt, its stored answer exactly, the judge's verdict on it.
    children = {(c.question_id, c.target_id, c.slot): c for c in Cell.objects.filter(run=child)}
    for p in cells:
        c = children[(p.question_id, p.target_id, p.slot)]
        stored = Call.objects.get(cell=p, role="subject").content
        verdict = oracle.judge_verdict(str(p.question.secret.data["answer"]), stored)
        assert c.status == "completed" and c.final_answer == stored
        assert c.correct is (verdict == "correct")
    assert ledger_checksum(parent) == before_parent
