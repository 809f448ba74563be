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
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db.models import CharField, JSONField, OuterRef, Subquery
from django.db.models.expressions import RawSQL

from compare.compatibility import COMPARED_FIELDS, EXECUTION_LIMITS, model_prices
from compare.models import PlanCases
from runs.ledger.hooks import runs_ended_newest
from runs.ledger.selectors import MANIFEST_WITHOUT_CASES, without_case_list
from runs.models import Run

__all__ = [
    "CASE_RECORD",
    "case_set_digest",
    "kept_fingerprint",
    "kept_head",
    "offer_facts",
    "offer_facts_fill",
    "offer_fingerprint",
    "offer_price_table",
    "offer_single_slugs",
    "offer_targets",
    "plan_cases",
    "planned_cases",
    "runs_without_plan_cases",
]

CASE_RECORD = np.dtype([("question", "<i8"), ("benchmark", "<i2")])

# The offer's fingerprint of a run (`compare.selectors`): the md5 of everything
# `runs_differences` compares but prices — the case *set* and the other compared fields, the
# execution limits left out. Runs with equal fingerprints are one group of the Compare page's
# offer; prices are matched within a group. Computed by the database from the manifest, once
# per run when its cases are packed (kept in `PlanCases.fingerprint`), so a process's first
# offer does not render the case lists of every run again.
_EQUAL_FIELDS = tuple(f for f in COMPARED_FIELDS if f not in ("cases", "prices"))
_DROP_EXECUTION_LIMITS = "".join(f" - '{key}'" for key in EXECUTION_LIMITS)
_FINGERPRINT_SQL = (
    "md5(concat_ws('|', "
    "coalesce((SELECT string_agg(DISTINCT e::text, ',' ORDER BY e::text) "
    "FROM jsonb_array_elements(CASE WHEN jsonb_typeof({m}->'cases') = 'array' "
    "THEN {m}->'cases' ELSE '[]'::jsonb END) AS e), ''), "
    + ", ".join(
        # Execution limits are not compared (compatibility.measured_limits): drop their keys.
        f"coalesce((({{m}}->'{name}'){_DROP_EXECUTION_LIMITS if name == 'limits' else ''})"
        "::text, 'null')"
        for name in _EQUAL_FIELDS
    )
    + "))"
)


def offer_fingerprint() -> RawSQL:
    """The offer's fingerprint of a Run query's rows, computed from their manifests."""
    column = f'"{Run._meta.db_table}"."manifest"'
    return RawSQL(_FINGERPRINT_SQL.format(m=column), [], output_field=CharField())


def kept_fingerprint() -> Subquery:
    """The run's kept offer fingerprint, for a Run query: null where its cases were not packed."""
    kept = PlanCases.objects.filter(run=OuterRef("pk")).values("fingerprint")[:1]
    return Subquery(kept, output_field=CharField())


def case_set_digest(cases: Sequence[Any]) -> str:
    """SHA-256 of the cases as a *set* of (question, content hash, benchmark): the order of a
    plan is not part of what was measured (`compare.compatibility._case_differences`)."""
    lines = sorted({json.dumps(list(c), separators=(",", ":")) for c in cases})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


# --- what the Compare page's offer reads of a head ------------------------------------------


def offer_targets(raw: Any) -> list[dict[str, Any]]:
    """A head's targets as the offer reads them (a damaged value: none)."""
    return raw if isinstance(raw, list) else []


