"""Scale benchmark: run report over 100,000 cells, comparison of 20 candidates × 3,183 cases.

The run report is timed twice: computed from the ledger (`run_report`, what every API request
did before issue 38), and as users fetch it, `GET /api/v1/runs/ID/report/` through the whole
request stack, reading the report kept at run end (after a usage correction too, which keeps
the corrected report in its own commit).

Targets (PERFORMANCE.md): each ≤ 1 s. The comparison is also measured on the path users take
(issue 25): each run's run-end work as the engine's finish does it (`run_report_keep`: its
report, then the run-end hooks — compare stores its per-cell figures), then the FIRST
comparison read after that. By default builds the rows with bulk_create inside one
transaction that is rolled back at the end, so the database is left as it was; rows a
transaction has not committed are slower to read (no hint bits, no visibility map), so
`--commit` (what `make bench` uses, on a scratch database it recreates) commits them and runs
VACUUM ANALYZE before timing, as on a live database. Run it on PostgreSQL:

    DATABASE_URL=postgres://… .venv/bin/python bench/report_scale.py [--repeat 3] [--commit]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings_test")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from compare.models import CaseFigures  # noqa: E402
from compare.services import comparison_build  # noqa: E402
from datasets.benchmarks import get_adapter  # noqa: E402
from datasets.models import FrozenDataset, Question  # noqa: E402
from runs.engine.finish import run_report_keep  # noqa: E402
from runs.ledger.corrections import version_appended  # noqa: E402
from runs.models import Call, Cell, Run, RunReport, Target, UsageCorrection  # noqa: E402
from runs.reporting.report import run_report  # noqa: E402
from srbench.canonical import sha256_hex  # noqa: E402

BENCHMARKS = ("mmlu-pro", "gpqa", "arc")
PRICE = {"m": {"input": "3", "cached_input": "0.3", "output": "15"}}


class Rollback(Exception):
    pass


def build_questions(n: int, tag: str) -> list[Question]:
    return Question.objects.bulk_create(
        Question(
            benchmark=BENCHMARKS[i % len(BENCHMARKS)],
            native_id=f"{tag}{i}",
            subject="s",
            payload={"question": f"q{i}", "options": ["a", "b", "c", "d"]},
            content_sha256=hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(),
        )
        for i in range(n)
    )


def manifest(qs: list[Question], targets: list[Target]) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "scale",
        "mode": "live",
        "dataset": {"split": "dev"},
        "benchmarks": {
            b: {
                "weight": str(get_adapter(b).weight),
                "kind": get_adapter(b).kind,
                "grader_version": get_adapter(b).grader_version,
                "cases": sum(1 for q in qs if q.benchmark == b),
            }
            for b in BENCHMARKS
        },
        "cases": [[q.pk, q.content_sha256, q.benchmark] for q in qs],
        "targets": [{"slug": t.slug, "kind": t.kind, "model": t.model} for t in targets],
        "judges": {},
        "prices": {t.slug: PRICE for t in targets},
        "sampling": {"temperature": 0},
        "limits": {"concurrency": 64},
        "failure_policy": "stop",
        "slots": 1,
    }


def build_run(
    qs: list[Question],
    targets: list[Target],
    dataset: FrozenDataset,
    owner: Any,
    seed: int,
    failed_every: int = 0,
) -> Run:
    """A completed run of `qs` × `targets`, one completed call a cell; with `failed_every` = k,
    every k-th cell (and its call, an HTTP 500 at a known cost) failed instead."""
    doc = manifest(qs, targets)
    now = timezone.now()
    run = Run.objects.create(
        name="scale",
        manifest=doc,
        plan_sha256=sha256_hex(doc),
        dataset=dataset,
        owner=owner,
        status="completed",
        started_at=now,
        finished_at=now,
    )
    rng = np.random.default_rng(seed)
    correct = rng.random(len(qs) * len(targets)) < 0.6

    def failed(n: int) -> bool:
        return bool(failed_every) and n % failed_every == failed_every - 1

    cells = Cell.objects.bulk_create(
        (
            Cell(
                run=run,
                question=q,
                target=t,
                benchmark=q.benchmark,
                status="failed" if failed(k * len(qs) + i) else "completed",
                correct=None if failed(k * len(qs) + i) else bool(correct[k * len(qs) + i]),
                scored=not failed(k * len(qs) + i),
                final_answer="" if failed(k * len(qs) + i) else "B",
            )
            for k, t in enumerate(targets)
            for i, q in enumerate(qs)
        ),
        batch_size=5000,
    )
    tokens = rng.integers(50, 500, len(cells))
    Call.objects.bulk_create(
        (
            Call(
                cell=c,
                role="subject",
                sequence=0,
                target=c.target,
                request={},
                status="failed" if failed(i) else "completed",
                error_code="http_500" if failed(i) else "",
                sent_at=now,
                served_model="m",
                finish_reason="stop",
                input_tokens=int(tokens[i]),
                cached_input_tokens=0,
                cache_write_tokens=0,
                output_tokens=40,
                cost_usd=(Decimal(int(tokens[i])) * 3 + 40 * 15) / Decimal(1_000_000),
                cache_neutral_cost_usd=(Decimal(int(tokens[i])) * 3 + 40 * 15) / Decimal(1_000_000),
                duration_ms=float(100 + tokens[i]),
                ttft_ms=20.0,
            )
            for i, c in enumerate(cells)
        ),
        batch_size=5000,
    )
    return run


def analyze() -> None:
    """Fresh planner statistics, as autovacuum would have gathered them on a live database;
    without them PostgreSQL plans for the empty tables the bench started from."""
    # Committed rows (--commit) also get their visibility map, as on a vacuumed database.
    verb = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
    with connection.cursor() as cursor:
        for model in (Question, Cell, Call, UsageCorrection, Run):
            cursor.execute(f"{verb} {model._meta.db_table}")


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def verdict(seconds: float) -> str:
    return "ok" if seconds <= 1.0 else "OVER the 1 s target"


def timed(label: str, fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    print(f"{label:<58} {best * 1000:8.1f} ms  ({verdict(best)}, best of {repeat}; {load()})")
    return best


def api_client(owner: Any) -> Client:
    client = Client(SERVER_NAME="localhost")
    client.force_login(owner)
    return client


def api_report(client: Client, run: Run, correction: int | None = None) -> None:
    """GET the run's report through the API (middleware, auth, DRF, JSON rendering) and check
    it is the kept one, naming the correction it reflects."""
    response = client.get(f"/api/v1/runs/{run.pk}/report/")
    assert response.status_code == 200, response.content[:300]
    version = response.json()["report_version"]
    assert version["stored"] and version["usage_correction"] == correction, version


def correct_usage(run: Run, call_ids: list[int]) -> None:
    """A usage correction of every call (the shape `usage_reconcile` appends)."""
    UsageCorrection.objects.create(
        run=run,
        version=1,
        evidence_sha256="b" * 64,
        verified_count=len(call_ids),
        changed_count=0,
        unverifiable_count=0,
        old_known_cost_usd=None,
        new_known_cost_usd=None,
        corrections={
            "rules_version": "bench",
            "calls": [
                {
                    "call_id": pk,
                    "input_tokens": 100,
                    "cached_input_tokens": 0,
                    "cache_write_tokens": 0,
                    "output_tokens": 40,
                    "cost_usd": "0.0009",
                    "cache_neutral_cost_usd": "0.0009",
                }
                for pk in call_ids
            ],
        },
    )


def run_end_then_first_comparison(run_ids: list[int], compare: Any, repeat: int) -> None:
    """The path users take: every run ends through the engine's finish, which stores its report
    and (the run-end hooks) its per-cell figures; then a comparison reads the runs for the
    first time. Each round starts with nothing stored for these runs."""
    first_reads, per_run = [], []
    for _ in range(repeat):
        RunReport.objects.filter(run_id__in=run_ids).delete()
        CaseFigures.objects.filter(run_id__in=run_ids).delete()
        for pk in run_ids:
            start = time.perf_counter()
            run_report_keep(run_id=pk)
            per_run.append(time.perf_counter() - start)
        stored = CaseFigures.objects.filter(run_id__in=run_ids).count()
        assert stored == RunReport.objects.filter(run_id__in=run_ids).count() == len(run_ids)
        start = time.perf_counter()
        compare()
        first_reads.append(time.perf_counter() - start)
    ms = sorted(t * 1000 for t in per_run)
    print(
        f"{'run end of each of the 21 runs (report + case figures)':<58} "
        f"{ms[len(ms) // 2]:8.1f} ms  (median per run; min {ms[0]:.1f}, max {ms[-1]:.1f}, "
        f"{len(ms)} run ends; {load()})"
    )
    best = min(first_reads)
    print(
        f"{'comparison_build, FIRST read after the runs ended':<58} {best * 1000:8.1f} ms  "
        f"({verdict(best)}, best of {repeat}: "
        f"{', '.join(f'{t * 1000:.0f}' for t in first_reads)} ms; {load()})"
    )


def measure(repeat: int) -> None:
    owner = get_user_model().objects.create(username="bench-report-scale")
    dataset = FrozenDataset.objects.create(
        identity_sha256=hashlib.sha256(b"bench-report-scale").hexdigest(),
        name="bench",
        profile="standard",
        seed=1,
        split="dev",
        selection={},
    )

    started = time.perf_counter()
    qs = build_questions(10_000, "r")
    targets = [
        Target.objects.create(
            slug=f"bench-t{k}", name="t", model="m", base_url="http://x/v1", prices=PRICE
        )
        for k in range(10)
    ]
    big = build_run(qs, targets, dataset, owner, seed=1)
    analyze()
    print(f"built 100,000 cells and calls in {time.perf_counter() - started:.1f} s")
    timed("run_report, 100,000 cells (10 targets)", lambda: run_report(run=big), repeat)
    # What users fetch (issue 38 item 1): the API's report of the run once it ended (its
    # report kept by the run end), through the whole request stack; compare the line above,
    # the computation every request made before.
    run_report_keep(run_id=big.pk)
    api = api_client(owner)
    timed("API report (GET …/report/), 100,000 cells", lambda: api_report(api, big), repeat)
    call_ids = list(Call.objects.filter(cell__run=big).values_list("pk", flat=True))
    correction_start = time.perf_counter()
    with transaction.atomic():
        correct_usage(big, call_ids)
        version_appended(run_id=big.pk)  # as usage_reconcile does: the report kept in its commit
    spent = time.perf_counter() - correction_start
    print(
        f"{'a 100,000-call correction and its report, in one commit':<58} "
        f"{spent * 1000:8.1f} ms  (once; {load()})"
    )
    analyze()
    timed(
        "API report, 100,000 cells, after the correction",
        lambda: api_report(api, big, correction=1),
        repeat,
    )
    timed(
        "run_report, 100,000 cells, with a 100,000-call correction",
        lambda: run_report(run=big),
        repeat,
    )
    # What the engine's finish adds after the run's terminal commit: its report and (the
    # run-end hooks) its case figures, computed and stored once.
    RunReport.objects.filter(run=big).delete()
    CaseFigures.objects.filter(run=big).delete()
    start = time.perf_counter()
    run_report_keep(run_id=big.pk)
    spent = time.perf_counter() - start
    assert (
        CaseFigures.objects.filter(run=big).exists() and RunReport.objects.filter(run=big).exists()
    )
    print(
        f"{'run end of the 100,000-cell run (report + case figures)':<58} "
        f"{spent * 1000:8.1f} ms  (once; {load()})"
    )

    started = time.perf_counter()
    cases = qs[:3183]
    base_targets = [
        Target.objects.create(
            slug=f"bench-base{k}", name="b", model="m", base_url="http://x/v1", prices=PRICE
        )
        for k in range(2)
    ]
    baseline = build_run(cases, base_targets, dataset, owner, seed=2)
    candidates = []
    for k in range(20):
        router = Target.objects.create(
            slug=f"bench-router{k}",
            name="r",
            kind="mom",
            model="auto",
            base_url="http://x/v1",
            config_hash="c" * 64,
            prices=PRICE,
        )
        candidates.append(build_run(cases, [router], dataset, owner, seed=10 + k).pk)
    analyze()
    print(f"built 21 runs × 3,183 cases in {time.perf_counter() - started:.1f} s")
    doc: dict[str, Any] = {}

    def compare() -> None:
        doc.update(comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=candidates))

    # The first read of a settled run computes its report and per-cell figures and stores them
    # under its fingerprint (compare.figures); every later read, until its ledger changes,
    # reads the stored rows.
    timed("comparison_build, 20 × 3,183, first read (computes, stores)", compare, 1)
    timed("comparison_build, 20 candidates × 3,183 cases", compare, repeat)
    assert len(doc["comparisons"]) == 20
    later = dict(doc)
    run_end_then_first_comparison([baseline.pk, *candidates], compare, repeat)
    assert doc == later, "the comparison after the run ends differs from the one before"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--commit",
        action="store_true",
        help="commit the rows and VACUUM ANALYZE before timing, as on a live database "
        "(use a scratch database: nothing is removed afterwards)",
    )
    args = parser.parse_args()
    print(f"database: {connection.settings_dict['NAME']}; {load()}")
    if args.commit:
        measure(args.repeat)
        print("committed: the rows stay in this scratch database")
        return
    try:
        with transaction.atomic():
            measure(args.repeat)
            raise Rollback
    except Rollback:
        print("rolled back: the database is unchanged")


if __name__ == "__main__":
    main()
