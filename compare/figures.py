"""What a comparison reads of its runs: their reports and their cells' figures (issue 25).

A settled run's figures never change until its ledger does, so both are computed once per
state and kept under the run's stored-report key (`runs.reporting.report.report_key`): the report in
`RunReport` (the row the Run detail page and the run finish keep), the per-cell figures in
`CaseFigures`. A comparison looks both up for all its runs at once (a constant number of
queries however many candidates), computes what is missing or stale in one batch, and writes
back what it computed in one upsert per table — but only for runs whose fingerprint is the
same after computing as before, so nothing computed across a change is kept. A usage
correction changes the fingerprint; the next comparison recomputes. A run in progress has
no fingerprint and is always computed afresh. Both are usually stored before any comparison
reads them: the run finish stores the report and calls compare's run-end hook
(`case_figures_keep`, `runs.ledger.hooks`), which stores the figures the same way.

Stored figures equal recomputed ones exactly: the report is kept as its JSON
(`runs.reporting.report_types.report_doc`) and read back typed (`Report.from_doc`: money from its exact
text, scores from their exact fractions), and a cell's cost is the same float64 (the SQL sum
of its effective subject costs, rounded once).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from compare.models import CaseFigures
from runs.ledger.selectors import runs_settled_fingerprints
from runs.models import Cell, CellStatus, Run, RunReport, Target
from runs.reporting.effective import effective_cell_costs
from runs.reporting.report import report_key, run_report_row, run_reports_compute
from runs.reporting.report_types import Report
from srbench.canonical import sha256_hex

# Bump when what a cell record holds changes, so rows packed by older code are recomputed (v2:
# a known failure its target does not bill costs a known 0, runs.ledger.accounting).
FIGURES_VERSION = "case-figures-v2"
CELL_RECORD = np.dtype(
    [
        ("target", "<i8"),
        ("question", "<i8"),
        ("slot", "<i8"),
        ("status", "i1"),  # index into STATUSES
        ("correct", "?"),
        ("cost", "<f8"),  # the cell's effective subject cost; NaN when unknown
    ]
)
STATUSES: tuple[str, ...] = tuple(CellStatus.values)


@dataclass(frozen=True)
class RunFigures:
    """The reports and packed cells of a comparison's runs, by run id."""

    reports: dict[int, Report]
    cells: dict[int, npt.NDArray[np.void]]


def _figures_key(key: str) -> str:
    return sha256_hex([FIGURES_VERSION, key])


def cells_pack(run_ids: Sequence[int]) -> dict[int, npt.NDArray[np.void]]:
    """Every cell of the runs, from two queries (cells, effective subject costs per cell)."""
    out = {pk: np.zeros(0, dtype=CELL_RECORD) for pk in run_ids}
    if not run_ids:
        return out
    rows = list(
        Cell.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "id")
        .values_list("id", "run_id", "target_id", "question_id", "slot", "status", "correct")
    )
    costs = dict(effective_cell_costs(run_ids=run_ids, role="subject"))
    code = {s: i for i, s in enumerate(STATUSES)}
    by_run: dict[int, list[tuple[Any, ...]]] = {}
    for cell_id, run_id, target_id, question_id, slot, status, correct in rows:
        cost = costs.get(cell_id)
        by_run.setdefault(run_id, []).append(
            (
                target_id,
                question_id,
                slot,
                code[status],
                correct is True,
                np.nan if cost is None else cost,
            )
        )
    for run_id, records in by_run.items():
        out[run_id] = np.array(records, dtype=CELL_RECORD)
    return out


