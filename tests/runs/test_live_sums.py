"""The Results of a running run from trigger-kept sums (issue 25: "run-detail tabs of a
100,000-call run ≤ 100 ms"; R1 unknown stays null, R7.1, R10.2, R13.2).

Migration 0011 keeps per (run, target, benchmark) cell counts and per (run, target, role,
waste) call sums in the transaction that writes the ledger. These tests hold them equal to
sums recomputed here in Python from the rows after every kind of writer (a real worker
against the simulator, bulk and raw-SQL updates, deletes, the reaper, recovery), hold the
running run's report built from them equal to the full report on the same ledger for every
sum, and hold the rows the Results tab reads constant from 1,000 cells to 20,000."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from importlib import import_module
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from datasets.models import Question
from runs.engine import store
from runs.engine.reaper import ledger_reap
from runs.models import Call, Cell, LiveCallSums, LiveCellSums, LiveSnapshot, Run
from runs.reporting.live_report import run_report_live_compute, run_results_compute
from runs.reporting.report import run_report_compute
from runs.reporting.report_types import report_doc
from runs.settlement.recovery import recovery_reconcile
from tests import factories as f
from tests.conftest import purge_broker, wait_until
from tests.runs import engine_support as es
from tests.runs.test_run_summary import rows_read

pytestmark = pytest.mark.django_db(transaction=True)

STATES = ("pending", "running", "completed", "failed", "cancelled", "sent_unknown")
SUMMED = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "cache_neutral_cost_usd",
    "duration_ms",
)
WASTE = ("failed", "sent_unknown")
BENCHMARKS = ["mmlu-pro", "arc"]


@pytest.fixture(autouse=True)
def _no_dispatch_left_behind():
    yield
    purge_broker()


# --- sums recomputed here from the rows, in Python ------------------------------------------------


def recount(run_id: int) -> tuple[dict, dict]:
    cells: dict[tuple, dict[str, int]] = {}
    subject = set(
        Call.objects.filter(cell__run_id=run_id, role="subject").values_list("cell_id", flat=True)
    )
    for c in Cell.objects.filter(run_id=run_id).values(
        "id", "target_id", "benchmark", "status", "correct", "scored"
    ):
        row = cells.setdefault((c["target_id"], c["benchmark"]), defaultdict(int))
        row[c["status"]] += 1
        row["correct"] += c["correct"] is True
        row["scored"] += c["scored"] is True
        row["subject_cells"] += c["id"] in subject
    calls: dict[tuple, dict[str, Any]] = {}
    for c in Call.objects.filter(cell__run_id=run_id).values(
        "cell__target_id", "role", "status", *SUMMED
    ):
        key = (c["cell__target_id"], c["role"], c["status"] in WASTE)
        row = calls.setdefault(key, defaultdict(int))
        row["calls"] += 1
        for name in SUMMED:
            if c[name] is not None:
                # duration_ms is a float; PostgreSQL's float8 -> numeric keeps 15 digits.
                value = Decimal(format(c[name], ".15g")) if name == "duration_ms" else c[name]
                row[name] += value
                row[f"{name}_known"] += 1
    return (
        {
            k: {n: v[n] for n in (*STATES, "correct", "scored", "subject_cells")}
            for k, v in cells.items()
        },
        {k: dict(v) for k, v in calls.items()},
    )


def stored(run_id: int) -> tuple[dict, dict]:
    cells = {}
    for r in LiveCellSums.objects.filter(run_id=run_id).values():
        key = (r.pop("target_id"), r.pop("benchmark"))
        r.pop("id"), r.pop("run_id")
        if any(r.values()):  # a row summed back to zero is no row
            cells[key] = r
    calls = {}
    for r in LiveCallSums.objects.filter(run_id=run_id).values():
        key = (r.pop("target_id"), r.pop("role"), r.pop("waste"))
        r.pop("id"), r.pop("run_id")
        if any(r.values()):
            calls[key] = {k: v for k, v in r.items() if v or k == "calls"}
    return cells, calls


def normalised(calls: dict) -> dict:
    return {k: {n: v for n, v in row.items() if v or n == "calls"} for k, row in calls.items()}


def assert_exact(run_id: int) -> tuple[dict, dict]:
    cells, calls = recount(run_id)
    got_cells, got_calls = stored(run_id)
    assert got_cells == cells
    want = normalised(calls)
    assert got_calls == want, {
        k: (got_calls.get(k), want.get(k))
        for k in {*got_calls, *want}
        if got_calls.get(k) != want.get(k)
    }
    return cells, calls


class _ReadOnly(Exception):
    pass


def snapshot_compare(run: Run) -> bool:
    """In ONE snapshot while writers commit: the sums equal the rows, and (when running) the
    live report's sums equal the full report's. Whether the live report was compared. The
    snapshot is rolled back (what the live report stored is not kept: a repeatable-read
    transaction cannot commit a row whose run the workers have updated since)."""
    compared = False
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            assert_exact(run.pk)
            status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).get()
            if status == "running":
                run.refresh_from_db()
                assert_same_sums(run)
                compared = True
            raise _ReadOnly
    except _ReadOnly:
        pass
    return compared


# --- the live report equals the full one for every sum --------------------------------------------

# What the live report does not give while the run runs: the question-level intervals and the
# official scorers (given when it ends), the percentiles and routing (an "as of" snapshot).
# Not kept by the live sums: percentiles (the snapshot), the official scorers and the empty
# answers (counted when the run has ended; None while it runs).
NOT_SUMS = (
    "ttft_p50_ms",
    "latency_p50_ms",
    "latency_p95_ms",
    "official",
    "empty_answers",
    "empty_answers_note",
)
NOT_SUMS_MOM = ("selected_models", "selected_decisions")


def sums_doc(report: Any) -> dict[str, Any]:
    doc = report_doc(report)
    doc["run"].pop("wall_seconds")  # runs to now
    for t in doc["targets"]:
        for k in (*NOT_SUMS, *NOT_SUMS_MOM):
            t.pop(k, None)
        for b in t["benchmarks"].values():
            b.pop("wilson_95"), b.pop("questions")
    return doc


def assert_same_sums(run: Run) -> None:
    """The live report's sums are the full report's; with its snapshot recomputed now, so
    are its percentiles and a MoM target's routing."""
    LiveSnapshot.objects.filter(run=run).delete()
    live = run_report_live_compute(run=run)
    assert live.live and live.snapshot_at is not None
    full = run_report_compute(run=run)
    assert sums_doc(live.report) == sums_doc(full)
    for lt, ft in zip(live.report.targets, full.targets, strict=True):
        for name in (*NOT_SUMS[:3], *NOT_SUMS_MOM):
            assert getattr(lt, name) == getattr(ft, name), (lt.slug, name)


