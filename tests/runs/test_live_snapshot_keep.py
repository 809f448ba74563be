"""The running run's percentile snapshot is kept by the worker that drives the run (issue 25,
tabs ≤ 100 ms): `runs.reporting.live_report.snapshot_keep`, called from the driver's checkpoints on a
database thread of its own, so no Results view pays for recomputing it (157-212 ms at 100,000
calls) while a worker runs the run. A view still recomputes one older than SNAPSHOT_SECONDS."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Call, LiveSnapshot
from runs.reporting.live_report import SNAPSHOT_KEEP_SECONDS, snapshot_keep
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db(transaction=True)


def _finished_call(run, ttft_ms: float, duration_ms: float) -> Call:
    cell = f.cell_create(run=run, status="completed", correct=True, scored=True)
    return f.call_create(
        cell=cell,
        status="completed",
        ttft_ms=ttft_ms,
        duration_ms=duration_ms,
        finished_at=timezone.now(),
    )


def _ttft_by_target(run) -> dict[str, float]:
    """What the snapshot must say, computed here: the factories give each cell its own target,
    so each target's TTFT median is its one call's TTFT."""
    return {
        str(target): ttft
        for target, ttft in Call.objects.filter(cell__run=run).values_list("target_id", "ttft_ms")
    }


def test_the_snapshot_is_recomputed_only_when_older_than_the_keep_age():
    run = f.run_create(
        status="running",
        started_at=timezone.now(),
        manifest={"targets": [], "benchmarks": {}, "plan": "keep"},
    )
    for ttft in (100.0, 300.0, 200.0):
        _finished_call(run, ttft, 1000 + ttft)
    first = snapshot_keep(run_id=run.pk)
    assert first is not None
    row = LiveSnapshot.objects.get(run=run).figures
    assert {t: v["ttft_p50_ms"] for t, v in row.items()} == _ttft_by_target(run)

    # Young: kept as it is, even though a new call would change it.
    _finished_call(run, 900.0, 1900.0)
    assert snapshot_keep(run_id=run.pk) == first
    assert LiveSnapshot.objects.get(run=run).figures == row

    # Older than the keep age: recomputed, and it now counts every call.
    LiveSnapshot.objects.filter(run=run).update(
        computed_at=timezone.now() - timedelta(seconds=SNAPSHOT_KEEP_SECONDS + 1)
    )
    again = snapshot_keep(run_id=run.pk)
    assert again is not None and again > first
    kept = LiveSnapshot.objects.get(run=run).figures
    assert len(kept) == 4
    assert {t: v["ttft_p50_ms"] for t, v in kept.items()} == _ttft_by_target(run)


def test_an_ended_run_has_nothing_kept():
    run = f.run_create(status="completed", started_at=timezone.now(), finished_at=timezone.now())
    _finished_call(run, 100.0, 1100.0)
    assert snapshot_keep(run_id=run.pk) is None
    assert not LiveSnapshot.objects.filter(run=run).exists()


@pytest.mark.worker
def test_the_worker_driving_a_run_keeps_its_snapshot_without_any_page_view(celery_worker):
    benchmarks = ["mmlu-pro", "arc"]
    slow = {"sim-strong": {"ttft_s": 1.0, "tokens_per_second": 0.0}}
    with es.worker_run(
        "kept snapshot", ["sim-strong"], benchmarks, slots=1, concurrency=1, models=slow
    ) as run:
        # No page is opened: only the worker can have written the snapshot.
        wait_until(lambda: LiveSnapshot.objects.filter(run=run).exists(), timeout=60)
        run.refresh_from_db()
        assert run.status == "running", (run.status, celery_worker.log()[-3000:])
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    assert "keeping the live snapshot failed" not in celery_worker.log()


def test_the_engine_keeps_the_snapshot_through_the_hook_the_app_registers() -> None:
    """Issue 36 item 1: the driver calls `runs.ledger.hooks.live_snapshot_keep`, which the runs app
    wires to the live results at start-up; the engine never imports them."""
    from pathlib import Path

    from runs.ledger.hooks import live_snapshot_keepers

    assert snapshot_keep in live_snapshot_keepers
    engine = Path(__file__).resolve().parents[2] / "runs" / "engine"
    assert not [
        p.name for p in engine.glob("*.py") if "runs.reporting.live_report" in p.read_text()
    ]
