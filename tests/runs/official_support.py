"""A constructed run with the three official scorers (issue 35 item 4): ARC with per-output
matches over two attempts, SimpleQA and HLE with official verdicts under `grade["official"]`,
and the figures each official metric must show, worked out here from the chosen outcomes
(never read back from the code under test)."""

from __future__ import annotations

import hashlib
import itertools
import math
from fractions import Fraction
from typing import Any

from django.utils import timezone

from datasets.models import Question, QuestionSecret
from runs.models import Cell, Run
from tests import factories as f
from tests.compare import builders as b

_seq = itertools.count(1)

# ARC: per question its test outputs, per target per question the two attempts' matches.
ARC_OUTPUTS = [1, 2, 1, 3]
ARC = {
    "strong": [
        ([False], [True]),  # either attempt: 1
        ([True, False], [False, False]),  # 1/2
        ([False], [False]),  # 0
        ([True, False, True], [False, True, False]),  # 1
    ],
    # cheap: question 2's second attempt was graded without a per-output record (None):
    # its pass@2 is unknown, never 0.
    "cheap": [
        ([False], [False]),
        ([True, True], [False, False]),
        ([False], None),
        ([False, False, False], [False, False, False]),
    ],
}
# SimpleQA: the official verdict of each question's first attempt (the second is ignored).
SIMPLEQA = {
    "strong": ["correct", "correct", "incorrect", "not_attempted", "correct"],
    "cheap": ["correct", "incorrect", "incorrect", "not_attempted", "not_attempted"],
}
# HLE: the official judge's (correct, stated confidence) of each first attempt.
HLE = {
    "strong": [(True, 90), (True, 80), (False, 70), (True, 100), (False, 50)],
    "cheap": [(False, 90), (True, 60), (False, 80), (False, 100), (False, 40)],
}
TEMPLATE = {
    "available": True,
    "scorer": "constructed/1",
    "package": "inspect-evals",
    "version": "0.0-test",
    "file": "constructed.py",
    "template_sha256": "a" * 64,
}


def expected_pass_at_2(slug: str) -> Fraction:
    """ARC Prize pass@2 by hand: an output counts if either attempt matched it; a task scores
    the mean over its outputs; the benchmark the mean over tasks."""
    scores = []
    for outputs, (first, second) in zip(ARC_OUTPUTS, ARC[slug], strict=True):
        hit = [first[k] or bool(second and second[k]) for k in range(outputs)]
        scores.append(Fraction(sum(hit), outputs))
    return sum(scores, Fraction(0)) / len(scores)


def expected_f_score(slug: str) -> float:
    v = SIMPLEQA[slug]
    c, i, n = v.count("correct"), v.count("incorrect"), len(v)
    overall, given = c / n, c / (c + i)
    return 2 * overall * given / (overall + given)


def expected_hle(slug: str) -> tuple[float, float]:
    """(accuracy, RMS calibration error): below 100 answers there is one bin, so the error is
    |mean stated confidence − accuracy|."""
    judged = HLE[slug]
    accuracy = sum(ok for ok, _ in judged) / len(judged)
    confidence = sum(c for _, c in judged) / len(judged) / 100
    return accuracy, math.sqrt((confidence - accuracy) ** 2)


def wilson(k: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval, written out here."""
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return centre - half, centre + half


def _question(benchmark: str, payload: dict[str, Any]) -> Question:
    i = next(_seq)
    q = Question.objects.create(
        benchmark=benchmark,
        native_id=f"o{i}",
        subject="s",
        payload=payload,
        content_sha256=hashlib.sha256(f"official-q{i}".encode()).hexdigest(),
    )
    QuestionSecret.objects.create(question=q, data={"answer": "x"})
    return q


def _grade(benchmark: str, slug: str, index: int, slot: int) -> tuple[bool, dict[str, Any]]:
    """(sr-bench correct, grade) of one cell."""
    if benchmark == "arc":
        matches = ARC[slug][index][slot]
        if matches is None:
            return False, {"grader": "grid", "status": "graded"}
        return all(matches), {"grader": "grid", "status": "graded", "outputs_correct": matches}
    if benchmark == "simpleqa":
        verdict = SIMPLEQA[slug][index] if slot == 0 else "incorrect"
        official = {"scorer": "constructed/1", "status": "graded", "verdict": verdict}
        return verdict == "correct", {"grader": "judge", "verdict": verdict, "official": official}
    ok, confidence = HLE[slug][index] if slot == 0 else (False, 10)
    official = {"scorer": "constructed/1", "status": "graded", "correct": ok}
    official["confidence"] = confidence
    verdict = "correct" if ok else "incorrect"
    return ok, {"grader": "judge", "verdict": verdict, "official": official}


def official_run(name: str = "official", *, slots: int = 2) -> Run:
    """A completed live dev-split run of targets strong and cheap (single models), two
    attempts per question (or `slots`: the first of them), over 4 ARC, 5 SimpleQA and 5 HLE
    questions."""
    qs = [_question("arc", {"train": [], "test_inputs": [[[0]]] * n}) for n in ARC_OUTPUTS]
    qs += [_question("simpleqa", {"question": f"S{i}?"}) for i in range(len(SIMPLEQA["strong"]))]
    qs += [_question("hle", {"question": f"H{i}?"}) for i in range(len(HLE["strong"]))]
    targets = [b.target("strong"), b.target("cheap")]
    doc = b.manifest(qs, targets, slots=slots)
    for benchmark in ("simpleqa", "hle"):
        doc["benchmarks"][benchmark]["official_scoring"] = dict(TEMPLATE)
    run = f.run_create(
        manifest=doc,
        status="completed",
        mode="live",
        name=name,
        dataset=f.dataset_create(split="dev"),
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    cells = []
    for t in targets:
        for q in qs:
            index = [x for x in qs if x.benchmark == q.benchmark].index(q)
            for slot in range(slots):
                correct, grade = _grade(q.benchmark, t.slug, index, slot)
                cells.append(
                    Cell(
                        run=run,
                        question=q,
                        target=t,
                        benchmark=q.benchmark,
                        slot=slot,
                        status="completed",
                        correct=correct,
                        scored=True,
                        grade=grade,
                        final_answer=f"answer {slot}",
                    )
                )
    Cell.objects.bulk_create(cells)
    return run
