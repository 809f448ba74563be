"""The live section's partial results from the trigger-kept sums (issue 25, R10.2).

Every tab and every live poll of a running run shows "Partial results" — completed of planned,
correct and failed per target and benchmark. They are read from `LiveCellSums` (one row per
target and benchmark), no longer counted over the run's cells. These tests hold the rows the
page shows equal to a count made here, in Python, from the cells themselves: after bulk and raw
writes, the reaper, a cancel, and at every poll of a run a real worker drives; and they hold the
live section's reads the same at 1,000 and at 20,000 cells (EXPLAIN ANALYZE)."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from datasets.models import Question
from runs.engine.reaper import ledger_reap
from runs.models import Cell, Run
from runs.planning.services import run_cancel, run_create
from tests import factories as f
from tests.conftest import purge_broker, wait_until
from tests.runs import engine_support as es
from tests.runs.test_pages import manifest_for
from tests.runs.test_run_summary import rows_read

# Committed transactions: the sums are applied when a transaction commits (runs/0011_live_sums).
pytestmark = pytest.mark.django_db(transaction=True)

BENCHMARKS = ["mmlu-pro", "arc"]
POLL = {"HX-Request": "true", "HX-Target": "run-live"}
ROW = re.compile(
    r'<tr class="partial-row" data-benchmark="([a-z-]+)" data-target="([^"]+)">.*?'
    r'<span class="partial-completed">(\d+)</span> / (\d+)</td>'
    r'<td class="num">(\d+)</td><td class="num">(\d+)</td>',
    re.S,
)


class _ReadOnly(Exception):
    pass


@pytest.fixture(autouse=True)
def _no_dispatch_left_behind():
    yield
    purge_broker()


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    client.force_login(f.user_create(username="alice"))
    return client


def counted(run: Run) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """(target, benchmark) -> (completed, planned, correct, failed), counted here from the
    cells, for every target and benchmark of the plan (a pair with no cell shows zeros)."""
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for slug, benchmark, status, correct in Cell.objects.filter(run_id=run.pk).values_list(
        "target__slug", "benchmark", "status", "correct"
    ):
        row = rows[(slug, benchmark)]
        row[0] += status == "completed"
        row[1] += 1
        row[2] += correct is True
        row[3] += status == "failed"
    manifest = Run.objects.filter(pk=run.pk).values_list("manifest", flat=True).get()
    return {
        (t["slug"], b): tuple(rows.get((t["slug"], b), (0, 0, 0, 0)))
        for t in manifest["targets"]
        for b in manifest["benchmarks"]
    }


def shown(html: str) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    got = {(t, b): (int(c), int(p), int(k), int(x)) for b, t, c, p, k, x in ROW.findall(html)}
    assert len(got) == len(ROW.findall(html)), "a (target, benchmark) row shown twice"
    return got


def live_poll(client, run: Run) -> str:  # type: ignore[no-untyped-def]
    response = client.get(f"/runs/{run.pk}/?tab=results&was=active", headers=POLL)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="run-live"'), html[:300]
    return html


def assert_page_equals_cells(client, run: Run) -> None:  # type: ignore[no-untyped-def]
    expected = counted(run)
    assert shown(live_poll(client, run)) == expected
    # Every tab carries the same live section.
    for tab in ("questions", "calls", "evidence", "recipe"):
        assert shown(client.get(f"/runs/{run.pk}/?tab={tab}").content.decode()) == expected


# --- every cell state and every kind of write -------------------------------------------------


def test_the_partial_rows_equal_the_cells_after_bulk_raw_reaper_and_cancel_writes(member):
    a, b = f.target_create(slug="subject-a"), f.target_create(slug="subject-b")
    run = f.run_create(
        status="running",
        started_at=timezone.now(),
        manifest=manifest_for([a, b], benchmarks=("gpqa", "mmlu-pro", "arc")),
    )
    statuses = ["completed", "completed", "failed", "pending", "sent_unknown", "running"]
    Cell.objects.bulk_create(
        Cell(
            run=run,
            question=f.question_create(benchmark=["mmlu-pro", "arc"][i % 2]),
            target=[a, b][i % 3 == 0],
            benchmark=["mmlu-pro", "arc"][i % 2],
            status=statuses[i % 6],
            # correct is counted whatever the status, as the grouped count over cells did.
            correct=None if i % 4 == 1 else i % 5 < 2,
            scored=i % 4 != 1,
        )
        for i in range(60)
    )
    assert_page_equals_cells(member, run)
    before = counted(run)
    assert before[("subject-a", "gpqa")] == (0, 0, 0, 0)  # planned in the manifest, no cell
    assert sum(r[1] for r in before.values()) == 60

    # A bulk update, raw SQL and a delete: each changes the rows shown.
    running = list(Cell.objects.filter(run=run, status="running").values_list("pk", flat=True))
    assert len(running) > 2
    Cell.objects.filter(pk__in=running[::2]).update(status="completed", correct=True, scored=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_cell SET status = 'failed', correct = NULL "
            "WHERE run_id = %s AND status = 'sent_unknown' AND target_id = %s",
            [run.pk, a.pk],
        )
    Cell.objects.filter(pk=Cell.objects.filter(run=run, status="completed").first().pk).delete()
    assert counted(run) != before
    assert_page_equals_cells(member, run)

    # The reaper: a running cell whose lease expired with its call sent is settled.
    stale = Cell.objects.filter(run=run, status="running").first()
    Cell.objects.filter(pk=stale.pk).update(
        claim_token=1,
        claimed_by="host:1:dead",
        started_at=timezone.now(),
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    f.call_create(cell=stale, status="sent")
    ledger_reap()
    assert Cell.objects.get(pk=stale.pk).status != "running"
    assert_page_equals_cells(member, run)

    # A cancel while the run runs: its pending cells are cancelled (still planned), and the
    # run stays running (the live section still shows) until the engine ends it.
    assert run_cancel(run=run)
    run.refresh_from_db()
    assert run.status == "running" and Cell.objects.filter(run=run, status="cancelled").exists()
    assert_page_equals_cells(member, run)


# --- a real worker against the simulator ------------------------------------------------------


def poll_compare(client, run: Run) -> bool:  # type: ignore[no-untyped-def]
    """In ONE snapshot while the worker commits: the live poll's rows equal the cells counted
    here. Whether the run was still running (a terminal run's poll shows no partial rows)."""
    compared = False
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if Run.objects.filter(pk=run.pk).values_list("status", flat=True).get() == "running":
                assert shown(live_poll(client, run)) == counted(run)
                compared = True
            raise _ReadOnly
    except _ReadOnly:
        pass
    return compared


@pytest.mark.worker
def test_a_real_runs_partial_rows_equal_its_cells_at_every_poll_and_at_the_end(
    celery_worker, member
):
    slow = {"sim-strong": {"ttft_s": 0.05, "tokens_per_second": 200.0}}
    with es.simulator(BENCHMARKS, models=slow) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "live section",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak"],
                "slots": 2,
                "limits": {"concurrency": 4},
            },
        )
        compared = polls = 0
        while not es.terminal(run):
            compared += poll_compare(member, run)
            polls += 1
            assert polls < 3000, "the run did not end"
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", celery_worker.log()[-3000:]
    print(f"partial rows compared at {compared} of {polls} polls")
    assert compared >= 1, "no poll saw the run running"
    # After the run: its cells as the worker left them, shown by the live section (the run set
    # back to running, as a page of a run still running shows them).
    Run.objects.filter(pk=run.pk).update(status="running", finished_at=None)
    expected = counted(run)
    assert sum(r[0] for r in expected.values()) == Cell.objects.filter(run=run).count() > 0
    assert_page_equals_cells(member, run)


