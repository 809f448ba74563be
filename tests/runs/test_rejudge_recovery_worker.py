"""An undispatched recovery of a re-judge child runs on a real worker (issue 22 point 4 with
R15.2): the recovery child keeps the parent's attempt slots and the re-judge marker, so its
episode judges the answers the original run stored, calls the judge once per cell and never
the subject. Checked against the simulator's own request counters and its judge rule applied,
in the test, to each stored answer and its reference.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from runs.models import Call, Cell, Run
from runs.planning.services import run_create
from runs.settlement import rejudge
from runs.settlement.recovery import recovery_plan, recovery_submit
from runs.settlement.regrade import judge_cost_quote
from srbench.simulator import oracle
from tests import factories as f
from tests.conftest import WorkerProcess, wait_until
from tests.runs import engine_support as es

CASES = 3
# Generous: a loaded 2-core machine starts a Celery worker slowly; a quiet one in seconds.
WAIT_S = 240


def stopped_rejudge_child(parent: Run, user: object) -> Run:
    """The confirmed re-judge child as a run that stopped before dispatching any cell: created
    as `rejudge_submit` creates it, never handed to a worker, then ended."""
    quote = judge_cost_quote(parent)
    with transaction.atomic():
        content = rejudge._content(parent, quote)
        child = rejudge._child_create(parent, content, Decimal(quote["worst_case_usd"]), user, None)
    Run.objects.filter(pk=child.pk).update(
        status="failed", started_at=timezone.now(), finished_at=timezone.now()
    )
    child.refresh_from_db()
    return child


@pytest.mark.worker
def test_an_undispatched_recovery_of_a_rejudge_child_judges_the_parents_answers(
    celery_worker: WorkerProcess,
) -> None:
    """Issue 22 point 4, R15.2: undispatched mode keeps working for a re-judge child — same
    slots, judge calls only, the verdicts the judge rule gives the original answers."""
    owner = f.user_create()
    with es.simulator(["simpleqa"]) as url:
        es.sim_targets(url)
        parent, _ = run_create(
            owner=owner,
            plan={
                "name": "judged",
                "dataset": es.fixture_dataset(["simpleqa"], per_benchmark=CASES).pk,
                "targets": ["sim-weak"],
                "judges": {"simpleqa": "sim-judge"},
            },
        )
        wait_until(lambda: es.terminal(parent), timeout=WAIT_S)
        assert parent.status == "completed", (parent.stop_reason, celery_worker.log()[-3000:])
        child = stopped_rejudge_child(parent, owner)
        plan = recovery_plan(run=child, mode="undispatched")
        assert len(plan["eligible_cells"]) == CASES
        before = es.sim_stats(url)
        recovered, created = recovery_submit(
            run=child, plan=plan, idempotency_key="rj-undispatched", user=owner
        )
        assert created
        wait_until(lambda: es.terminal(recovered), timeout=WAIT_S)
        after = es.sim_stats(url)
    assert recovered.status == "completed", (recovered.stop_reason, celery_worker.log()[-3000:])

    # Judge calls only, one per cell; the subject saw nothing.
    assert after["by_model"].get("sim-weak") == before["by_model"].get("sim-weak")
    assert after["by_model"]["sim-judge"] - before["by_model"].get("sim-judge", 0) == CASES
    calls = Call.objects.filter(cell__run=recovered)
    assert {c.role for c in calls} == {"judge"} and calls.count() == CASES

    parents = {
        (c.question_id, c.target_id, c.slot): c
        for c in Cell.objects.filter(run=parent).select_related("question__secret")
    }
    for cell in Cell.objects.filter(run=recovered):
        p = parents[(cell.question_id, cell.target_id, cell.slot)]  # the same attempt slot
        reference = str(p.question.secret.data["answer"])
        verdict = oracle.judge_verdict(reference, p.final_answer) == "correct"
        assert cell.status == "completed" and cell.final_answer == p.final_answer
        assert cell.correct is verdict, (cell.grade, p.final_answer)
