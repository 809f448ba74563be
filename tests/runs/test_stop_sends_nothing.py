"""A stopped or cancelled run sends nothing more (an outside probe against a real llama.cpp
server, 2026-12-06): after a fail-closed stop one more call left — the failing cell's end
queued a claim of its slot in the same transaction, before the stop was recorded — and a
cancel let a τ³ episode under way go on sending its next calls (five in 2.5 minutes).

Against the project's simulator with a real Celery worker; every count is the simulator's
own (requests it received) and the ledger's."""

from __future__ import annotations

import pytest

from runs.models import Call, Cell, Run, RunEvent
from runs.planning.services import run_cancel, run_create
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker


SLOW = {"ttft_s": 2.0, "tokens_per_second": 200.0}


def tau_episode_under_way(url: str, name: str) -> Run:
    """A τ³ run on sim-strong with sim-user at concurrency 1, against the simulator at `url`,
    once a later call of its episode is in flight (the episode is under way)."""
    es.sim_targets(url)
    run, _ = run_create(
        owner=f.user_create(),
        plan={
            "name": name,
            "dataset": es.fixture_dataset(["tau3"]).pk,
            "targets": ["sim-strong"],
            "simulators": {"tau3": "sim-user"},
            "limits": {"concurrency": 1},
        },
    )
    wait_until(
        lambda: Call.objects.filter(
            cell__run=run, sequence__gte=1, status__in=("sent", "streaming")
        ).exists(),
        timeout=180,
    )
    return run


@pytest.mark.parametrize("concurrency", [1, 3])
def test_after_a_fail_closed_stop_no_call_leaves(celery_worker, concurrency):
    """Every call fails (the stream is cut): the first failures stop the run, and no call is
    sent after the stop — at most the calls already in flight, one per slot."""
    benchmarks = ["mmlu-pro"]
    with es.simulator(benchmarks, models={"sim-strong": {"faults": ["disconnect"]}}) as url:
        es.sim_targets(url)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "fail closed",
                "dataset": es.fixture_dataset(benchmarks).pk,
                "targets": ["sim-strong"],
                "limits": {"concurrency": concurrency},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=120)
        stats = es.sim_stats(url)
    assert run.status == "failed" and "fail closed" in run.stop_reason
    calls = Call.objects.filter(cell__run=run)
    assert 1 <= calls.count() <= concurrency, list(calls.values_list("pk", "error_code"))
    assert sum(stats["by_call_id"].values()) == calls.count()
    # The cells never sent are pending again: recoverable as undispatched.
    assert not Cell.objects.filter(run=run, status="running").exists()
    assert Cell.objects.filter(run=run, status="pending").count() >= (
        Cell.objects.filter(run=run).count() - concurrency
    )
    stopped = RunEvent.objects.get(run=run, type="run.dispatch_stopped")
    later = RunEvent.objects.filter(run=run, seq__gt=stopped.seq, type="call.sent")
    assert not later.exists(), list(later.values_list("seq", "payload"))


def test_a_cancel_ends_an_episode_under_way_before_its_next_call(celery_worker):
    """τ³ with sim-user: the cancel arrives while a later call of an episode is in flight;
    that call finishes and keeps its evidence, and no call of any episode is opened after
    the cancel — the cell under way ends cancelled, its calls kept."""
    with es.simulator(["tau3"], models={"sim-strong": SLOW, "sim-user": SLOW}) as url:
        run = tau_episode_under_way(url, "cancel mid-episode")
        assert run_cancel(run=run)
        wait_until(lambda: es.terminal(run), timeout=180)
        stats = es.sim_stats(url)
    run.refresh_from_db()
    assert run.status == "cancelled"
    calls = Call.objects.filter(cell__run=run)
    assert sum(stats["by_call_id"].values()) == calls.count()
    after = calls.filter(sent_at__gt=run.cancel_requested_at)
    assert not after.exists(), list(after.values_list("pk", "role", "sequence", "sent_at"))
    cut = Cell.objects.filter(run=run, status="cancelled").exclude(calls=None).distinct()
    assert cut.count() == 1, list(Cell.objects.filter(run=run).values_list("status", "error"))
    assert "nothing more was sent" in cut.get().error


def test_a_cancel_between_the_two_judge_calls_sends_no_official_judge_call(celery_worker):
    """The official template's judge call (a plan's second judge call) went through the
    engine's call directly, past the stop rule: a cancel while the first judge call was in
    flight still let it leave. Now the cell keeps its sr-bench grade and the official outcome
    says it was not sent."""
    benchmarks = ["simpleqa"]
    slow_judge = {"ttft_s": 2.0, "tokens_per_second": 200.0}
    with es.simulator(benchmarks, models={"sim-judge": slow_judge}) as url:
        es.sim_targets(url)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "cancel between judges",
                "dataset": es.fixture_dataset(benchmarks).pk,
                "targets": ["sim-strong"],
                "judges": {"simpleqa": "sim-judge"},
                "official_scoring": ["simpleqa"],
                "limits": {"concurrency": 1},
            },
        )
        wait_until(
            lambda: Call.objects.filter(
                cell__run=run, role="judge", sequence=0, status__in=("sent", "streaming")
            ).exists(),
            timeout=180,
        )
        assert run_cancel(run=run)
        wait_until(lambda: es.terminal(run), timeout=180)
        stats = es.sim_stats(url)
    run.refresh_from_db()
    calls = Call.objects.filter(cell__run=run)
    assert sum(stats["by_call_id"].values()) == calls.count()
    after = calls.filter(sent_at__gt=run.cancel_requested_at)
    assert not after.exists(), list(after.values_list("pk", "role", "sequence", "sent_at"))
    assert not calls.filter(role="judge", sequence=1, sent_at__gt=run.cancel_requested_at)
    judged = Cell.objects.filter(run=run, calls__role="judge").distinct()
    assert judged.exists()


def test_a_stop_recorded_by_another_worker_ends_an_episode_under_way_as_failed(celery_worker):
    """Another worker's fail-closed stop (recorded in the ledger as it records one) reaches an
    episode under way at its next call: nothing more is sent, and the cell ends failed —
    recoverable as a new attempt (`recover-plan --mode failed`), unlike a user's cancel."""
    from runs.engine import store
    from runs.settlement.recovery import recovery_plan

    with es.simulator(["tau3"], models={"sim-strong": SLOW, "sim-user": SLOW}) as url:
        run = tau_episode_under_way(url, "stopped mid-episode")
        assert store.run_stop(run_id=run.pk, reason="first transport failure (fail closed): x")
        stopped = RunEvent.objects.get(run=run, type="run.dispatch_stopped")
        wait_until(lambda: es.terminal(run), timeout=180)
        stats = es.sim_stats(url)
    run.refresh_from_db()
    assert run.status == "failed"
    calls = Call.objects.filter(cell__run=run)
    assert sum(stats["by_call_id"].values()) == calls.count()
    later = RunEvent.objects.filter(run=run, seq__gt=stopped.seq, type="call.sent")
    assert not later.exists(), list(later.values_list("seq", "payload"))
    cut = Cell.objects.get(run=run, error__contains="nothing more was sent")
    assert cut.status == "failed"
    eligible = recovery_plan(run=run, mode="failed")["eligible_cells"]
    assert cut.pk in [c["cell"] for c in eligible]