# --- every writer keeps the sums exact --------------------------------------------------------------


def manifest_for(targets: list[Any], benchmarks: list[str]) -> dict[str, Any]:
    return {
        "targets": [{"slug": t.slug, "kind": t.kind, "model": t.model} for t in targets],
        "benchmarks": {b: {"weight": "1"} for b in benchmarks},
    }


def test_bulk_updates_raw_sql_and_deletes_keep_the_sums_exact_and_unknown_stays_unknown():
    """Cells and calls written by bulk_create, .update(), bulk_update, raw SQL and deletes,
    over two runs in one statement: the sums equal the rows, with None kept as "not known"
    (a null cost counts in cost_usd_known, never as 0)."""
    target = f.target_create()
    one, two = f.run_create(), f.run_create()
    for run in (one, two):
        # Running: their calls are opened and streamed as a worker does (fencing, issue 34).
        Cell.objects.bulk_create(
            Cell(
                run=run,
                question=f.question_create(),
                target=target,
                benchmark=b,
                slot=0,
                status="running",
            )
            for b in ["mmlu-pro", "mmlu-pro", "arc", "arc", "arc"]
        )
    cells = list(Cell.objects.filter(run__in=[one, two]).order_by("pk"))
    f.calls_insert(
        list(
            Call(
                cell=c,
                role=role,
                sequence=i,
                target=target,
                request={},
                sent_at=timezone.now(),
                status="sent",
            )
            for c in cells
            for i, role in enumerate(["subject", "judge"])
        )
    )
    assert_exact(one.pk), assert_exact(two.pk)
    # A stream checkpoint (sent -> streaming, bytes) changes no sum.
    before = stored(one.pk)
    Call.objects.filter(cell__run=one).update(status="streaming", bytes_received=10)
    assert stored(one.pk) == before
    calls = list(Call.objects.filter(cell__run__in=[one, two]).order_by("pk"))
    for i, call in enumerate(calls):
        call.status = ["completed", "failed", "sent_unknown", "completed"][i % 4]
        call.input_tokens = None if i % 5 == 0 else 100 + i
        call.output_tokens = None if i % 3 == 0 else 7 * i
        call.cached_input_tokens = i if i % 2 else None
        call.cost_usd = None if i % 4 == 1 or i % 3 == 0 else Decimal("0.0000012345") * (i + 1)
        call.cache_neutral_cost_usd = Decimal("0.0000001") * i if i % 6 else None
        call.duration_ms = None if i % 7 == 0 else 1000 / (i + 3)
    Call.objects.bulk_update(
        calls,
        [
            "status",
            "input_tokens",
            "output_tokens",
            "cached_input_tokens",
            "cost_usd",
            "cache_neutral_cost_usd",
            "duration_ms",
        ],
    )
    Cell.objects.filter(run=one).update(status="completed", correct=True, scored=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_cell SET status = CASE WHEN id %% 2 = 0 THEN 'failed' "
            "ELSE 'completed' END, correct = (id %% 3 = 0), scored = true WHERE run_id = %s",
            [two.pk],
        )
        victim = cells[-1]
        cursor.execute("DELETE FROM runs_call WHERE cell_id = %s", [victim.pk])
        cursor.execute("DELETE FROM runs_cell WHERE id = %s", [victim.pk])
        # One subject call of a cell gone, the cell keeps its other (judge) call.
        cursor.execute(
            "DELETE FROM runs_call WHERE cell_id = %s AND role = 'subject'", [cells[0].pk]
        )
    cells_one, calls_one = assert_exact(one.pk)
    assert_exact(two.pk)
    assert cells_one[(target.pk, "mmlu-pro")]["subject_cells"] == 1
    unknown_cost = sum(r["calls"] - r.get("cost_usd_known", 0) for r in calls_one.values())
    assert unknown_cost > 0  # the null costs are counted as unknown, not summed as 0


