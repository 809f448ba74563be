"""`benchmark regrade RUN_ID` (R14.4): the current grader on a run's saved final answers.

Only kinds graded without another model call are re-graded (mcq and grid); judge, code and agent
tasks would need a model or a sandbox and are skipped with that reason. The result is a
separate, versioned :class:`compare.models.Regrade`; cells keep the grade they were given.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max

from compare.models import Regrade
from datasets.benchmarks import get_adapter
from runs.engine.scoring import grade_direct
from runs.models import TERMINAL_RUN_STATUSES, Cell, Run
from srbench.canonical import sha256_hex

__all__ = ["REGRADABLE_KINDS", "RegradeRefused", "RegradeResult", "run_regrade"]

REGRADABLE_KINDS = ("mcq", "grid")


class RegradeRefused(Exception):
    pass


@dataclass(frozen=True)
class RegradeResult:
    regrade: Regrade
    created: bool


def run_regrade(*, run_id: int) -> RegradeResult:
    """Re-grade the completed mcq/grid cells of a terminal live run with today's graders.

    Makes no model call and changes no cell. Idempotent: keyed by a sha256 over the graded
    answers and the grader versions, so the same answers under the same graders return the
    same regrade (``created=False``); a new grader version appends a new version.
    """
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise RegradeRefused(f"run {run_id} does not exist")
    if run.mode != Run.Mode.LIVE:
        raise RegradeRefused(f"run {run_id} is a {run.mode} run: it has no answers to re-grade")
    if run.status not in TERMINAL_RUN_STATUSES:
        raise RegradeRefused(f"run {run_id} is {run.status}: re-grade a run once it has ended")

    kinds = {b: get_adapter(b).kind for b in run.manifest["benchmarks"]}
    regradable = [b for b, k in kinds.items() if k in REGRADABLE_KINDS]
    versions = {b: get_adapter(b).grader_version for b in regradable}
    # What the cells were graded with: the manifest froze it and the engine honours it.
    graded_with = {b: run.manifest["benchmarks"][b].get("grader_version") for b in regradable}
    rows = (
        Cell.objects.filter(run=run, benchmark__in=regradable, status="completed")
        .order_by("pk")
        .values_list(
            "pk",
            "benchmark",
            "target__slug",
            "question_id",
            "question__payload",
            "question__secret__data",
            "final_answer",
            "correct",
            "grade",
        )
        .iterator(chunk_size=1000)
    )
    results: list[dict[str, Any]] = []
    answers: list[tuple[int, str, bool]] = []
    totals: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for pk, benchmark, slug, qid, payload, secret, answer, old, grade in rows:
        truncated = isinstance(grade, dict) and grade.get("grader") == "truncated"
        if truncated:
            # A cut-off answer (finish_reason "length") is wrong whatever it says, as in the engine.
            new, detail = False, {"grader": "truncated"}
        else:
            graded = grade_direct(
                benchmark=benchmark, payload=payload, secret=secret, answer=answer
            )
            new, detail = graded.correct, graded.detail
        answers.append((pk, hashlib.sha256(answer.encode()).hexdigest(), truncated))
        results.append(
            {
                "cell": pk,
                "question": qid,
                "target": slug,
                "benchmark": benchmark,
                "old_correct": old,
                "new_correct": new,
                "changed": old != new,
                "detail": detail,
            }
        )
        t = totals[slug].setdefault(benchmark, {"regraded": 0, "old_correct": 0, "new_correct": 0})
        t["regraded"] += 1
        t["old_correct"] += int(bool(old))
        t["new_correct"] += int(new)
    skipped = Cell.objects.filter(run=run).count() - len(results)
    input_sha = sha256_hex({"graders": versions, "answers": answers})
    changed = sum(1 for r in results if r["changed"])

    with transaction.atomic(durable=True):
        # The run row lock serialises concurrent regrades of one run, so versions never race.
        Run.objects.select_for_update().filter(pk=run.pk).values_list("pk").get()
        existing = Regrade.objects.filter(run=run, input_sha256=input_sha).first()
        if existing is not None:
            return RegradeResult(existing, created=False)
        latest = Regrade.objects.filter(run=run).aggregate(v=Max("version"))["v"] or 0
        regrade = Regrade.objects.create(
            run=run,
            version=latest + 1,
            input_sha256=input_sha,
            grader_versions=versions,
            regraded_count=len(results),
            changed_count=changed,
            skipped_count=skipped,
            results={
                "skipped_reason": (
                    "only completed mcq and grid cells are re-graded; judge, code and agent "
                    "kinds need a model or a sandbox, failed cells have no answer"
                ),
                "graded_with": graded_with,
                "by_target": totals,
                "cells": results,
            },
        )
    return RegradeResult(regrade, created=True)
