"""Scale benchmark: the run poll at 1,000 and at 100,000 cells (issue 25 point 1).

`GET /api/v1/runs/ID/` is what `benchmark run` polls while it follows a run; it reads the
run's progress from its summary row (runs.models.RunSummary, kept by triggers) and its newest
event from the (run, seq) index, so its cost must not grow with the run. Prints, for a run of
1,000 cells + 2,000 events and one of 100,000 cells + 200,000 events (a 100,000-case frozen
manifest): the database time of the progress query (EXPLAIN ANALYZE execution time), the
full API poll through Django's test client, and what the summary triggers add to writes (a
cell finish, a bulk status update), measured against the same writes with them disabled.
For reference it also times the join this replaced on the small run only (cells × events
rows; on the large one it would run for hours).

By default the rows are built inside one transaction that is rolled back at the end;
`--commit` (what `make bench` uses, on a scratch database it recreates) commits them and runs
VACUUM ANALYZE before timing, as on a live database. Run it on PostgreSQL:

    DATABASE_URL=postgres://… .venv/bin/python bench/poll_scale.py [--repeat 5] [--commit]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings_test")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, reset_queries, transaction  # noqa: E402
from django.db.models import Count, Max, Q  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from datasets.models import FrozenDataset, Question  # noqa: E402
from runs.ledger import selectors  # noqa: E402
from runs.models import Cell, Run, RunEvent, Target  # noqa: E402
from srbench.canonical import sha256_hex  # noqa: E402

PRICE = {"m": {"input": "3", "cached_input": "0.3", "output": "15"}}
STATUSES = ("completed",) * 6 + ("failed", "sent_unknown", "running", "pending")
TRIGGERS = ("runs_cell_summary_insert", "runs_cell_summary_update", "runs_cell_summary_delete")


class Rollback(Exception):
    pass


def build(questions: list[Question], target: Target, dataset: Any, owner: Any, cells: int) -> Run:
    cases = questions[:cells]
    doc = {
        "version": 1,
        "name": f"poll {cells}",
        "mode": "live",
        "benchmarks": {"mmlu-pro": {"weight": "1/10", "kind": "mcq", "cases": len(cases)}},
        "cases": [[q.pk, q.content_sha256, "mmlu-pro"] for q in cases],
        "targets": [{"slug": target.slug, "kind": "single", "model": "m", "fixed_params": {}}],
        "judges": {},
        "prices": {target.slug: PRICE},
        "sampling": {},
        "limits": {"concurrency": 64},
        "slots": 1,
    }
    now = timezone.now()
    run = Run.objects.create(
        name=doc["name"],
        manifest=doc,
        plan_sha256=sha256_hex(doc),
        dataset=dataset,
        owner=owner,
        status="running",
        started_at=now,
    )
    Cell.objects.bulk_create(
        (
            Cell(
                run=run,
                question=q,
                target=target,
                benchmark="mmlu-pro",
                status=STATUSES[i % len(STATUSES)],
                scored=STATUSES[i % len(STATUSES)] == "completed",
                correct=(i % 3 == 0) if STATUSES[i % len(STATUSES)] == "completed" else None,
            )
            for i, q in enumerate(cases)
        ),
        batch_size=5000,
    )
    events = 2 * cells  # ~2 events per call, one call per cell
    RunEvent.objects.bulk_create(
        (
            RunEvent(run=run, seq=s, type="call.sent" if s % 2 else "cell.completed", payload={})
            for s in range(1, events + 1)
        ),
        batch_size=5000,
    )
    Run.objects.filter(pk=run.pk).update(last_event_seq=events)
    return run


def explain_ms(sql: str, params: Any, timeout_s: int = 0) -> tuple[float, int]:
    """EXPLAIN ANALYZE execution time (ms) and the rows its plan nodes produced or removed."""
    with transaction.atomic(), connection.cursor() as cursor:
        if timeout_s:
            cursor.execute(f"SET LOCAL statement_timeout = '{timeout_s}s'")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)

    def rows(node: dict[str, Any]) -> int:
        own = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get(
            "Actual Loops", 1
        )
        return int(own + sum(rows(c) for c in node.get("Plans", [])))

    return plan[0]["Execution Time"], rows(plan[0]["Plan"])


def best_explain(qs: Any, repeat: int, timeout_s: int = 0) -> tuple[float, int]:
    sql, params = qs.query.sql_with_params()
    runs = [explain_ms(sql, params, timeout_s) for _ in range(repeat)]
    return min(ms for ms, _ in runs), runs[0][1]


def old_progress(run: Run) -> Any:
    """The query this replaced (runs_with_progress before issue 25): cells × events rows."""
    return Run.objects.filter(pk=run.pk).annotate(
        cells_total=Count("cells", distinct=True),
        cells_completed=Count("cells", filter=Q(cells__status="completed"), distinct=True),
        cells_failed=Count(
            "cells", filter=Q(cells__status__in=["failed", "sent_unknown"]), distinct=True
        ),
        last_event_at=Max("events__created_at"),
    )


def api_poll(client: Client, run: Run, repeat: int) -> tuple[float, float, int]:
    url = f"/api/v1/runs/{run.pk}/"
    times, queries = [], 0
    for _ in range(repeat + 1):  # the first request warms the cached target kinds
        reset_queries()
        start = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, response.status_code
        queries = len(connection.queries)
    times = times[1:]
    return statistics.median(times) * 1000, min(times) * 1000, queries


def set_triggers(enabled: bool) -> None:
    with connection.cursor() as cursor:
        for name in TRIGGERS:
            verb = "ENABLE" if enabled else "DISABLE"
            cursor.execute(f"ALTER TABLE runs_cell {verb} TRIGGER {name}")


def write_costs(run: Run, repeat: int) -> dict[str, float]:
    """ms per single-cell status UPDATE (200 statements, one transaction), and for one bulk
    UPDATE of every cell's status; each rolled back, so every measure sees the same rows."""
    ids = list(Cell.objects.filter(run=run).order_by("pk").values_list("pk", flat=True)[:200])
    out = {}
    for label, fn in (
        (
            "one cell finish",
            lambda: [
                Cell.objects.filter(pk=pk).update(status="completed", finished_at=timezone.now())
                for pk in ids
            ],
        ),
        (
            "bulk status update",
            lambda: Cell.objects.filter(run=run).update(status="cancelled"),
        ),
    ):
        best = float("inf")
        for _ in range(repeat):
            try:
                with transaction.atomic():
                    start = time.perf_counter()
                    fn()
                    elapsed = time.perf_counter() - start
                    raise Rollback
            except Rollback:
                best = min(best, elapsed)
        out[label] = best * 1000 / (len(ids) if label == "one cell finish" else 1)
    return out