def test_a_rolled_back_write_leaves_the_sums_as_they_were():
    run = f.run_create()
    cell = f.cell_create(run=run)
    f.call_create(cell=cell, status="sent")
    before = stored(run.pk)
    with pytest.raises(RuntimeError), transaction.atomic():
        Call.objects.filter(cell=cell).update(
            status="completed", output_tokens=3, cost_usd=Decimal("1.5")
        )
        assert stored(run.pk) == before  # applied when the transaction commits
        raise RuntimeError
    assert stored(run.pk) == before
    assert_exact(run.pk)


def test_the_sums_of_call_writes_take_no_lock_on_the_run_row():
    """The sums' triggers of a stream checkpoint (no sum changes) and of a call's close (its
    sums change) take no lock on the run row: the sums wait until commit and then lock only
    their own rows. (The engine's writers take the run row first themselves, the ledger's one
    lock order, issue 34; the triggers add no second order.) The sums are exact after the
    commit."""
    run = f.run_create(status="running", started_at=timezone.now())
    cell = f.cell_create(run=run, status="running")
    call = f.call_create(cell=cell, status="sent")
    with transaction.atomic():
        store._activity_write([(call.pk, "streaming", timezone.now(), 42)])
        Call.objects.filter(pk=call.pk).update(
            status="completed", output_tokens=5, cost_usd=Decimal("0.25")
        )
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("SELECT id FROM runs_run WHERE id = %s FOR UPDATE NOWAIT", [run.pk])
                assert cursor.fetchone() == (run.pk,)
        finally:
            other.close()
    _, calls = assert_exact(run.pk)
    assert calls[(cell.target_id, "subject", False)]["cost_usd"] == Decimal("0.25")


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
        f.call_create(cell=cell, status=call_status, reserved_cost_usd=Decimal("0.01"))
    return cell


def test_the_reaper_and_recovery_keep_the_sums_exact():
    run = f.run_create(status="running", started_at=timezone.now())
    running_cell(run, lease_s=-1, call_status="sent")
    running_cell(run, lease_s=-1, call_status=None)
    running_cell(run, lease_s=30, call_status="streaming")
    ledger_reap()
    _, calls = assert_exact(run.pk)
    assert any(waste and row["calls"] for (_, _, waste), row in calls.items())
    ledger_reap(now=timezone.now() + timedelta(seconds=60))
    assert_exact(run.pk)
    # A run that ended with a cell running and its call open (as before the terminal guard):
    # recovery's reconciliation settles them in bulk.
    # (Only a ledger from before the fencing triggers can hold it, issue 34.)
    with f.written_before_fencing():
        ended = f.run_create(status="running", started_at=timezone.now())
        cell = f.cell_create(run=ended)
        Run.objects.filter(pk=ended.pk).update(status="interrupted", finished_at=timezone.now())
        Cell.objects.filter(pk=cell.pk).update(status="running", lease_expires_at=timezone.now())
        f.call_create(cell=cell, status="sent", cost_usd=None, claim_token=0)
    recovery_reconcile(run=ended)
    _, calls = assert_exact(ended.pk)
    assert calls[(cell.target_id, "subject", True)]["calls"] == 1  # now sent_unknown: waste
    assert_exact(ended.pk)