# --- the live section reads the same rows at any run size -------------------------------------

IN_FLIGHT = 150  # more than a page of active calls (100), as many at both sizes


def big_running_run(cells: int) -> Run:
    """A running run with `cells` cells over two benchmarks, each with a subject call, all
    finished but IN_FLIGHT: the first cell's (a stream stuck since the start) and the newest."""
    target = f.target_create()
    run = f.run_create(
        status="running",
        started_at=timezone.now(),
        manifest=manifest_for([target], benchmarks=BENCHMARKS),
    )
    questions = Question.objects.bulk_create(
        Question(
            benchmark="mmlu-pro",
            native_id=f"{run.pk}-{i}",
            subject="s",
            payload={"question": "q"},
            content_sha256=f"{run.pk:032x}{i:032x}",
        )
        for i in range(1000)
    )
    in_flight = {0, *range(cells - IN_FLIGHT + 1, cells)}
    made = Cell.objects.bulk_create(
        (
            Cell(
                run=run,
                question=questions[i % 1000],
                target=target,
                slot=i // 1000,
                benchmark=BENCHMARKS[i % 2],
                status="running" if i in in_flight else ["completed", "failed"][i % 7 == 0],
                correct=None if i in in_flight else i % 3 == 0,
                scored=i not in in_flight,
            )
            for i in range(cells)
        ),
        batch_size=5000,
    )
    f.calls_bulk_create(
        made, target=target, status=lambda i: "streaming" if i in in_flight else "completed"
    )
    return run


def live_reads(client, run: Run) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The live poll's SELECTs and the rows they read (EXPLAIN ANALYZE), after a warm-up."""
    live_poll(client, run)  # warm: the cached manifest head
    with CaptureQueriesContext(connection) as queries:
        html = live_poll(client, run)
    assert html.count('<tr class="active-call">') == 100  # the first page of IN_FLIGHT
    assert shown(html) == counted(run)
    selects = [
        q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")
    ]
    return len(selects), sum(rows_read(sql) for sql in selects)


def test_the_live_section_reads_the_same_rows_at_1000_and_at_20000_cells(member):
    small, large = big_running_run(1_000), big_running_run(20_000)
    with connection.cursor() as cursor:
        for table in ("runs_cell", "runs_call", "runs_livecellsums"):
            cursor.execute(f"ANALYZE {table}")
    small_reads, large_reads = live_reads(member, small), live_reads(member, large)
    print(f"live poll queries and rows read: {small_reads} at 1,000 cells, {large_reads} at 20,000")
    assert small_reads == large_reads, (small_reads, large_reads)
