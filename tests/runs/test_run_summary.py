"""Reads that cost O(page), not O(run) (issue 25 point 1, R7.1, R13): a run's cells counted
by status live in one summary row, kept by PostgreSQL triggers in the transaction that
changes the cells. These tests hold it equal to a fresh recount after every kind of writer
(a real worker, the reaper's bulk updates, recovery, cancel, raw SQL, concurrent
transactions), and hold the poll's rows read constant from 1,000 cells to 20,000."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from datasets.models import Question
from runs.engine import store
from runs.engine.reaper import ledger_reap
from runs.ledger import selectors
from runs.ledger.events import events_append
from runs.models import Call, Cell, CellStatus, Run, RunEvent, RunSummary
from runs.planning.services import NewCell, run_cancel, run_create, run_insert
from runs.settlement.recovery import recovery_plan, recovery_reconcile, recovery_submit
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

# Commits: the engine's transactions are durable, and the concurrency test needs several
# connections that see each other's commits.
pytestmark = pytest.mark.django_db(transaction=True)

STATUSES = list(CellStatus.values)
BENCHMARKS = ["mmlu-pro", "arc"]


@pytest.fixture(autouse=True)
def _no_dispatch_left_behind():
    yield
    purge_broker()  # run_create and recovery dispatch to the broker; no worker took them


def recount(run_id: int) -> dict[str, int]:
    rows = (
        Cell.objects.filter(run_id=run_id).order_by().values_list("status").annotate(n=Count("pk"))
    )
    found = dict(rows)
    return {s: found.get(s, 0) for s in STATUSES}


def stored(run_id: int) -> dict[str, int]:
    return RunSummary.objects.filter(run_id=run_id).values(*STATUSES).get()


def snapshot(run_id: int) -> tuple[dict[str, int], dict[str, int]]:
    """The summary and a recount read in ONE snapshot, while writers may be committing."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return stored(run_id), recount(run_id)


def assert_exact(run: Run) -> dict[str, int]:
    counts = recount(run.pk)
    assert stored(run.pk) == counts
    row = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
    assert (row.cells_total, row.cells_completed, row.cells_failed) == (
        sum(counts.values()),
        counts["completed"],
        counts["failed"] + counts["sent_unknown"],
    )
    newest = RunEvent.objects.filter(run=run).order_by("-seq").values_list("created_at").first()
    assert row.last_event_at == (newest[0] if newest else None)
    # The pages read the same figures.
    (page_row,) = selectors.runs_decorate(
        list(selectors.runs_list_rows(Run.objects.filter(pk=run.pk)))
    )
    assert (page_row.cells_total, page_row.cells_completed, page_row.cells_failed) == (
        row.cells_total,
        row.cells_completed,
        row.cells_failed,
    )
    return counts


# --- every writer keeps it exact ----------------------------------------------------------------


def test_a_new_run_has_a_zero_summary_and_counts_cells_as_they_are_inserted():
    run = f.run_create()
    assert stored(run.pk) == dict.fromkeys(STATUSES, 0)
    row = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
    assert (row.cells_total, row.cells_completed, row.cells_failed, row.last_event_at) == (
        0,
        0,
        0,
        None,
    )
    target = f.target_create()
    Cell.objects.bulk_create(
        Cell(run=run, question=f.question_create(), target=target, status=s)
        for s in ["pending", "pending", "completed", "failed", "sent_unknown", "cancelled"]
    )
    assert assert_exact(run) == {
        "pending": 2,
        "running": 0,
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
        "sent_unknown": 1,
    }