# --- a real worker against the simulator --------------------------------------------------------


@pytest.mark.worker
def test_a_run_driven_by_a_real_worker_is_exact_and_its_live_results_equal_the_full_report(
    celery_worker,
):
    """A real run (subject and MoM targets, two slots, concurrency 4) against the simulator:
    at every poll, in one snapshot, the sums equal the rows and the running run's Results
    report equals the full report on every sum; at the end, the sums are exact."""
    with es.worker_run("live sums", ["sim-strong", "sim-router"], BENCHMARKS) as run:
        compared = polls = 0
        while not es.terminal(run):
            compared += snapshot_compare(run)
            polls += 1
            assert polls < 3000, "the run did not end"
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", celery_worker.log()[-3000:]
    cells, calls = assert_exact(run.pk)
    assert sum(r["completed"] for r in cells.values()) == Cell.objects.filter(run=run).count()
    assert sum(r.get("cost_usd_known", 0) for r in calls.values()) > 0
    print(f"live report compared at {compared} of {polls} polls")
    assert compared >= 1, "no poll saw the run running"


# --- the Results page of a running run ----------------------------------------------------------


def build_running_run(cells: int, *, seed: int = 0, unknown: bool = True) -> Run:
    """A running run with `cells` cells over two benchmarks and one subject call per cell that
    has started: known and (with `unknown`) unknown costs, usage and durations, some failed
    calls."""
    target = f.target_create()
    run = f.run_create(
        status="running",
        started_at=timezone.now(),
        manifest=manifest_for([target], ["mmlu-pro", "arc"]),
    )
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
    statuses = ["completed", "completed", "failed", "pending", "sent_unknown", "running"]
    made = Cell.objects.bulk_create(
        (
            Cell(
                run=run,
                question=questions[i % 1000],
                target=target,
                slot=i // 1000,
                benchmark=["mmlu-pro", "arc"][i % 2],
                status=statuses[i % len(statuses)],
                correct=(i % 3 == 0) if statuses[i % len(statuses)] == "completed" else None,
                scored=statuses[i % len(statuses)] == "completed",
            )
            for i in range(cells)
        ),
        batch_size=5000,
    )
    call_status = {"completed": "completed", "failed": "failed", "sent_unknown": "sent_unknown"}
    f.calls_insert(
        list(
            (
                Call(
                    cell=c,
                    role="subject",
                    sequence=0,
                    target=target,
                    request={},
                    sent_at=timezone.now(),
                    status=call_status.get(c.status, "streaming"),
                    input_tokens=None if unknown and i % 11 == 0 else 50 + i % 7,
                    output_tokens=None if unknown and i % 13 == 0 else 9 + i % 5,
                    cost_usd=None
                    if unknown and (i % 17 == 0 or i % 13 == 0)
                    else Decimal("0.0000031") * (1 + i % 9),
                    cache_neutral_cost_usd=None
                    if unknown and i % 19 == 0
                    else Decimal("0.0000029") * (1 + i % 4),
                    duration_ms=None if c.status == "running" else 200.0 + (i * 37 + seed) % 900,
                    ttft_ms=None if c.status == "running" else 50.0 + i % 40,
                )
                for i, c in enumerate(made)
                if c.status != "pending"
            )
        )
    )
    return run


def test_the_running_runs_results_page_shows_the_full_reports_sums(client):
    """(3) The page of a running run renders the live report, and its sums are the full
    report's on the same ledger; the percentiles are labelled with their time."""
    run = build_running_run(600)
    assert_exact(run.pk)
    full = run_report_compute(run=run)
    client.force_login(run.owner)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    shown = response.context["report"]
    assert response.context["live_results"] is True
    assert sums_doc(shown) == sums_doc(full)
    (target,) = full.targets
    assert target.known_cost_usd is not None and target.subject_cost_usd is None
    html = response.content.decode()
    assert "percentiles as of" in html
    assert full.spend.known_total_spend_usd is not None
    # The snapshot's percentiles are the full report's (computed on this first view).
    (live_target,) = shown.targets
    assert (live_target.latency_p50_ms, live_target.latency_p95_ms, live_target.ttft_p50_ms) == (
        target.latency_p50_ms,
        target.latency_p95_ms,
        target.ttft_p50_ms,
    )
    # An ended run's Results are the stored full report, as before.
    Call.objects.filter(cell__run=run, status="streaming").update(status="sent_unknown")
    Cell.objects.filter(run=run, status="running").update(status="sent_unknown")
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=timezone.now())
    run.refresh_from_db()
    assert run_results_compute(run=run).live is False


