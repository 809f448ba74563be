"""The report's "official scoring" section (issue 22 point 5): read the cells, summarise with
`datasets.official`. Beside the sr-bench score, never instead of it.

Per target of a run, for the benchmarks where the official scorer differs from sr-bench's:
ARC (always, when in the plan: pass@2 needs two attempt slots per question), SimpleQA and HLE
(when the plan asked for official scoring; their official verdicts are stored under
`grade["official"]` by the engine's second judge call). Judged benchmarks use each question's
first attempt only (slot 0): the official protocols make one attempt per question.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from datasets import official
from datasets.models import Question
from runs.models import Cell, CellStatus, Run
from runs.reporting.official_prompting_report import has_official, prompted_summary
from runs.reporting.report_types import OfficialSection

NOTE = (
    "Official scorers, reported beside the sr-bench score (the composite's default), never "
    "instead of it; each with its own n and interval."
)


def _judged_value(benchmark: str, grade: dict[str, Any] | None) -> Any:
    detail = (grade or {}).get("official") or {}
    if detail.get("status") != "graded":
        return None
    if benchmark == "simpleqa":
        return detail.get("verdict")
    return (bool(detail.get("correct")), int(detail.get("confidence", 100)))


def _arc_attempt(status: str, grade: dict[str, Any] | None) -> tuple[str, list[bool] | None]:
    """("ok", per-output matches), ("none", None) for an attempt that matches nothing (no
    answer, cut off, failed), or ("unknown", None): graded by a build that kept no per-output
    record, or not finished."""
    if status in (CellStatus.PENDING, CellStatus.RUNNING, CellStatus.SENT_UNKNOWN):
        return "unknown", None
    g = grade or {}
    if "outputs_correct" in g:
        return "ok", [bool(x) for x in g["outputs_correct"]]
    if status == CellStatus.COMPLETED and g.get("grader") == "grid":
        return "unknown", None
    return "none", None


def official_sections(
    runs: list[Run], target_ids: dict[tuple[int, str], int]
) -> dict[tuple[int, str], OfficialSection]:
    """(run id, target slug) → the target's official section. Runs without a benchmark where
    the official scoring differs get nothing (the key is absent)."""
    wanted: dict[int, list[str]] = {}
    for run in runs:
        # A preview grades nothing; a run still going gets its official figures when it ends
        # (as its score; the bootstraps are too dear to recompute on every live refresh).
        if run.mode == Run.Mode.PREVIEW or not run.is_terminal:
            continue
        benchmarks = run.manifest["benchmarks"]
        names = [b for b, v in benchmarks.items() if b == "arc" or has_official(v)]
        if names:
            wanted[run.pk] = names
    if not wanted:
        return {}
    slots = dict(Run.objects.filter(pk__in=wanted).values_list("pk", "manifest__slots"))
    # ARC with one attempt per question has no pass@2, but its tasks are still counted and
    # said measured or not (a count beside an unknown value is a count, never a 0 unread).
    rows = Cell.objects.filter(
        run_id__in=wanted,
        benchmark__in={b for names in wanted.values() for b in names},
        slot__lt=2,
    ).values_list("run_id", "target_id", "benchmark", "question_id", "slot", "status", "grade")
    cells: dict[tuple[int, int, str], dict[int, dict[int, tuple[str, Any]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    arc_questions: set[int] = set()
    for run_id, target_id, benchmark, qid, slot, status, grade in rows:
        if benchmark not in wanted.get(run_id, ()):
            continue
        cells[(run_id, target_id, benchmark)][qid][slot] = (status, grade)
        if benchmark == "arc":
            arc_questions.add(qid)
    outputs = {
        qid: len(inputs or [])
        for qid, inputs in Question.objects.filter(pk__in=arc_questions).values_list(
            "pk", "payload__test_inputs"
        )
    }
    out: dict[tuple[int, str], OfficialSection] = {}
    for run in runs:
        if run.pk not in wanted:
            continue
        run_slots = int(slots.get(run.pk) or 1)
        for snapshot in run.manifest["targets"]:
            tid = target_ids.get((run.pk, snapshot["slug"]))
            section: dict[str, Any] = {}
            for b in wanted[run.pk]:
                by_question = cells.get((run.pk, tid, b), {})
                if b == "arc":
                    section[b] = _arc(by_question, outputs, run_slots)
                    continue
                spec = run.manifest["benchmarks"][b]
                if "official_prompting" in spec:  # issue 37 item 3
                    section[b] = prompted_summary(b, spec["official_prompting"], by_question)
                    continue
                section[b] = _judged(b, spec["official_scoring"], by_question)
            out[(run.pk, snapshot["slug"])] = OfficialSection(NOTE, section)
    return out


def _judged(
    benchmark: str, frozen: dict[str, Any], by_question: dict[int, dict[int, tuple[str, Any]]]
) -> dict[str, Any]:
    if not frozen.get("available"):
        return {
            "label": official.LABELS[benchmark],
            "value": None,
            "reason": f"not available here: {frozen.get('reason')}",
        }
    values = [
        _judged_value(benchmark, attempts.get(0, ("", None))[1])
        for _, attempts in sorted(by_question.items())
    ]
    summary = (
        official.simpleqa_summary(values)
        if benchmark == "simpleqa"
        else official.hle_summary(values)
    )
    summary["template"] = {
        k: frozen.get(k) for k in ("package", "version", "file", "template_sha256")
    }
    return summary


def _arc(
    by_question: dict[int, dict[int, tuple[str, Any]]], outputs: dict[int, int], slots: int
) -> dict[str, Any]:
    """ARC's official section: pass@2 (`official.arc_summary`), with ``tasks`` the target's
    ARC tasks in the run and ``tasks_measured`` those whose attempts the scorer reads (the
    first two, one when the plan made one) all have a per-output result — the n of pass@2, and
    beside an unknown pass@2 how many were measured, never 0 for tasks that were not read."""
    tasks = []
    unknown = 0
    measured = 0
    for qid, attempts in sorted(by_question.items()):
        if outputs.get(qid, 0) < 1:
            unknown += 1  # a question without test inputs: its per-output score is unknown
            continue
        graded = []
        known = True
        for slot in range(min(slots, 2)):
            status, grade = attempts.get(slot, ("pending", None))
            kind, matches = _arc_attempt(status, grade)
            unknown += kind == "unknown"
            known = known and kind != "unknown"
            graded.append(matches)
        measured += known
        tasks.append((outputs[qid], graded))
    summary = official.arc_summary(tasks, slots)
    summary.update(tasks=len(by_question), tasks_measured=measured)
    if unknown and slots >= 2:
        summary.update(
            value=None,
            exact=None,
            wilson_95=None,
            reason=(
                f"{unknown} attempts or tasks have no per-output result (not finished, graded "
                "before per-output results were kept, or no test outputs in the task)"
            ),
        )
    return summary