def measure(args: argparse.Namespace) -> None:
    owner = get_user_model().objects.create_user(username=f"bench-poll-{time.time_ns()}")
    tag = time.time_ns()
    dataset = FrozenDataset.objects.create(
        identity_sha256=hashlib.sha256(f"poll{tag}".encode()).hexdigest(),
        name="bench",
        profile="standard",
        seed=1,
        split="holdout",
        selection={},
    )
    target = Target.objects.create(
        slug=f"bench-poll-{tag}", name="t", model="m", base_url="http://x/v1", prices=PRICE
    )
    started = time.perf_counter()
    questions = Question.objects.bulk_create(
        (
            Question(
                benchmark="mmlu-pro",
                native_id=f"p{tag}-{i}",
                subject="s",
                payload={"question": f"q{i}", "options": ["a", "b", "c", "d"]},
                content_sha256=hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(),
            )
            for i in range(100_000)
        ),
        batch_size=5000,
    )
    small = build(questions, target, dataset, owner, 1_000)
    large = build(questions, target, dataset, owner, 100_000)
    verb = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
    with connection.cursor() as cursor:
        cursor.execute(
            f"{verb} runs_run, runs_cell, runs_runevent, runs_runsummary, datasets_question"
        )
    print(f"built runs of 1,000 and 100,000 cells in {time.perf_counter() - started:.1f} s")

    client = Client()
    client.force_login(owner)
    print(f"{'':<46} {'1,000 cells':>16} {'100,000 cells':>16}")
    rows = {}
    for run in (small, large):
        rows[run.pk] = best_explain(
            selectors.runs_with_progress(Run.objects.filter(pk=run.pk)), args.repeat
        )
    print(
        f"{'progress query, DB execution (EXPLAIN ANALYZE)':<46} "
        f"{rows[small.pk][0]:13.3f} ms {rows[large.pk][0]:13.3f} ms"
    )
    print(f"{'  rows read by its plan':<46} {rows[small.pk][1]:16} {rows[large.pk][1]:16}")
    polls = {run.pk: api_poll(client, run, args.repeat) for run in (small, large)}
    print(
        f"{'GET /api/v1/runs/ID/, median':<46} "
        f"{polls[small.pk][0]:13.1f} ms {polls[large.pk][0]:13.1f} ms"
    )
    print(
        f"{'GET /api/v1/runs/ID/, best':<46} "
        f"{polls[small.pk][1]:13.1f} ms {polls[large.pk][1]:13.1f} ms"
    )
    print(f"{'  queries':<46} {polls[small.pk][2]:16} {polls[large.pk][2]:16}")
    try:
        old_ms, old_rows = best_explain(old_progress(small), 1, timeout_s=120)
        print(
            f"{'before issue 25 (cells × events join), DB':<46} {old_ms:13.1f} ms {'(hours)':>16}"
        )
        print(f"{'  rows read by its plan':<46} {old_rows:16} {'~2 × 10^10':>16}")
    except Exception as exc:  # noqa: BLE001 - a reference figure only
        print(f"before issue 25 (cells × events join): not measured ({exc})")

    with_triggers = write_costs(large, args.repeat)
    set_triggers(False)
    try:
        without = write_costs(large, args.repeat)
    finally:
        set_triggers(True)
    print("what the summary triggers add to writes (100,000-cell run):")
    for label in with_triggers:
        unit = "per cell" if label == "one cell finish" else "100,000 cells"
        print(
            f"  {label + ' (' + unit + ')':<44} {with_triggers[label]:10.3f} ms with, "
            f"{without[label]:10.3f} ms without"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--commit",
        action="store_true",
        help="commit the rows and VACUUM ANALYZE before timing, as on a live database "
        "(use a scratch database: nothing is removed afterwards)",
    )
    args = parser.parse_args()
    setup_test_environment()  # the test client's host, and query logging below
    from django.conf import settings

    settings.DEBUG = True  # connection.queries counts the poll's queries
    print(f"database: {connection.settings_dict['NAME']}")
    if args.commit:
        measure(args)
        print("committed: the rows stay in this scratch database")
        return
    try:
        with transaction.atomic():
            measure(args)
            raise Rollback
    except Rollback:
        print("rolled back: the database is unchanged")


if __name__ == "__main__":
    main()