def test_bulk_updates_raw_sql_and_deletes_are_counted_per_run():
    one, two = f.run_create(), f.run_create()
    target = f.target_create()
    for run in (one, two):
        Cell.objects.bulk_create(
            Cell(run=run, question=f.question_create(), target=target, slot=0) for _ in range(5)
        )
    # One statement over both runs, then one that changes no status (a lease renewal).
    Cell.objects.filter(run__in=[one, two]).update(status="running")
    Cell.objects.filter(run=one).update(lease_expires_at=timezone.now())
    ids = list(Cell.objects.filter(run=one).order_by("pk").values_list("pk", flat=True))
    cells = list(Cell.objects.filter(pk__in=ids[:3]))
    for cell, status in zip(cells, ["completed", "failed", "running"], strict=True):
        cell.status = status
    Cell.objects.bulk_update(cells, ["status"])  # one UPDATE … CASE statement
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_cell SET status = CASE WHEN id %% 2 = 0 THEN 'sent_unknown' "
            "ELSE 'cancelled' END WHERE run_id = %s",
            [two.pk],
        )
        cursor.execute("DELETE FROM runs_cell WHERE id = %s", [ids[-1]])
    assert assert_exact(one) == {
        **dict.fromkeys(STATUSES, 0),
        "completed": 1,
        "failed": 1,
        "running": 2,
    }
    counts = assert_exact(two)
    assert counts["sent_unknown"] + counts["cancelled"] == 5


def test_a_rolled_back_change_leaves_the_summary_as_it_was():
    run = f.run_create()
    f.cell_create(run=run)
    before = stored(run.pk)
    with pytest.raises(RuntimeError), transaction.atomic():
        Cell.objects.filter(run=run).update(status="completed")
        assert stored(run.pk)["completed"] == 1  # same transaction: already counted
        raise RuntimeError
    assert stored(run.pk) == before == recount(run.pk)


def running_cell(run: Run, *, lease_s: float, call_status: str | None) -> Cell:
    cell = f.cell_create(
        run=run,
        status="running",
        claim_token=1,
        claimed_by="host:1:dead",
        started_at=timezone.now(),
        lease_expires_at=timezone.now() + timedelta(seconds=lease_s),
    )
    if call_status:
        f.call_create(cell=cell, status=call_status)
    return cell


def test_the_reapers_bulk_updates_keep_it_exact():
    run = f.run_create(status="running", started_at=timezone.now())
    running_cell(run, lease_s=-1, call_status="sent")  # its worker died mid-call
    running_cell(run, lease_s=-1, call_status=None)  # its worker died before sending
    running_cell(run, lease_s=30, call_status="streaming")  # a lease not yet run out
    f.cell_create(run=run, status="pending")
    ledger_reap()
    counts = assert_exact(run)
    assert counts["running"] == 1 and counts["sent_unknown"] == 1
    ledger_reap(now=timezone.now() + timedelta(seconds=60))
    assert assert_exact(run)["running"] == 0


def test_cancel_and_the_engine_finishing_the_last_cell_keep_it_exact():
    run = f.run_create(status="running", started_at=timezone.now())
    cell = running_cell(run, lease_s=30, call_status="sent")
    for _ in range(3):
        f.cell_create(run=run, status="pending")
    assert run_cancel(run=run) is True
    assert assert_exact(run)["cancelled"] == 3
    call = Call.objects.get(cell=cell)
    store.ledger_apply(
        run_id=run.pk,
        max_cost=None,
        ops=[
            store.CloseCall(call.pk, {"status": "cancelled", "stage": "done"}, b"", None, None),
            store.FinishCell(cell.pk, 1, "cancelled", None, None, "", "cancelled"),
        ],
    )
    assert assert_exact(run) == {**dict.fromkeys(STATUSES, 0), "cancelled": 4}


