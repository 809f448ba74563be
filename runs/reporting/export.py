"""`benchmark export RUN_ID` (R14.4): the per-question answer matrix of a dev-split run.

The matrix is what a router is trained or tuned on: for each case (question × slot), every
target's saved answer, whether it was right, and its effective subject cost (R2.2). Holdout
(standard-profile) questions must never feed tuning (R9.5), so holdout runs are refused. Reads
only; no model call. Reference answers and other secrets are never part of it (R9.3): per cell
it carries only what runs.interfaces.public shows a member as stored (correct, the subject's own answer),
never a grade, an error or a call's content.

Beside the sr-bench outcome, the benchmarks' official scorers (issue 35 item 4), named apart:
per case the official outcome (`official`: SimpleQA's and HLE's official verdict as
runs.interfaces.public shows it, ARC's per-test-output matches that pass@2 reads), and per target the
official metrics of the run (`runs.reporting.official_metrics`), never mixed into `correct`.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from datasets.official import ARC_SCORER_VERSION
from datasets.provenance import UNKNOWN
from runs.ledger.selectors import runs_data_provenance
from runs.models import Cell, Run, RunStatus
from runs.reporting.effective import effective_call_sums
from runs.reporting.official_metrics import NOTE as OFFICIAL_NOTE
from runs.reporting.official_metrics import official_metrics
from runs.reporting.official_prompting_report import has_official, run_prompting
from runs.reporting.stored_report import run_report_served
from srbench.money import money_text
from srbench.refusals import Refusal
from srbench.spreadsheet import spreadsheet_text

__all__ = ["ExportRefused", "export_csv", "export_json", "export_matrix"]


class ExportRefused(Refusal):
    """Only completed live dev-split runs can be exported."""

    http_status = 409
    code = "export_refused"


def export_matrix(*, run_id: int) -> dict[str, Any]:
    """The answer matrix of a completed live dev-split run, as a JSON-serialisable document.

    Refused for holdout runs, preview runs and runs that did not complete: a partial matrix
    would teach a router that an unfinished case is a wrong answer.
    """
    run, split = _exportable(run_id)
    served = run_report_served(run=run)
    slugs = [t["slug"] for t in run.manifest["targets"]]
    costs = {
        r["cell_id"]: r
        for r in effective_call_sums(run_ids=[run.pk], group_by="cell_role")
        if r["role"] == "subject"
    }
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    cells = (
        Cell.objects.filter(run=run)
        .order_by("question_id", "slot", "target__slug")
        .values_list(
            "pk",
            "question_id",
            "slot",
            "benchmark",
            "question__native_id",
            "question__subject",
            "question__content_sha256",
            "target__slug",
            "correct",
            "final_answer",
        )
    )
    official = official_benchmarks(run)
    # Where each benchmark's questions came from, beside every answer (issue 35 item 3).
    data = runs_data_provenance([run])[run.pk]
    grades = _official_grades(run, official)
    for pk, qid, slot, benchmark, native_id, subject, sha, slug, correct, answer in cells:
        row = rows.setdefault(
            (qid, slot),
            {
                "question_id": qid,
                "native_id": native_id,
                "content_sha256": sha,
                "benchmark": benchmark,
                "subject": subject,
                "slot": slot,
                "data": data.get(benchmark, UNKNOWN),
                "targets": {},
            },
        )
        usage = costs.get(pk)
        cost_known = usage is not None and usage["cost_unknown"] == 0
        row["targets"][slug] = {
            "correct": correct,
            "answer": answer,
            "subject_cost_usd": money_text(usage["cost"]) if cost_known and usage else None,
            "output_tokens": usage["output_tokens"]
            if usage is not None and usage["usage_unknown"] == 0
            else None,
        }
        if benchmark in official:
            row["targets"][slug]["official"] = case_official(benchmark, grades.get(pk))
    return {
        "run": run.pk,
        "run_name": run.name,
        "plan_sha256": run.plan_sha256,
        "split": split,
        "targets": slugs,
        "usage": "effective (latest usage correction applied)",
        "rows": list(rows.values()),
        "data_provenance": data,
        # Which prompts each benchmark was asked in: sr-bench's, or the package's (issue 37).
        "prompting": run_prompting(run),
        "official_benchmarks": sorted(official),
        # Per target, the official metrics of the run: apart from the sr-bench `correct`.
        "official": run_official_metrics(run, served) if official else {s: [] for s in slugs},
        "official_note": OFFICIAL_NOTE,
        # The run's report it was read with: the one kept at run end (issue 38 item 1).
        "report_version": served["report_version"],
        "model_requests": 0,
    }


def _official_grades(run: Run, official: set[str]) -> dict[int, Any]:
    """Only the cells of a benchmark with an official scorer have their grade read."""
    if not official:
        return {}
    return dict(Cell.objects.filter(run=run, benchmark__in=official).values_list("pk", "grade"))


def _exportable(run_id: int) -> tuple[Run, str]:
    """The run and its split, or ExportRefused saying why it cannot be exported."""
    run = Run.objects.select_related("dataset").filter(pk=run_id).first()
    if run is None:
        raise ExportRefused(f"run {run_id} does not exist")
    split = run.manifest.get("dataset", {}).get("split") or run.dataset.split
    if split != "dev":
        raise ExportRefused(
            f"run {run_id} uses the {split} split: standard (holdout) questions must not be "
            "used for tuning; export only dev-split runs"
        )
    if run.mode != Run.Mode.LIVE:
        raise ExportRefused(f"run {run_id} is a {run.mode} run: it has no answers")
    if run.status != RunStatus.COMPLETED:
        raise ExportRefused(f"run {run_id} is {run.status}: export only completed runs")
    return run, split


def run_official_metrics(run: Run, served: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per target slug, the run's official metrics (named by `runs.reporting.official_metrics`), from
    the official sections of its served report (`runs.reporting.stored_report.run_report_served`: the
    report kept at run end, issue 38 item 1), not computed again."""
    sections = {t["slug"]: t.get("official") for t in served["targets"]}
    return {
        snapshot["slug"]: official_metrics(sections.get(snapshot["slug"]))
        for snapshot in run.manifest["targets"]
    }


