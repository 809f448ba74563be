"""Never re-send (DESIGN §4): a killed worker, a redelivered task and a second worker never
send a dispatched call again; budget and cancel stop dispatch (issue 5)."""

from __future__ import annotations

import signal
from decimal import Decimal

import pytest
from django.db.models import Sum

from runs.models import Call, CallEvidence, Cell, RunEvent
from runs.planning.services import run_cancel, run_create
from runs.tasks import run_drive
from tests import factories as f
from tests.conftest import WorkerProcess, purge_broker, wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker
BENCHMARKS = ["mmlu-pro", "arc"]
SLOW = {"sim-strong": {"ttft_s": 0.2, "tokens_per_second": 8.0, "chunk_tokens": 1}}


@pytest.fixture
def workers(transactional_db, tmp_path):
    started: list[WorkerProcess] = []

    def start(name: str, pool: str = "threads") -> WorkerProcess:
        w = WorkerProcess(tmp_path / f"{name}.log", [f"--pool={pool}", "--concurrency=4"])
        w.start()
        started.append(w)
        return w

    purge_broker()
    yield start
    for w in started:
        w.stop()
    purge_broker()


def slow_run(url: str, **limits):
    dataset = es.fixture_dataset(BENCHMARKS)
    run, _ = run_create(
        owner=f.user_create(),
        plan={
            "name": "slow",
            "dataset": dataset.pk,
            "targets": ["sim-strong"],
            "limits": {"concurrency": 3, **limits},
        },
    )
    return run


def test_killed_worker_leaves_sent_unknown_and_nothing_is_sent_twice(workers):
    with es.simulator(BENCHMARKS, models=SLOW) as url:
        es.sim_targets(url)
        first = workers("first")
        run = slow_run(url)
        # Wait until calls are mid-stream and at least one cell has finished.
        wait_until(
            lambda: (
                Cell.objects.filter(run=run, status="completed").exists()
                and Call.objects.filter(cell__run=run, status__in=["sent", "streaming"]).exists()
            ),
            timeout=60,
        )
        first.stop(signal.SIGKILL)
        before = {
            c.pk: (c.status, c.content)
            for c in Call.objects.filter(cell__run=run, status="completed")
        }
        in_flight = set(
            Call.objects.filter(cell__run=run, status__in=["sent", "streaming"]).values_list(
                "pk", flat=True
            )
        )
        workers("second")
        wait_until(lambda: es.terminal(run), timeout=60)
        stats = es.sim_stats(url)

    assert run.status == "interrupted"
    # Each dispatched call reached the model exactly once, the killed ones included.
    assert all(n == 1 for n in stats["by_call_id"].values()), stats["by_call_id"]
    received = set(stats["by_call_id"])
    rows = {str(pk) for pk in Call.objects.filter(cell__run=run).values_list("pk", flat=True)}
    # Every request the model saw is a row of the ledger (nothing left unrecorded), and a row
    # the model never saw is one the killed worker had opened but not yet sent: its fenced open
    # committed, the kill came before the bytes left (seen once in a loaded CI run). Such a call
    # is in flight at the kill and ends unknown below, never sent again.
    assert received <= rows, received - rows
    assert rows - received <= {str(pk) for pk in in_flight}, (rows - received, in_flight)
    unknown = set(
        Call.objects.filter(cell__run=run, status="sent_unknown").values_list("pk", flat=True)
    )
    assert in_flight and unknown == in_flight
    assert (
        set(Cell.objects.filter(run=run, status="sent_unknown").values_list("calls__pk", flat=True))
        == unknown
    )
    # Nothing recorded before the kill is lost or changed.
    for pk, (status, content) in before.items():
        call = Call.objects.get(pk=pk)
        assert (call.status, call.content) == (status, content)
        assert CallEvidence.objects.filter(call_id=pk).exists()
    assert RunEvent.objects.filter(run=run, type="run.interrupted").exists()


def test_a_task_delivered_twice_sends_nothing_twice(workers):
    with es.simulator(
        BENCHMARKS, models={"sim-strong": {"ttft_s": 0.05, "tokens_per_second": 50.0}}
    ) as url:
        es.sim_targets(url)
        workers("only")
        run = slow_run(url)
        for _ in range(3):  # as a broker redelivery or a second doorbell would
            run_drive.delay(run.pk)
        wait_until(lambda: es.terminal(run), timeout=90)
        stats = es.sim_stats(url)
    assert run.status == "completed"
    calls = Call.objects.filter(cell__run=run)
    assert calls.count() == Cell.objects.filter(run=run).count()
    assert stats["by_call_id"] == {str(c.pk): 1 for c in calls}


def test_two_workers_share_a_run_within_its_concurrency(workers):
    with es.simulator(BENCHMARKS, models=SLOW) as url:
        es.sim_targets(url)
        workers("a")
        workers("b")
        run = slow_run(url)
        run_drive.delay(run.pk)
        peak = 0

        def done() -> bool:
            nonlocal peak
            peak = max(peak, Cell.objects.filter(run=run, status="running").count())
            return es.terminal(run) is not None

        wait_until(done, timeout=120, interval=0.05)
        stats = es.sim_stats(url)
    assert run.status == "completed"
    assert peak <= 3
    assert all(n == 1 for n in stats["by_call_id"].values())
    assert len(set(Call.objects.filter(cell__run=run).values_list("worker", flat=True))) >= 1


def test_budget_stops_dispatch_before_it_is_exceeded(workers):
    with es.simulator(
        BENCHMARKS, models={"sim-strong": {"ttft_s": 0.0, "tokens_per_second": 0.0}}
    ) as url:
        es.sim_targets(url)
        workers("only")
        run = slow_run(url, max_cost_usd="0.01", max_output_tokens=100)
        wait_until(lambda: es.terminal(run), timeout=90)
    assert run.status == "failed" and run.stop_reason.startswith("budget")
    spent = Call.objects.filter(cell__run=run).aggregate(s=Sum("cost_usd"))["s"]
    assert spent is not None and spent <= Decimal("0.01")
    assert Cell.objects.filter(run=run, status="completed").exists()
    assert Cell.objects.filter(run=run, status="pending").exists()
    assert not Cell.objects.filter(run=run, status="pending", calls__isnull=False).exists()
    assert RunEvent.objects.filter(run=run, type="budget.refused").exists()


def test_cancel_stops_new_dispatch_and_keeps_evidence(workers):
    with es.simulator(BENCHMARKS, models=SLOW) as url:
        es.sim_targets(url)
        workers("only")
        run = slow_run(url)
        wait_until(lambda: Call.objects.filter(cell__run=run).exists(), timeout=60)
        assert run_cancel(run=run) is True
        assert run_cancel(run=run) is False  # idempotent
        wait_until(lambda: es.terminal(run), timeout=90)
    assert run.status == "cancelled"
    calls = Call.objects.filter(cell__run=run)
    assert calls.count() < Cell.objects.filter(run=run).count()
    assert CallEvidence.objects.filter(call__cell__run=run).count() == calls.count()
    assert Cell.objects.filter(run=run, status="cancelled").exists()
    assert not Cell.objects.filter(run=run, status__in=["pending", "running"]).exists()