def test_recovery_children_and_their_parents_are_exact():
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    owner = f.user_create()
    dataset = es.fixture_dataset(BENCHMARKS)
    parent, _ = run_create(
        owner=owner,
        plan={"name": "parent", "dataset": dataset.pk, "targets": ["sim-strong"]},
    )
    total = sum(recount(parent.pk).values())
    assert stored(parent.pk) == {**dict.fromkeys(STATUSES, 0), "pending": total}
    # A run that ended with a cell still running and its call open (as before the terminal
    # guard): recovery's reconciliation settles them in bulk.
    ids = list(Cell.objects.filter(run=parent).order_by("pk").values_list("pk", flat=True))
    Cell.objects.filter(pk__in=ids[:2]).update(status="completed")
    Cell.objects.filter(pk__in=ids[3:5]).update(status="cancelled")
    # (Only a ledger from before the fencing triggers can hold it, issue 34.)
    with f.written_before_fencing():
        Run.objects.filter(pk=parent.pk).update(status="interrupted", finished_at=timezone.now())
        Cell.objects.filter(pk=ids[2]).update(status="running", lease_expires_at=timezone.now())
        f.call_create(cell=Cell.objects.get(pk=ids[2]), status="sent", claim_token=0)
    assert_exact(parent)
    recovery_reconcile(run=parent)
    assert_exact(parent)
    plan = recovery_plan(run=parent, mode="undispatched")
    chosen = [e["cell"] for e in plan["eligible_cells"]]
    assert chosen
    child, created = recovery_submit(run=parent, plan=plan, idempotency_key="k", user=owner)
    assert created
    assert assert_exact(child) == {**dict.fromkeys(STATUSES, 0), "pending": len(chosen)}
    assert_exact(parent)


def test_backfill_counts_existing_runs():
    """The migration's backfill: a summary dropped and rebuilt by the migration's own
    statement equals the recount (what an upgraded database starts from)."""
    from importlib import import_module

    migration = import_module("runs.migrations.0006_run_summary")
    run = f.run_create()
    target = f.target_create()
    Cell.objects.bulk_create(
        Cell(run=run, question=f.question_create(), target=target, status=s)
        for s in ["pending", "completed", "completed", "sent_unknown"]
    )
    backfill = migration.FORWARD[-1]
    assert backfill.startswith("INSERT INTO runs_runsummary")
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_runsummary")
        cursor.execute(backfill)
    assert_exact(run)


# --- a real worker --------------------------------------------------------------------------------


@pytest.mark.worker
def test_a_run_driven_by_a_real_worker_is_exact_at_every_poll(celery_worker):
    with es.worker_run("summary", ["sim-strong", "sim-weak"], BENCHMARKS) as run:
        # A wall-clock bound, not a poll count: on a loaded machine a poll is slower and a run
        # longer; the bound covers a lost doorbell rung again by the recovery pass.
        polls = 0
        deadline = time.monotonic() + 300
        while not es.terminal(run):
            summary, counts = snapshot(run.pk)
            assert summary == counts, (summary, counts)
            polls += 1
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.005)
    counts = assert_exact(run)
    assert run.status == "completed", celery_worker.log()[-3000:]
    assert counts["completed"] == sum(counts.values()) > 0
    assert polls > 1


# --- concurrency -----------------------------------------------------------------------------------