def official_benchmarks(run: Run) -> set[str]:
    """The run's benchmarks with an official entry: ARC always, SimpleQA and HLE when the
    plan asked for official scoring, LiveCodeBench and SciCode when it asked for official
    prompting (as `runs.reporting.official_report` reads them)."""
    return {b for b, v in run.manifest["benchmarks"].items() if b == "arc" or has_official(v)}


def case_official(benchmark: str, grade: dict[str, Any] | None) -> dict[str, Any] | None:
    """One case's official outcome, or None when none was recorded (unknown, never wrong).
    ARC: whether the attempt matched each test output (pass@2 ORs a question's first two
    attempts). SimpleQA, HLE: the official judge's verdict, as runs.interfaces.public shows it."""
    g = grade or {}
    if benchmark == "arc":
        matches = g.get("outputs_correct")
        if matches is None:
            return None
        return {"scorer": ARC_SCORER_VERSION, "outputs_correct": [bool(x) for x in matches]}
    detail = g.get("official")
    if not isinstance(detail, dict):
        return None
    keys = ("scorer", "status", "verdict", "correct", "confidence")
    return {k: detail[k] for k in keys if k in detail}


def export_json(matrix: dict[str, Any]) -> str:
    return json.dumps(matrix, indent=2, ensure_ascii=False)


def export_csv(matrix: dict[str, Any]) -> str:
    """One row per case; per target ``<slug>.correct``, ``.answer``, ``.subject_cost_usd`` and
    ``.output_tokens``. Unknown is an empty field, never 0."""
    per_target = ("correct", "answer", "subject_cost_usd", "output_tokens")
    # With a benchmark whose official scorer differs, its per-case outcome, named apart.
    extra = OFFICIAL_FIELDS if matrix.get("official_benchmarks") else ()
    base = ["question_id", "native_id", "content_sha256", "benchmark", "subject", "slot", "data"]
    header = base + [f"{s}.{field}" for s in matrix["targets"] for field in per_target + extra]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    # Target slugs, native ids and the model's answers are text someone else chose: written as
    # a spreadsheet shows them as text (srbench.spreadsheet), numbers as they are.
    writer.writerow([spreadsheet_text(h) for h in header])
    for row in matrix["rows"]:
        values: list[Any] = [row[h] for h in base]
        for slug in matrix["targets"]:
            cell = row["targets"].get(slug, {})
            for field in per_target:
                values.append(cell.get(field))
            if extra:
                official = official_csv_cells(cell.get("official"))
                values += [official[k] for k in extra]
        writer.writerow([spreadsheet_text(v) for v in values])
    return out.getvalue()


OFFICIAL_FIELDS = ("official_verdict", "official_confidence", "official_outputs_correct")


def official_csv_cells(case: dict[str, Any] | None) -> dict[str, Any]:
    """A case's official outcome in CSV fields: SimpleQA's verdict (correct, incorrect,
    not_attempted) or HLE's (correct, incorrect) with its stated confidence; ARC's per-output
    matches as a JSON list. Unknown or not this benchmark's: empty, never 0."""
    c = case or {}
    graded = c.get("status") == "graded"
    verdict = c.get("verdict")
    if graded and verdict is None and "correct" in c:
        verdict = "correct" if c["correct"] else "incorrect"
    outputs = c.get("outputs_correct")
    return {
        "official_verdict": verdict if graded else None,
        "official_confidence": c.get("confidence") if graded else None,
        "official_outputs_correct": None if outputs is None else json.dumps(outputs),
    }