def run_figures(runs: Sequence[Run]) -> RunFigures:
    """The reports and cells of ``runs``, stored ones where their
    fingerprint still holds, the rest computed in one batch and kept when settled."""
    keys = {pk: report_key(fp) for pk, fp in runs_settled_fingerprints(list(runs)).items() if fp}
    reports = {
        pk: Report.from_doc(json.loads(doc))
        for pk, fp, doc in RunReport.objects.filter(run_id__in=keys).values_list(
            "run_id", "fingerprint", "report_json"
        )
        if fp == keys[pk]
    }
    cells = {
        pk: np.frombuffer(bytes(blob), dtype=CELL_RECORD)
        for pk, fp, blob in CaseFigures.objects.filter(run_id__in=keys).values_list(
            "run_id", "fingerprint", "cells"
        )
        if fp == _figures_key(keys[pk])
    }
    missing = [r for r in runs if r.pk not in reports]
    new_reports = run_reports_compute(runs=_with_manifests(missing)) if missing else {}
    new_cells = cells_pack([r.pk for r in runs if r.pk not in cells])
    reports.update(new_reports)
    cells.update(new_cells)
    if any(pk in keys for pk in [*new_reports, *new_cells]):
        _keep(runs, keys, new_reports, new_cells)
    return RunFigures(reports, cells)


def _with_manifests(runs: list[Run]) -> list[Run]:
    """The runs with their whole manifests, read in one query for those loaded without (a
    report reads the case list)."""
    wanted = [r.pk for r in runs if "manifest" not in r.__dict__]
    if wanted:
        manifests = dict(Run.objects.filter(pk__in=wanted).values_list("pk", "manifest"))
        for r in runs:
            if r.pk in manifests:
                r.manifest = manifests[r.pk]
    return runs


def _keep(
    runs: Sequence[Run],
    keys: dict[int, str],
    reports: dict[int, Report],
    cells: dict[int, npt.NDArray[np.void]],
) -> None:
    """Store what was computed for settled runs whose fingerprint did not move meanwhile."""
    after = runs_settled_fingerprints([r for r in runs if r.pk in keys])
    still = {pk for pk, key in keys.items() if after.get(pk) and report_key(after[pk]) == key}
    report_rows = [
        RunReport(run_id=pk, **run_report_row(run_id=pk, fingerprint=keys[pk], report=report))
        for pk, report in reports.items()
        if pk in still
    ]
    if report_rows:
        RunReport.objects.bulk_create(
            report_rows,
            update_conflicts=True,
            unique_fields=["run"],
            update_fields=[f for f in run_report_row_fields() if f != "run"],
        )
    figure_rows = [
        CaseFigures(run_id=pk, fingerprint=_figures_key(keys[pk]), cells=packed.tobytes())
        for pk, packed in cells.items()
        if pk in still
    ]
    if figure_rows:
        CaseFigures.objects.bulk_create(
            figure_rows,
            update_conflicts=True,
            unique_fields=["run"],
            update_fields=["fingerprint", "cells", "computed_at"],
        )


def case_figures_keep(*, run_id: int) -> None:
    """The run-end hook (`runs.ledger.hooks`, registered in `CompareConfig.ready`): store the ended
    run's per-cell figures under its fingerprint, as the first comparison that reads it would
    (`cells_pack`, kept by `_keep` only when the fingerprint did not move meanwhile), so that
    comparison reads them instead of computing them. Its report is stored by the run finish
    itself. Nothing when the run is not settled or its figures are stored under its current
    key already; idempotent."""
    # The manifest's case list is not needed: the fingerprint reads the targets from its head.
    run = Run.objects.defer("manifest").get(pk=run_id)
    fingerprint = runs_settled_fingerprints([run]).get(run_id)
    if not fingerprint:
        return
    key = report_key(fingerprint)
    if CaseFigures.objects.filter(run_id=run_id, fingerprint=_figures_key(key)).exists():
        return
    _keep([run], {run_id: key}, {}, cells_pack([run_id]))


def run_report_row_fields() -> list[str]:
    return [f.name for f in RunReport._meta.concrete_fields if f.name != "run"]


def target_slugs(cells: dict[int, npt.NDArray[np.void]]) -> dict[int, str]:
    """The slug of every target the cells name (one query)."""
    ids = {int(t) for packed in cells.values() for t in np.unique(packed["target"])}
    return dict(Target.objects.filter(pk__in=ids).values_list("pk", "slug"))
