"""Server time of the main pages at scale: the Runs page over 10,000 runs, and every tab of the
Run detail page of a run with 100,000 calls (issue 8).

Builds the rows with bulk_create inside one transaction that is rolled back at the end, so
the database is left as it was; the pages are requested through Django's test client in the
same transaction. Rows a transaction has not committed read slower than a live database's, so
`--commit` (what `make bench` uses, on a scratch database it recreates) commits them and runs
VACUUM ANALYZE first. Run it on PostgreSQL:

    DATABASE_URL=postgres://… .venv/bin/python bench/pages.py [--runs 10000] [--calls 100000] [--commit]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings_test")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, reset_queries, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from datasets.models import FrozenDataset, Question  # noqa: E402
from runs.engine.finish import run_report_keep  # noqa: E402
from runs.models import (  # noqa: E402
    Call,
    Cell,
    LiveSnapshot,
    Run,
    RunEvent,
    RunReport,
    Target,
)
from runs.reporting import live_report  # noqa: E402
from srbench.canonical import sha256_hex  # noqa: E402

POLL_HEADERS = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run-live"}
PRICE = {"m": {"input": "3", "cached_input": "0.3", "output": "15"}}


class Rollback(Exception):
    pass


def manifest(questions: list[Question], target: Target, concurrency: int = 8) -> dict[str, Any]:
    """A frozen MMLU-Pro plan of one single-model target over ``questions`` (bench/million.py
    builds its runs from it too)."""
    return {
        "version": 1,
        "benchmarks": {"mmlu-pro": {"weight": "1/10", "kind": "mcq", "cases": len(questions)}},
        "cases": [[q.pk, q.content_sha256, "mmlu-pro"] for q in questions],
        "targets": [{"slug": target.slug, "kind": "single", "model": "m", "fixed_params": {}}],
        "judges": {},
        "prices": {target.slug: PRICE},
        "sampling": {},
        "limits": {"concurrency": concurrency},
        "slots": 1,
    }


def build(n_runs: int, n_calls: int) -> tuple[Any, Run]:
    user = get_user_model().objects.create_user(username=f"bench-{time.time_ns()}")
    target = Target.objects.create(
        slug=f"bench-{time.time_ns()}",
        name="bench",
        model="m",
        base_url="http://x/v1",
        prices=PRICE,
    )
    tag = time.time_ns()
    questions = Question.objects.bulk_create(
        Question(
            benchmark="mmlu-pro",
            native_id=f"b{tag}-{i}",
            subject="s",
            payload={"question": f"q{i}", "options": ["a", "b", "c", "d"]},
            content_sha256=hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(),
        )
        for i in range(n_calls)
    )
    dataset = FrozenDataset.objects.create(
        identity_sha256=hashlib.sha256(f"ds{tag}".encode()).hexdigest(),
        name="bench",
        profile="standard",
        seed=1,
        split="holdout",
        selection={},
    )
    now = timezone.now()
    small_manifest = manifest(questions[:3], target)
    runs = Run.objects.bulk_create(
        Run(
            name=f"run {i}",
            status="completed" if i % 10 else "running",
            profile="quick",
            manifest=small_manifest,
            plan_sha256=sha256_hex([tag, i]),
            dataset=dataset,
            owner=user,
            started_at=now,
            finished_at=now if i % 10 else None,
        )
        for i in range(n_runs - 1)
    )
    cells = Cell.objects.bulk_create(
        Cell(
            run=run,
            question=q,
            target=target,
            benchmark="mmlu-pro",
            status="completed",
            scored=True,
            correct=True,
        )
        for run in runs
        for q in questions[:3]
    )
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=s, type=t, payload={})
        for run in runs
        for s, t in ((1, "run.created"), (2, "run.started"))
    )
    big = Run.objects.create(
        name="big",
        status="running",
        profile="standard",
        manifest=manifest(questions, target),
        plan_sha256=sha256_hex([tag, "big"]),
        dataset=dataset,
        owner=user,
        started_at=now,
    )
    cells = Cell.objects.bulk_create(
        Cell(
            run=big,
            question=q,
            target=target,
            benchmark="mmlu-pro",
            status="completed" if i % 50 else "running",
            scored=bool(i % 50),
            correct=(i % 3 == 0) if i % 50 else None,
            final_answer="B",
        )
        for i, q in enumerate(questions)
    )
    Call.objects.bulk_create(
        Call(
            cell=cell,
            role="subject",
            sequence=0,
            target=target,
            status="completed" if i % 50 else "streaming",
            request={"model": "m", "messages": [{"role": "user", "content": "q"}]},
            sent_at=now,
            finished_at=now if i % 50 else None,
            duration_ms=900.0 + i % 200 if i % 50 else None,
            ttft_ms=120.0,
            input_tokens=120,
            cached_input_tokens=0,
            cache_write_tokens=0,
            output_tokens=40,
            cost_usd=Decimal("0.00096") if i % 50 else None,
            served_model="m",
            content="The answer is B",
            stage="done" if i % 50 else "streaming",
            bytes_received=800,
            # The cell's claim (its claim_token, 0 here): the ledger refuses a call on a running
            # cell under any other claim (runs.models fencing, issue 34).
            claim_token=cell.claim_token,
        )
        for i, cell in enumerate(cells)
    )
    RunEvent.objects.bulk_create(
        RunEvent(run=big, seq=s, type="cell.returned" if s % 2 else "call.sent", payload={})
        for s in range(1, n_calls + 1)
    )
    return user, big


def settle(run: Run) -> None:
    """End the run as the engine would: calls in flight finish, then the run completes."""
    now = timezone.now()
    Call.objects.filter(cell__run=run, status="streaming").update(
        status="completed",
        stage="done",
        finished_at=now,
        duration_ms=950.0,
        cost_usd=Decimal("0.00096"),
    )
    Cell.objects.filter(run=run, status="running").update(
        status="completed", scored=True, correct=False
    )
    Run.objects.filter(pk=run.pk).update(status="completed", finished_at=now)


def timed(client: Client, url: str, repeat: int) -> tuple[float, float, int]:
    times = []
    queries = 0
    for _ in range(repeat):
        reset_queries()
        start = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, (url, response.status_code)
        queries = len(connection.queries)
    return statistics.median(times), max(times), queries


def running_results(client: Client, big: Run, repeat: int) -> None:
    """The Results tab of the running run (issue 25): a request that finds no percentiles
    snapshot (it computes one), the worker's keep of it, a request that finds it kept, and
    for comparison the full report over every cell and call (what the tab computed before)."""
    url = f"/runs/{big.pk}/?tab=results"
    # The worker driving a run keeps its snapshot young (live_report.snapshot_keep, off any
    # page); timed here are a page that finds none (no worker keeps it) and the keep itself.
    LiveSnapshot.objects.filter(run=big).delete()
    median, worst, queries = timed(client, url, 1)
    label = "Run detail: results, no snapshot kept"
    print(f"{label:40} {median * 1000:8.0f}ms {worst * 1000:8.0f}ms {queries:8d}")
    LiveSnapshot.objects.filter(run=big).delete()
    start = time.perf_counter()
    live_report.snapshot_keep(run_id=big.pk)
    label = "Worker: snapshot kept (every 20 s)"
    print(f"{label:40} {(time.perf_counter() - start) * 1000:8.0f}ms")
    median, worst, queries = timed(client, url, repeat)
    label = "Run detail: results, snapshot kept"
    print(f"{label:40} {median * 1000:8.0f}ms {worst * 1000:8.0f}ms {queries:8d}")
    applies = live_report.live_applies
    live_report.live_applies = lambda run: False  # type: ignore[assignment]
    try:
        median, worst, queries = timed(client, url, repeat)
    finally:
        live_report.live_applies = applies  # type: ignore[assignment]
    label = "Run detail: results, full report (before)"
    print(f"{label:40} {median * 1000:8.0f}ms {worst * 1000:8.0f}ms {queries:8d}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--commit",
        action="store_true",
        help="commit the rows and VACUUM ANALYZE before timing, as on a live database "
        "(use a scratch database: nothing is removed afterwards)",
    )
    args = parser.parse_args()
    setup_test_environment()  # the test client's host, and query logging below
    from django.conf import settings

    settings.DEBUG = True  # connection.queries counts the queries of each page
    if args.commit:
        measure(args)
        print("committed: the rows stay in this database")
        return
    try:
        with transaction.atomic():
            measure(args)
            raise Rollback
    except Rollback:
        pass


def measure(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    user, big = build(args.runs, args.calls)
    print(f"built {args.runs} runs and a {args.calls}-call run in {time.perf_counter() - t0:.1f} s")
    # What autovacuum keeps on a live database; without statistics the planner
    # guesses every fresh table empty. ANALYZE sees this transaction's own rows.
    # With --commit the rows are also vacuumed (visibility map, hint bits), as on a live
    # database; inside the rolled-back transaction only ANALYZE is possible.
    verb = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
    with connection.cursor() as cursor:
        cursor.execute(
            f"{verb} runs_run, runs_cell, runs_call, runs_runevent, datasets_question, "
            "runs_livecellsums, runs_livecallsums"
        )
    client = Client()
    client.force_login(user)
    pages = [
        ("Runs, page 1", "/"),
        ("Runs, page 200", "/?page=200"),
        ("Runs, filter status=running", "/?status=running"),
        ("Runs, htmx poll", "/"),
        *(
            (f"Run detail: {tab}", f"/runs/{big.pk}/?tab={tab}")
            for tab in ("results", "questions", "calls", "evidence", "recipe")
        ),
        ("Run detail: calls after 50,000", f"/runs/{big.pk}/?tab=calls&after=50000"),
        ("Run detail: live poll", f"/runs/{big.pk}/?tab=results&was=active"),
    ]
    print(f"{'page':40} {'median':>9} {'max':>9} {'queries':>8}")
    for label, url in pages:
        if "poll" in label:
            client.defaults["HTTP_HX_REQUEST"] = "true"
            if "live" in label:
                client.defaults["HTTP_HX_TARGET"] = "run-live"
        median, worst, queries = timed(client, url, args.repeat)
        client.defaults.pop("HTTP_HX_REQUEST", None)
        client.defaults.pop("HTTP_HX_TARGET", None)
        print(f"{label:40} {median * 1000:8.0f}ms {worst * 1000:8.0f}ms {queries:8d}")
    running_results(client, big, args.repeat)
    # The same run once it has ended. The worker that ends a run stores its report then
    # (run_finish_if_done → run_report_keep), once, off any page: timed here on its own. A
    # view of a run whose report was not kept (ended before the run-end work existed)
    # computes it once and reuses it while nothing it reads changes (run_report_settled).
    settle(big)
    url = f"/runs/{big.pk}/?tab=results"
    median, _, _ = timed(client, url, 1)
    label = "Run detail: results, ended, not kept"
    print(f"{label:40} {median * 1000:8.0f}ms  (the first view computes the report)")
    RunReport.objects.filter(run=big).delete()
    start = time.perf_counter()
    run_report_keep(run_id=big.pk)
    label = "Run end: report kept (worker, once)"
    print(f"{label:40} {(time.perf_counter() - start) * 1000:8.0f}ms")
    for label, repeat in (("first view", 1), ("later views", args.repeat)):
        median, worst, queries = timed(client, url, repeat)
        label = f"Run detail: results, ended, {label}"
        print(f"{label:40} {median * 1000:8.0f}ms {worst * 1000:8.0f}ms {queries:8d}")


if __name__ == "__main__":
    main()
