"""One cause, one outcome (issue 36 item 3, issue 22 "not run is not wrong"): a worker set up
unlike the web that planned the run — here SciCode's test data configured on the web but missing
on the worker — sends nothing for the cells it cannot run, stops the run's dispatch with the
reason, and leaves those cells pending for recovery; before, it sent every step of the problem,
paid for it, and failed the cell (counted wrong for a candidate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.models import Call, Cell, CellStatus, RunStatus
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from tests import factories as f
from tests.conftest import WorkerProcess, purge_broker, wait_until
from tests.runs import engine_support as es

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_worker_without_scicodes_test_data_sends_nothing_and_stops_the_run_with_why(
    settings, tmp_path: Path
):
    from datasets.scicode_fixture_data import write_fixture_test_data

    # The web holds the targets, so the plan takes SciCode's problems ...
    settings.SRBENCH_SCICODE_H5 = str(write_fixture_test_data(tmp_path / "test_data.h5"))
    # ... and the worker was started with a path where there is no file.
    missing = tmp_path / "not-here" / "test_data.h5"
    purge_broker()
    worker = WorkerProcess(
        tmp_path / "worker.log", ["--pool=solo"], extra_env={"SRBENCH_SCICODE_H5": str(missing)}
    )
    worker.start()
    try:
        with es.simulator(["scicode"], models=es.FAST_MODELS) as url:
            es.sim_targets(url)
            dataset = es.fixture_dataset(["scicode"], per_benchmark=2)
            run, _ = run_create(
                owner=f.user_create(),
                plan={"name": "scicode", "dataset": dataset.pk, "targets": ["sim-strong"]},
            )
            assert run.manifest["benchmarks"]["scicode"]["cases"] == 2
            assert not run.manifest.get("not_run")
            wait_until(lambda: es.terminal(run), timeout=120)
            stats = es.sim_stats(url)
    finally:
        worker.stop()
        purge_broker()

    assert run.status == RunStatus.FAILED, (run.stop_reason, worker.warnings())
    assert run.stop_reason.startswith("scicode cannot run on worker "), run.stop_reason
    assert "SciCode's test data is configured but missing" in run.stop_reason
    assert "nothing was sent" in run.stop_reason and "undispatched" in run.stop_reason
    assert stats["chat_requests"] == 0, stats
    assert not Call.objects.filter(cell__run=run).exists()
    cells = Cell.objects.filter(run=run)
    assert cells.count() == 2
    assert set(cells.values_list("status", flat=True)) == {CellStatus.PENDING}
    assert not cells.exclude(claimed_by="").exists()
    # What the reason promises: the cells are the undispatched ones a recovery takes.
    plan = recovery_plan(run=run, mode=RecoveryPlanMode.UNDISPATCHED)
    assert sorted(e["cell"] for e in plan["eligible_cells"]) == sorted(
        cells.values_list("pk", flat=True)
    )
