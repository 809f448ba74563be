"""Workers killed after a cell's calls completed (issue 20 point 1, R15.3): the recovery pass
finishes such a cell from the ledger — graded from the stored answer and the stored verdict —
so it is counted, never offered by recovery, and no call is sent again.

The kill is placed deterministically by the driver's fault-injection point
(`SRBENCH_FAULT_KILL_BEFORE_FINISH`, runs/engine/calls.py): a worker started with it SIGKILLs
itself when it is about to finish a cell of the named benchmark, every call of that cell being
committed (completed, with evidence) and its grade not. The run has concurrency 1, so the dead
worker holds exactly that cell and nothing in flight. Workers take turns: one dies at a judged
SimpleQA cell, the next at an MMLU-Pro cell, then a clean worker settles the second, drives the
rest and ends the run. A control run of the same questions, never killed, gives the grades the
engine itself gives (the simulator answers deterministically).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from runs.models import Call, Cell, Run, RunEvent
from runs.settlement.recovery import recovery_plan
from runs.settlement.regrade import run_regrade
from tests import factories as f
from tests.chaos import support as cs
from tests.conftest import WorkerProcess, purge_broker, wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

FAULT = "SRBENCH_FAULT_KILL_BEFORE_FINISH"
# Generous: a loaded 2-core machine starts a Celery worker slowly; a quiet one in seconds.
WAIT_S = 180


def worker(tmp_path: Path, name: str, fault: str = "") -> WorkerProcess:
    env = {
        "SRBENCH_CELL_LEASE_SECONDS": str(cs.LEASE_SECONDS),
        "SRBENCH_REAPER_INTERVAL_SECONDS": str(cs.REAPER_SECONDS),
        FAULT: fault,
    }
    w = WorkerProcess(
        tmp_path / f"{name}.log",
        ["--pool=threads", "--concurrency=4", "-n", f"{name}@%h"],
        extra_env=env,
    )
    w.start()
    return w


def killed_itself(w: WorkerProcess) -> bool:
    assert w.process is not None
    wait_until(lambda: w.process.poll() is not None, timeout=WAIT_S, interval=0.2)
    return w.process.returncode == -signal.SIGKILL


def test_cells_whose_worker_died_after_their_calls_are_graded_and_never_resent(
    transactional_db, tmp_path: Path
) -> None:
    """R15.3: the killed cells end `completed` with the engine's grade, the run completes, no
    recovery mode offers them, and the simulator saw every call exactly once."""
    purge_broker()
    started: list[WorkerProcess] = []
    try:
        with es.simulator(cs.BENCHMARKS) as url:
            es.sim_targets(url)
            dataset = cs.small_dataset("after-calls")
            owner = f.user_create()

            # The run waits in the queue; its first cell (claims go in id order) decides which
            # benchmark the first victim dies at, the other one is the second victim's.
            run = cs.start_run(owner, dataset, "killed after calls", concurrency=1)
            first = Cell.objects.filter(run=run).order_by("pk").first().benchmark
            second = next(b for b in cs.BENCHMARKS if b != first)
            expected_calls = {"simpleqa": {"subject", "judge"}, "mmlu-pro": {"subject"}}
            for benchmark in (first, second):
                started.append(worker(tmp_path, f"victim-{benchmark}", fault=benchmark))
                assert killed_itself(started[-1])
                held = Cell.objects.get(run=run, status="running")
                assert held.benchmark == benchmark
                calls = list(Call.objects.filter(cell=held).values_list("role", "status"))
                assert {role for role, _ in calls} == expected_calls[benchmark]
                assert {status for _, status in calls} == {"completed"}
                assert len(calls) == len(expected_calls[benchmark])

            started.append(worker(tmp_path, "clean"))
            assert cs.settle(run, timeout=WAIT_S, quiet=30) == "terminal"
            control = cs.start_run(owner, dataset, "control", concurrency=3)
            assert cs.settle(control, timeout=WAIT_S, quiet=30) == "terminal"
            by_call_id = es.sim_stats(url)["by_call_id"]
    finally:
        for w in started:
            w.stop()
        purge_broker()

    run.refresh_from_db()
    control.refresh_from_db()
    assert (run.status, control.status) == ("completed", "completed")

    settled = {
        e.payload["cell"]
        for e in RunEvent.objects.filter(run=run, type="cell.completed")
        if e.payload.get("settled_by") == "recovery_pass"
    }
    assert sorted(Cell.objects.get(pk=c).benchmark for c in settled) == ["mmlu-pro", "simpleqa"]

    # Graded exactly as the engine grades the same answers in the run nobody killed.
    engine = {
        c.question_id: (c.correct, c.grade, c.final_answer)
        for c in Cell.objects.filter(run=control)
    }
    for cell in Cell.objects.filter(pk__in=settled):
        assert (cell.status, cell.scored) == ("completed", True)
        assert (cell.correct, cell.grade, cell.final_answer) == engine[cell.question_id]

    # 0 calls re-sent: every call of both runs reached the simulator exactly once, and the
    # killed run made one call per MMLU-Pro cell and two per SimpleQA cell.
    calls = Call.objects.filter(cell__run__in=[run, control])
    assert by_call_id == {str(pk): 1 for pk in calls.values_list("pk", flat=True)}
    assert Call.objects.filter(cell__run=run).count() == cs.PER_BENCHMARK * 3
    assert not Call.objects.filter(cell__run=run).exclude(status="completed").exists()

    # Counted by the report, included by regrade, offered by no recovery mode.
    assert cs.report_problems(run) == []
    regraded = {r["cell"] for r in run_regrade(run_id=run.pk).regrade.results["cells"]}
    assert {c for c in settled if Cell.objects.get(pk=c).benchmark == "mmlu-pro"} <= regraded
    for mode in ("undispatched", "failed"):
        plan = recovery_plan(run=run, mode=mode)
        assert plan["eligible_cells"] == []
        reasons = {e["cell"]: e["reason"] for e in plan["excluded"]}
        assert all(reasons[c] == "completed_evidence_preserved" for c in settled)
    assert Run.objects.filter(parent=run).count() == 0
