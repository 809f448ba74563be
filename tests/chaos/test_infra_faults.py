"""Infrastructure faults mid-run (issue 13 point 1): the broker (a throwaway Redis of this
test's own, never the shared one) shut down without saving and started again on the same port,
and every PostgreSQL connection of the worker terminated. The run must end terminal or
resumable with the same invariants as the kill trials. What the engine did is printed."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis
from django.db import connection
from django.db.models import Count

from runs.models import Call, CallEvidence, Cell, Run
from runs.tasks import run_drive
from srbench.celery import app
from tests import factories as f
from tests.chaos import support as cs
from tests.conftest import purge_broker, wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker


@pytest.fixture(scope="module")
def sim_url():
    with es.simulator(cs.BENCHMARKS, models=cs.SLOW_MODELS) as url:
        yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayRedis:
    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir = port, workdir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis(port=self.port)
        wait_until(lambda: self._ping(client), timeout=60)

    @staticmethod
    def _ping(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def shutdown_nosave(self) -> None:
        # The server closes the connection as it goes: that error is the shutdown.
        with contextlib.suppress(redis.ConnectionError):
            redis.Redis(port=self.port).shutdown(nosave=True)
        assert self.process is not None
        self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


def mid_run(run: Run) -> None:
    """Some calls completed, some in flight."""
    wait_until(
        lambda: (
            Call.objects.filter(cell__run=run, status="completed").exists()
            and Call.objects.filter(cell__run=run, status__in=cs.OPEN).exists()
        ),
        timeout=120,
        interval=0.01,
    )


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_broker_restart_mid_run(transactional_db, sim_url, tmp_path: Path, monkeypatch) -> None:
    broker = ThrowawayRedis(free_port(), tmp_path)
    broker.start()
    url = f"redis://127.0.0.1:{broker.port}/0"

    def dispatch(*, run_id: int) -> None:
        with app.connection_for_write(url) as conn:
            run_drive.apply_async(args=[run_id], connection=conn)

    monkeypatch.setattr("runs.planning.services.run_dispatch", dispatch)
    es.sim_targets(sim_url)
    worker = cs.ChaosWorker(tmp_path / "worker.log", broker_url=url)
    worker.start()
    try:
        run = cs.start_run(f.user_create(), cs.small_dataset("redis"), "broker restart")
        mid_run(run)
        before = cs.snapshot(run)
        broker.shutdown_nosave()
        time.sleep(1.0)
        broker.start()  # same port, empty: every queued and unacked message is gone
        state = cs.settle(run, timeout=180)
        timeline = "" if state == "terminal" else cs.timeline(run)
        if state != "terminal":
            cs.cancel_stuck(run)
        outcome = cs.check_invariants(
            run, before, httpx.get(f"{sim_url}/_sim/stats").json()["by_call_id"]
        )
        # The worker outlives its broker (issue 34 item 2): a worker that died of the restart
        # still finishes its running task during its warm shutdown, so the run alone says
        # nothing about it.
        worker_alive = worker.process is not None and worker.process.poll() is None
        log = worker.log()
    finally:
        worker.stop()
        broker.stop()
    print(
        f"broker restart: settle {state}, run {outcome.status}, calls {outcome.calls}, "
        f"sent_unknown {outcome.sent_unknown}, duplicates {outcome.duplicates}, lost {outcome.lost}, "
        f"problems {outcome.problems}"
    )
    # A run left stuck (cancelled above to check the rest) is a bug, never noise (R15).
    assert state == "terminal", (state, timeline)
    assert outcome.duplicates == 0 and outcome.lost == 0 and outcome.unsettled == 0
    assert not outcome.problems, (outcome.problems, worker.log()[-3000:])
    assert worker_alive and "Unrecoverable error" not in log, log[-6000:]


def test_postgres_connections_of_the_worker_dropped_mid_run(
    transactional_db, sim_url, tmp_path: Path
) -> None:
    purge_broker()
    es.sim_targets(sim_url)
    worker = cs.ChaosWorker(tmp_path / "worker.log")
    worker.start()
    try:
        run = cs.start_run(f.user_create(), cs.small_dataset("pg"), "pg drop")
        mid_run(run)
        with connection.cursor() as cursor:
            # Every backend on this test database except the test's own: the worker's
            # driver, ledger and reaper connections.
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            terminated = cursor.fetchone()[0]
        before = cs.snapshot(run)
        state = cs.settle(run, timeout=180)
        timeline = "" if state == "terminal" else cs.timeline(run)
        if state != "terminal":
            cs.cancel_stuck(run)
        outcome = cs.check_invariants(
            run, before, httpx.get(f"{sim_url}/_sim/stats").json()["by_call_id"]
        )
        log = worker.log()
    finally:
        worker.stop()
        purge_broker()
    evidence_without_close = CallEvidence.objects.filter(
        call__cell__run=run, call__status="sent_unknown"
    ).count()
    print(
        f"postgres drop: terminated {terminated} backends, settle {state}, run {outcome.status} "
        f"({run.stop_reason or 'no stop reason'}), calls {outcome.calls}, sent_unknown "
        f"{outcome.sent_unknown}, evidence kept for sent_unknown calls {evidence_without_close}, "
        f"duplicates {outcome.duplicates}, lost {outcome.lost}, cells "
        f"{dict(Cell.objects.filter(run=run).values_list('status').annotate(n=Count('id')))}, "
        f"ledger batch retried: {'retrying its writes one by one' in log}, "
        f"problems {outcome.problems}"
    )
    assert terminated >= 1
    assert state == "terminal", (state, timeline)  # stuck is a bug, never noise (R15)
    assert outcome.duplicates == 0 and outcome.lost == 0 and outcome.unsettled == 0
    assert not outcome.problems, (outcome.problems, log[-3000:])