def finish_all_but_the_run(run: Run) -> None:
    """The last moments of a run: every cell has its subject call and a result, every call
    has ended, the run row still says running (the full report's complete branches)."""
    target = Cell.objects.filter(run=run).first().target
    f.calls_insert(
        list(
            Call(
                cell=c,
                role="subject",
                sequence=0,
                target=target,
                request={},
                sent_at=timezone.now(),
                status="completed",
                input_tokens=40,
                cached_input_tokens=0,
                cache_write_tokens=0,
                output_tokens=8,
                cost_usd=Decimal("0.0000077"),
                cache_neutral_cost_usd=Decimal("0.0000081"),
                duration_ms=333.25,
                ttft_ms=21.5,
            )
            for c in Cell.objects.filter(run=run, status="pending")
        )
    )
    Call.objects.filter(cell__run=run, status="streaming").update(
        status="completed",
        input_tokens=41,
        cached_input_tokens=0,
        cache_write_tokens=0,
        output_tokens=9,
        cost_usd=Decimal("0.0000079"),
        cache_neutral_cost_usd=Decimal("0.0000083"),
        duration_ms=512.5,
    )
    Cell.objects.filter(run=run).update(status="completed", scored=True)
    # A failed call stays failed (a finished call never changes), and a sent_unknown call stays
    # sent_unknown (a settled call never changes, issue 34); the others have ended.


@pytest.mark.parametrize("unknown", [True, False])
def test_a_running_run_with_every_cell_done_gives_the_full_reports_totals(unknown):
    """Every cell completed while the run row still says running: the totals the full report
    gives only when every value is known (tokens, costs, cache-neutral cost, spend) are the
    live report's too, and stay None with the reason when some value is unknown (R1)."""
    run = build_running_run(300, unknown=unknown)
    assert_same_sums(run)
    finish_all_but_the_run(run)
    assert_exact(run.pk)
    assert_same_sums(run)
    (target,) = run_report_compute(run=run).targets
    if unknown:
        assert target.subject_cost_usd is None and target.known_cost_usd is not None
        assert target.cache_neutral_cost_usd is None
        assert target.cache_neutral_unknown_reason
    else:
        assert target.subject_cost_usd is not None and target.tokens["output"] is not None
        assert target.cache_neutral_cost_usd is not None


# --- the Results query of a running run reads the same rows at any size ----------------------


def results_rows(run: Run) -> tuple[int, int]:
    run_results_compute(run=run)  # warm: the snapshot and the cached manifest head
    assert LiveSnapshot.objects.filter(run=run).exists()
    with CaptureQueriesContext(connection) as queries:
        results = run_results_compute(run=run)
    assert results.live
    selects = [
        q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")
    ]
    return len(selects), sum(rows_read(sql) for sql in selects)


def test_the_running_results_read_the_same_rows_at_1000_and_at_20000_cells():
    small, large = build_running_run(1_000), build_running_run(20_000, seed=1)
    with connection.cursor() as cursor:
        for table in ("runs_cell", "runs_call", "runs_livecellsums", "runs_livecallsums"):
            cursor.execute(f"ANALYZE {table}")
    small_rows, large_rows = results_rows(small), results_rows(large)
    print(f"results queries and rows read: {small_rows} at 1,000 cells, {large_rows} at 20,000")
    assert small_rows == large_rows, (small_rows, large_rows)
    assert large_rows[1] < 60  # a handful of rows per target, not the run's cells or calls
    assert_same_sums(large)


def test_the_migrations_backfill_equals_the_trigger_kept_sums():
    """An upgraded database starts from the migration's backfill: dropped and rebuilt by the
    migration's own statements, the sums equal the rows (and what the triggers kept)."""
    migration = import_module("runs.migrations.0011_live_sums")
    run = build_running_run(120)
    kept = assert_exact(run.pk)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_livecellsums")
        cursor.execute("DELETE FROM runs_livecallsums")
        for statement in migration.BACKFILL:
            cursor.execute(statement)
    assert assert_exact(run.pk) == kept