def offer_single_slugs(targets: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The slugs of the single-model targets, in target order."""
    return tuple(t["slug"] for t in targets if t.get("kind") == "single")


def offer_price_table(raw: Any) -> dict[str, frozenset[tuple[str, Any]]] | None:
    """model → frozen normalised price row; None when the run prices one model two ways (then
    it is comparable with no other run). The same normalisation as runs_differences ("3" and
    "3.0" are one price), so the offer and the re-verification never disagree about prices."""
    table, conflicts = model_prices({"prices": raw if isinstance(raw, dict) else {}})
    if conflicts:
        return None
    return {model: frozenset(row.items()) for model, row in table.items()}


def _exact(value: Any) -> str | None:
    """One spelling per finite decimal value (3, 3.0 and 3.00 alike; no rounding); None for
    anything else (NaN is not even equal to itself)."""
    if not isinstance(value, Decimal) or not value.is_finite():
        return None
    if not value:
        return "0"
    sign, digits, exponent = value.as_tuple()
    kept = list(digits)
    while kept[-1] == 0:
        kept.pop()
        exponent = int(exponent) + 1
    return f"{'-' if sign else ''}{''.join(map(str, kept))}e{exponent}"


def _price_key(run_id: int, table: dict[str, frozenset[tuple[str, Any]]]) -> str:
    """Equal keys: equal price tables, so the runs are comparable on prices. A table with a
    value that is not a finite decimal gets a key of its own run (never equal to another's):
    its group is then matched in Python, by the values themselves (`compare.selectors`)."""
    rows = []
    for model, row in sorted(table.items()):
        spelled = sorted((str(k), _exact(v)) for k, v in row)
        if any(v is None for _, v in spelled):
            return f"run {run_id}"
        rows.append([model, spelled])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def offer_facts(run_id: int, head: Mapping[str, Any]) -> dict[str, Any]:
    """The `PlanCases.offer_*` columns of a run's head: what step 1 of the Compare page filters,
    groups and searches by in SQL (`compare.selectors.baseline_offer`)."""
    targets = offer_targets(head.get("targets"))
    table = offer_price_table(head.get("prices"))
    return {
        "offer_targets": len(targets),
        "offer_singles": list(offer_single_slugs(targets)),
        # What option_matches searches besides the name and id: each target's slug and model.
        "offer_terms": sorted(
            {str(t.get(k, "")).lower() for t in targets for k in ("slug", "model")}
        ),
        "offer_prices": None if table is None else _price_key(run_id, table),
    }


_OFFER_FIELDS = ("offer_targets", "offer_singles", "offer_terms", "offer_prices")


def offer_facts_fill(unpacked: Sequence[int], without_facts: Sequence[int]) -> None:
    """Keep the offer's facts of runs that have none: ``unpacked`` runs' cases are packed (the
    facts with them), ``without_facts`` rows were kept before the facts were."""
    if unpacked:
        plan_cases(list(Run.objects.defer("manifest").filter(pk__in=unpacked)))
    rows = list(PlanCases.objects.filter(run_id__in=without_facts).only("run_id", "head"))
    for row in rows:
        for name, value in offer_facts(row.run_id, row.head).items():
            setattr(row, name, value)
    PlanCases.objects.bulk_update(rows, _OFFER_FIELDS)


def _pack(run_id: int, cases: Sequence[Any], head: dict[str, Any], fingerprint: str) -> PlanCases:
    names = sorted({str(c[2]) for c in cases})
    position = {b: i for i, b in enumerate(names)}
    packed = np.array([(c[0], position[str(c[2])]) for c in cases], dtype=CASE_RECORD)
    return PlanCases(
        run_id=run_id,
        digest=case_set_digest(cases),
        benchmarks=names,
        cases=packed.tobytes(),
        head=head,
        fingerprint=fingerprint,
        **offer_facts(run_id, head),
    )


def plan_cases(runs: Sequence[Run]) -> dict[int, PlanCases]:
    """Every run's packed cases: the kept rows, the rest packed from the manifests (each read
    once, the case list apart from the rest) and kept."""
    out = {p.run_id: p for p in PlanCases.objects.filter(run_id__in=[r.pk for r in runs])}
    wanted = [r.pk for r in runs if r.pk not in out]
    if not wanted:
        return out
    read = without_case_list(Run.objects.filter(pk__in=wanted)).annotate(fp=offer_fingerprint())
    rows = [
        _pack(pk, cases or [], head, fp)
        for pk, cases, head, fp in read.values_list(
            "pk", "manifest__cases", MANIFEST_WITHOUT_CASES, "fp"
        )
    ]
    PlanCases.objects.bulk_create(rows, ignore_conflicts=True)
    out.update({p.run_id: p for p in rows})
    return out


def runs_without_plan_cases(*, limit: int, exclude: set[int]) -> list[int]:
    """compare's run-end backlog (`runs.ledger.hooks.run_end_backlog`): ended runs, report
    kept, whose cases were never packed — they ended before compare's run-end hooks packed
    every run's cases and kept its savings sums — the newest first."""
    return runs_ended_newest(
        limit=limit, exclude=exclude, stored_report__isnull=False, plan_cases__isnull=True
    )


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