def test_concurrent_claims_finishes_and_bulk_updates_of_one_run_stay_exact():
    """Several workers claim and finish cells of one run at once (each in its own durable
    transaction, some rolled back), while another connection rewrites statuses in bulk:
    no deadlock, no lost update. A claim locks the run row and then changes cells; a finish
    changes cells and then appends events (the run row): without the trigger taking the run
    row before the summary row, these two orders deadlock here."""
    run = f.run_create(status="running", started_at=timezone.now())
    target = f.target_create()
    Cell.objects.bulk_create(
        Cell(run=run, question=f.question_create(), target=target) for _ in range(240)
    )
    threads = 6
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker(i: int) -> None:
        rng = random.Random(i)
        try:
            barrier.wait()
            while True:
                claim = store.ClaimCells(f"w{i}", limit=4, concurrency=1000, lease_seconds=60)
                [claimed] = store.ledger_apply(run_id=run.pk, max_cost=None, ops=[claim])
                if not claimed or not claimed[0]:
                    break
                cells, _ = claimed
                if rng.random() < 0.2:
                    with pytest.raises(RuntimeError), transaction.atomic():
                        Cell.objects.filter(pk__in=[c.cell_id for c in cells]).update(
                            status="completed"
                        )
                        raise RuntimeError  # rolled back: must not be counted
                store.ledger_apply(
                    run_id=run.pk,
                    max_cost=None,
                    ops=[
                        store.FinishCell(
                            c.cell_id,
                            c.token,
                            rng.choice(["completed", "failed"]),
                            None,
                            None,
                            "",
                            "",
                        )
                        for c in cells
                    ],
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def rewriter() -> None:
        try:
            barrier.wait()
            while not stop.is_set():
                with transaction.atomic():
                    Cell.objects.filter(run=run, status="failed").update(status="sent_unknown")
                    events_append(run_id=run.pk, events=[("note", {})])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    side = threading.Thread(target=rewriter)
    for t in [*pool, side]:
        t.start()
    for t in pool:
        t.join(timeout=120)
    stop.set()
    side.join(timeout=60)
    assert not errors, errors
    counts = assert_exact(run)
    assert counts["pending"] == counts["running"] == 0
    assert counts["completed"] + counts["failed"] + counts["sent_unknown"] == 240


# --- the poll reads the same rows at any size --------------------------------------------------


def build_run(cells: int, events: int) -> Run:
    run = f.run_create(status="running", started_at=timezone.now())
    target = f.target_create()
    questions = Question.objects.bulk_create(
        Question(
            benchmark="mmlu-pro",
            native_id=f"{run.pk}-{i}",
            subject="s",
            payload={"question": "q"},
            content_sha256=hashlib.sha256(f"{run.pk}-{i}".encode()).hexdigest(),
        )
        for i in range(1000)
    )
    statuses = ["completed", "completed", "failed", "pending", "sent_unknown"]
    Cell.objects.bulk_create(
        (
            Cell(
                run=run,
                question=questions[i % 1000],
                target=target,
                slot=i // 1000,
                benchmark="mmlu-pro",
                status=statuses[i % len(statuses)],
            )
            for i in range(cells)
        ),
        batch_size=5000,
    )
    RunEvent.objects.bulk_create(
        (RunEvent(run=run, seq=s, type="cell.completed", payload={}) for s in range(1, events + 1)),
        batch_size=5000,
    )
    Run.objects.filter(pk=run.pk).update(last_event_seq=events)
    return run


def rows_read(sql: str, params: Any = ()) -> int:
    """Rows every plan node produced or filtered out, over all its loops (EXPLAIN ANALYZE)."""
    with transaction.atomic(), connection.cursor() as cursor:
        # The join this replaced read cells × events: at 20,000 × 40,000 it would run for
        # minutes; this bound makes it fail here instead.
        cursor.execute("SET LOCAL statement_timeout = '20s'")
        # Index plans, as on a database with many runs: a sequential scan of this test's
        # two-row run table would count the other run, which is not what is measured.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)

    def walk(node: dict[str, Any]) -> int:
        loops = node.get("Actual Loops", 1)
        own = (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
            + node.get("Rows Removed by Join Filter", 0)
        ) * loops
        return own + sum(walk(child) for child in node.get("Plans", []))

    return walk(plan[0]["Plan"])


def poll_rows(run: Run) -> dict[str, int]:
    out = {}
    for name, qs in (
        ("runs_with_progress", selectors.runs_with_progress(Run.objects.filter(pk=run.pk))),
        ("runs_list_rows", selectors.runs_list_rows(Run.objects.filter(pk=run.pk))),
    ):
        sql, params = qs.query.sql_with_params()
        out[name] = rows_read(sql, params)
    return out


def api_poll_rows(client: Any, run: Run) -> tuple[int, int]:
    """Rows read by every query of `GET /api/v1/runs/ID/` (what `benchmark run` polls)."""
    url = f"/api/v1/runs/{run.pk}/"
    assert client.get(url).status_code == 200  # warm: the frozen target kinds get cached
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    body = response.json()
    counts = recount(run.pk)
    assert body["progress"] == {
        "completed": counts["completed"],
        "denominator": sum(counts.values()),
        "failed": counts["failed"] + counts["sent_unknown"],
    }
    selects = [
        q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")
    ]
    return len(selects), sum(rows_read(sql) for sql in selects)


def test_a_poll_reads_the_same_rows_at_1000_and_at_20000_cells(client):
    small = build_run(1_000, 2_000)
    large = build_run(20_000, 40_000)
    with connection.cursor() as cursor:
        for table in ("runs_cell", "runs_runevent", "runs_run", "runs_runsummary"):
            cursor.execute(f"ANALYZE {table}")
    assert recount(large.pk)["completed"] == 8_000
    small_rows, large_rows = poll_rows(small), poll_rows(large)
    assert small_rows == large_rows, (small_rows, large_rows)
    assert max(large_rows.values()) <= 10  # a handful of index probes, not the run's rows

    client.force_login(f.user_create())
    small_api, large_api = api_poll_rows(client, small), api_poll_rows(client, large)
    assert small_api == large_api, (small_api, large_api)
    assert large_api[1] < 100


def test_a_later_runs_questions_page_reads_its_page_not_the_cells_of_the_runs_before_it():
    """The Questions tab and the results API page a run's cells by id (`results_page`): by the
    primary key alone the first page of a run walked every cell of the runs created before
    it; the (run, id) index (runs/0012) reads the page."""
    build_run(20_000, 0)
    later = build_run(1_000, 0)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_cell")
    with CaptureQueriesContext(connection) as queries:
        page = selectors.results_page(run=later, after=0, limit=50)
    assert [c.pk for c in page] == sorted(
        Cell.objects.filter(run=later).values_list("pk", flat=True)
    )[:50]
    [sql] = [q["sql"] for q in queries.captured_queries]
    # The page with its joined question and target rows (351 here), not the 20,000 cells
    # before it (20,351 without the index).
    assert rows_read(sql) < 1_000


def test_a_later_runs_calls_page_starts_after_the_calls_that_existed_when_it_was_created():
    """A page of a run's calls in id order (the Calls tab, `show --calls`): a call has no run
    column, so by the primary key alone the first page of a later run walked every call of
    the runs before it. Every call of a run is written after the run exists, so the page
    starts at the largest call id of the run's creation (`Run.calls_after_id`, runs/0013)."""
    before = build_run(20_000, 0)
    target = f.target_create()
    f.calls_bulk_create(Cell.objects.filter(run=before), target=target)
    # Large enough that, without the floor, the planner walks the calls' primary key from the
    # start (a run of a few hundred cells would be read through its cells and sorted).
    questions = list(Question.objects.order_by("pk")[:1000])
    with transaction.atomic():
        later = run_insert(
            run=Run(
                name="later",
                profile="smoke",
                manifest={"targets": [{"slug": target.slug}]},
                plan_sha256="0" * 64,
                dataset=before.dataset,
                owner=before.owner,
            ),
            cells=[NewCell(q.pk, target.pk, 0, "mmlu-pro") for q in questions],
        )
    assert later.calls_after_id == Call.objects.order_by("-pk").values_list("pk", flat=True)[0]
    calls = f.calls_bulk_create(Cell.objects.filter(run=later).order_by("pk"), target=target)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_call")
        cursor.execute("ANALYZE runs_cell")
    with CaptureQueriesContext(connection) as queries:
        page = selectors.calls_page(run=later, after=0, limit=50)
    assert [c.pk for c in page] == [c.pk for c in calls][:50]
    [sql] = [q["sql"] for q in queries.captured_queries]
    # At worst this run's own calls and cells (here the planner reads its 1,000 calls and
    # sorts: 6,101 rows), never the 20,000 calls of the run before it (40,301 without the
    # floor).
    assert rows_read(sql) < 10_000
    # A run from before runs/0013 (no floor) still pages all its calls.
    Run.objects.filter(pk=later.pk).update(calls_after_id=None)
    later.refresh_from_db()
    assert [c.pk for c in selectors.calls_page(run=later, after=0, limit=50)] == [
        c.pk for c in calls
    ][:50]
