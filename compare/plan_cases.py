"""A run's planned cases, packed once for comparisons (issue 38 item 5).

A comparison needs two things from a manifest's case list: whether two runs planned the same
cases (R11.2) and, for the baseline run, each case's question and benchmark. At 100,000 cases
the list is 8.9 MB of JSON (7.2 MB in TOAST): reading two runs' manifests took 147 ms of a
comparison's 218 (77 ms in the query, 58 ms parsing). So the list is packed once per run
(`PlanCases`: a digest of the case set and two columns of numbers), at run end by compare's
run-end hook (`compare.services.savings_sums_keep`) or by the first comparison that reads the run, and a comparison reads the
manifest's other fields from the database without the case list
(`runs.ledger.selectors.without_case_list`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db.models import JSONField, OuterRef, Subquery

from compare.models import PlanCases
from runs.ledger.selectors import MANIFEST_WITHOUT_CASES, without_case_list
from runs.models import Run

__all__ = ["CASE_RECORD", "case_set_digest", "kept_head", "plan_cases", "planned_cases"]

CASE_RECORD = np.dtype([("question", "<i8"), ("benchmark", "<i2")])


def case_set_digest(cases: Sequence[Any]) -> str:
    """SHA-256 of the cases as a *set* of (question, content hash, benchmark): the order of a
    plan is not part of what was measured (`compare.compatibility._case_differences`)."""
    lines = sorted({json.dumps(list(c), separators=(",", ":")) for c in cases})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _pack(run_id: int, cases: Sequence[Any], head: dict[str, Any]) -> PlanCases:
    names = sorted({str(c[2]) for c in cases})
    position = {b: i for i, b in enumerate(names)}
    packed = np.array([(c[0], position[str(c[2])]) for c in cases], dtype=CASE_RECORD)
    return PlanCases(
        run_id=run_id,
        digest=case_set_digest(cases),
        benchmarks=names,
        cases=packed.tobytes(),
        head=head,
    )


def plan_cases(runs: Sequence[Run]) -> dict[int, PlanCases]:
    """Every run's packed cases: the kept rows, the rest packed from the manifests (each read
    once, the case list apart from the rest) and kept."""
    out = {p.run_id: p for p in PlanCases.objects.filter(run_id__in=[r.pk for r in runs])}
    wanted = [r.pk for r in runs if r.pk not in out]
    if not wanted:
        return out
    read = without_case_list(Run.objects.filter(pk__in=wanted))
    rows = [
        _pack(pk, cases or [], head)
        for pk, cases, head in read.values_list("pk", "manifest__cases", MANIFEST_WITHOUT_CASES)
    ]
    PlanCases.objects.bulk_create(rows, ignore_conflicts=True)
    out.update({p.run_id: p for p in rows})
    return out


def kept_head(key: str | None = None) -> Subquery:
    """The run's kept manifest head (or one key of it), for a Run query: null where its cases
    were not packed yet."""
    field = "head" if key is None else f"head__{key}"
    kept = PlanCases.objects.filter(run=OuterRef("pk")).values(field)[:1]
    return Subquery(kept, output_field=JSONField())


def planned_cases(
    plan: PlanCases, benchmarks: Sequence[str]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each planned case's question and the index of its benchmark in ``benchmarks`` (the
    manifest's order), in the manifest's order. KeyError for a case of a benchmark the
    manifest does not list, as reading the list itself would raise."""
    packed = np.frombuffer(bytes(plan.cases), dtype=CASE_RECORD)
    position = {b: i for i, b in enumerate(benchmarks)}
    remap = np.array([position[b] for b in plan.benchmarks], dtype=np.int64)
    questions = packed["question"].astype(np.int64)
    return questions, remap[packed["benchmark"].astype(np.int64)] if remap.size else questions[:0]
