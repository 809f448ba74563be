"""`benchmark export RUN_ID` (R14.4): the per-question answer matrix of a dev-split run.

The matrix is what a router is trained or tuned on: for each case (question × slot), every
target's saved answer, whether it was right, and its effective subject cost (R2.2). Holdout
(standard-profile) questions must never feed tuning (R9.5), so holdout runs are refused. Reads
only; no model call. Reference answers and other secrets are never part of it (R9.3): per cell
it carries only what runs.public shows a member as stored (correct, the subject's own answer),
never a grade, an error or a call's content.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from runs.models import Cell, Run, RunStatus
from runs.reconcile import effective_call_sums
from srbench.money import money_text

__all__ = ["ExportRefused", "export_csv", "export_json", "export_matrix"]


class ExportRefused(Exception):
    pass


def export_matrix(*, run_id: int) -> dict[str, Any]:
    """The answer matrix of a completed live dev-split run, as a JSON-serialisable document.

    Refused for holdout runs, preview runs and runs that did not complete: a partial matrix
    would teach a router that an unfinished case is a wrong answer.
    """
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
    return {
        "run": run.pk,
        "run_name": run.name,
        "plan_sha256": run.plan_sha256,
        "split": split,
        "targets": slugs,
        "usage": "effective (latest usage correction applied)",
        "rows": list(rows.values()),
        "model_requests": 0,
    }


def export_json(matrix: dict[str, Any]) -> str:
    return json.dumps(matrix, indent=2, ensure_ascii=False)


def export_csv(matrix: dict[str, Any]) -> str:
    """One row per case; per target ``<slug>.correct``, ``.answer``, ``.subject_cost_usd`` and
    ``.output_tokens``. Unknown is an empty field, never 0."""
    per_target = ("correct", "answer", "subject_cost_usd", "output_tokens")
    header = ["question_id", "native_id", "content_sha256", "benchmark", "subject", "slot"]
    header += [f"{slug}.{field}" for slug in matrix["targets"] for field in per_target]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in matrix["rows"]:
        values: list[Any] = [row[h] for h in header[:6]]
        for slug in matrix["targets"]:
            cell = row["targets"].get(slug, {})
            for field in per_target:
                value = cell.get(field)
                values.append("" if value is None else value)
        writer.writerow(values)
    return out.getvalue()
