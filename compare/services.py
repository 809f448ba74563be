"""Comparisons: the strongest single-model baseline and every candidate against it (R5, R6, R11).

A comparison is computed afresh on every request: each pair's compatibility is re-verified,
the baseline is re-selected, and qualities, costs and tokens come from the runs' reports, which
read the effective (reconciled) usage. Per-case outcomes are loaded once, as numpy arrays, and
all differences are array arithmetic. Reads only; no model call.

The question is the statistical unit (DESIGN §6, docs/statistics.md): the attempts of one
question are summed into one paired difference and one cost before any interval is computed,
so n_b, the Hoeffding radius, the family-wise interval and both bootstraps count questions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from compare.compatibility import IncomparableRuns, execution_differences, runs_differences
from compare.stats import (
    DEFAULT_ALPHA,
    BaselineCandidate,
    BaselineChoice,
    PairedResult,
    paired_difference,
    question_differences,
    question_totals,
    savings_bootstrap_intervals,
    savings_pct,
    select_baseline,
)
from runs.models import Cell, Run, Target
from runs.reconcile import effective_cell_costs
from runs.report import run_reports
from srbench.money import money_text

__all__ = [
    "STATEMENTS",
    "CandidatesRefused",
    "ComparisonError",
    "IncomparableRuns",
    "comparison_build",
]

# Fixed statements every comparison carries, whatever its numbers (R3.2, R5.5, R6.2, R6.3).
STATEMENTS = {
    "intervals_scope": (
        "Neither interval covers the uncertainty of choosing the strongest baseline, of tuning "
        "choices, or of data contamination."
    ),
    "small_samples": (
        "Small samples show direction only. Claiming quality parity needs a non-inferiority "
        "margin fixed before the run and a holdout-set interval."
    ),
    "bootstrap": (
        "The stratified bootstrap interval is a diagnostic; a [0, 0] bootstrap on a small "
        "sample does not prove parity."
    ),
    "cache_neutral": (
        "Cache-neutral cost prices every input token at the ordinary input price: a "
        "counterfactual token-equivalent cost, neither a bill nor a measured cache-free "
        "execution."
    ),
    "token_prices": "A self-hosted token-equivalent price is not a GPU bill saving.",
    "improvement": ("A positive point estimate whose interval crosses zero is not an improvement."),
}

# Cells with an outcome. Anything else (pending, running, cancelled, sent_unknown) is a case
# without a result: counted wrong for a candidate, disqualifying for a baseline (R5.1).
_OUTCOME_STATES = ("completed", "failed")


class ComparisonError(Exception):
    """The comparison cannot be built (bad input, no eligible baseline)."""


class CandidatesRefused(IncomparableRuns):
    """Every candidate run was refused; ``refused`` lists each one with its differences
    (an IncomparableRuns, so callers that handle the first refusal keep working)."""

    def __init__(self, baseline_run: int, refused: list[dict[str, Any]], first: IncomparableRuns):
        super().__init__(baseline_run, first.candidate_run, first.differences)
        self.refused = refused


@dataclass(frozen=True)
class _Cases:
    """The planned cases of the baseline run, in a fixed order: case i is (question, slot)."""

    keys: npt.NDArray[np.int64]  # question_id * slots + slot, sorted
    benchmark: npt.NDArray[np.int64]  # index into ``benchmarks``
    benchmarks: tuple[str, ...]
    slots: int

    @property
    def questions(self) -> int:
        return self.keys.size // self.slots

    @property
    def question_benchmark(self) -> npt.NDArray[np.int64]:
        """The benchmark of each question, in question order: the keys sort a question's
        ``slots`` attempts next to each other, so every slots-th case starts a question."""
        return self.benchmark[:: self.slots]

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> _Cases:
        slots = int(manifest.get("slots", 1))
        benchmarks = tuple(manifest["benchmarks"])
        position = {b: i for i, b in enumerate(benchmarks)}
        qids = np.array([c[0] for c in manifest["cases"]], dtype=np.int64)
        bench = np.array([position[c[2]] for c in manifest["cases"]], dtype=np.int64)
        keys = (qids[:, None] * slots + np.arange(slots, dtype=np.int64)[None, :]).ravel()
        bench = np.repeat(bench, slots)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], bench[order], benchmarks, slots)

    def outcome(self, correct_keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
        """1 where the case's cell is correct; a missing or failed cell stays 0 (wrong)."""
        out = np.zeros(self.keys.size, dtype=np.int8)
        if correct_keys.size:
            idx = np.searchsorted(self.keys, correct_keys)
            inside = idx < self.keys.size
            idx, wanted = idx[inside], correct_keys[inside]
            # A correct cell outside the planned cases (impossible for a compatible pair) is
            # ignored rather than shifted onto a neighbouring case.
            out[idx[self.keys[idx] == wanted]] = 1
        return out


@dataclass
class _Entry:
    """One (run, target) taking part, with its report and per-case outcomes."""

    run: Run
    report: dict[str, Any]
    target: dict[str, Any]  # the target's block of the run report
    target_id: int | None
    outcome: npt.NDArray[np.int8] | None = None
    states: dict[str, int] | None = None

    @property
    def label(self) -> str:
        return f"run {self.run.pk} / {self.target['slug']}"


def _dec(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


# A savings rate is computed in Decimal from the exact costs, so it is written with the same
# exact-text rule as money (never through a float).
_pct = money_text


def _load_runs(baseline_run_id: int, candidate_run_ids: Sequence[int]) -> dict[int, Run]:
    wanted = list(dict.fromkeys([baseline_run_id, *candidate_run_ids]))
    runs = {r.pk: r for r in Run.objects.filter(pk__in=wanted)}
    missing = [str(pk) for pk in wanted if pk not in runs]
    if missing:
        raise ComparisonError(f"unknown run(s): {', '.join(missing)}")
    return runs


@dataclass(frozen=True)
class _CellTable:
    """Every cell of the compared runs, from one query, as arrays grouped by (run, target)."""

    id: npt.NDArray[np.int64]
    key: npt.NDArray[np.int64]  # question_id * slots + slot, as in _Cases
    correct: npt.NDArray[np.bool_]
    rows: dict[tuple[int, int], npt.NDArray[np.intp]]  # (run, target) -> its rows, ascending
    states: dict[tuple[int, int], dict[str, int]]  # (run, target) -> status -> cells
    target_ids: dict[tuple[int, str], int]  # (run, target slug) -> target id

    @classmethod
    def load(cls, run_ids: Sequence[int], slots: int) -> _CellTable:
        rows = list(
            Cell.objects.filter(run_id__in=run_ids).values_list(
                "id", "run_id", "target_id", "question_id", "slot", "status", "correct"
            )
        )
        if not rows:
            none = np.zeros(0, dtype=np.int64)
            return cls(none, none, np.zeros(0, dtype=np.bool_), {}, {}, {})
        ids, run, target, question, slot, status, correct = zip(*rows, strict=True)
        states: dict[tuple[int, int], dict[str, int]] = {}
        for (run_id, target_id, state), n in Counter(zip(run, target, status, strict=True)).items():
            states.setdefault((run_id, target_id), {})[state] = n
        run_a = np.array(run, dtype=np.int64)
        target_a = np.array(target, dtype=np.int64)
        span = int(target_a.max()) + 1
        pair_codes, inverse = np.unique(run_a * span + target_a, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(pair_codes.size + 1))
        by_pair = {
            (int(code // span), int(code % span)): order[bounds[i] : bounds[i + 1]]
            for i, code in enumerate(pair_codes)
        }
        slugs = dict(Target.objects.filter(pk__in=set(target)).values_list("pk", "slug"))
        return cls(
            id=np.array(ids, dtype=np.int64),
            key=np.array(question, dtype=np.int64) * slots + np.array(slot, dtype=np.int64),
            correct=np.fromiter((c is True for c in correct), dtype=np.bool_, count=len(rows)),
            rows=by_pair,
            states=states,
            target_ids={(r, slugs[t]): t for r, t in by_pair},
        )

    def correct_keys(self, pair: tuple[int, int]) -> npt.NDArray[np.int64]:
        """The (question, slot) keys of the pair's correct cells, sorted."""
        rows = self.rows.get(pair)
        if rows is None:
            return np.zeros(0, dtype=np.int64)
        return np.sort(self.key[rows[self.correct[rows]]])


def _case_costs(
    run_ids: Sequence[int], cases: _Cases, cells: _CellTable
) -> dict[tuple[int, int], npt.NDArray[np.float64]]:
    """Per (run, target): each planned case's subject cost, NaN where unknown.

    One aggregate query sums the *effective* (reconciled) subject-call cost per cell, the same
    usage the reports read; the cell table maps cells to cases. A case is unknown when its cell
    has no subject call, any of its subject calls has no cost, or it has no cell at all.
    """
    out: dict[tuple[int, int], npt.NDArray[np.float64]] = {}
    if not cells.id.size:
        return out
    sums = effective_cell_costs(run_ids=run_ids, role="subject")
    cell_cost = np.full(cells.id.size, np.nan)
    if sums:
        known = np.array(sums, dtype=np.float64)  # an unknown cost (None) becomes NaN
        ids, costs = known[:, 0].astype(np.int64), known[:, 1]
        order = np.argsort(cells.id)
        pos = np.searchsorted(cells.id[order], ids)
        inside = pos < cells.id.size
        pos, ids, costs = pos[inside], ids[inside], costs[inside]
        hit = cells.id[order[pos]] == ids
        cell_cost[order[pos[hit]]] = costs[hit]
    idx = np.searchsorted(cases.keys, cells.key)
    planned = idx < cases.keys.size
    planned[planned] = cases.keys[idx[planned]] == cells.key[planned]
    for pair, rows in cells.rows.items():
        rows = rows[planned[rows]]
        per_case = np.full(cases.keys.size, np.nan)
        per_case[idx[rows]] = cell_cost[rows]
        out[pair] = per_case
    return out


def _savings_intervals(
    base_costs: npt.NDArray[np.float64] | None,
    cand_costs: list[npt.NDArray[np.float64] | None],
    masks: dict[str, npt.NDArray[np.bool_]],
    alpha: float,
) -> list[dict[str, Any] | None]:
    """The bootstrap interval of each candidate's subject savings, or None (unknown). Callers
    pass None for a candidate whose point savings are unknown: an interval must never be
    stated for a rate that is not."""
    out: list[dict[str, Any] | None] = [None] * len(cand_costs)
    wanted = [(i, costs) for i, costs in enumerate(cand_costs) if costs is not None]
    if base_costs is None or not wanted:
        return out
    intervals = savings_bootstrap_intervals(
        {b: base_costs[m] for b, m in masks.items()},
        [{b: costs[m] for b, m in masks.items()} for _, costs in wanted],
        alpha=alpha,
    )
    for (i, _), interval in zip(wanted, intervals, strict=True):
        if interval is not None:
            out[i] = {
                "lower": interval.lower,
                "upper": interval.upper,
                "alpha": interval.alpha,
                "draws": interval.draws,
                "seed": interval.seed,
                "label": interval.label,
            }
    return out


def _quality(target_report: dict[str, Any]) -> Fraction | None:
    exact = target_report["score"].get("exact")
    return None if exact is None else Fraction(exact)


def _baseline_pool(
    entries: list[_Entry], cases: _Cases
) -> tuple[list[BaselineCandidate], list[dict[str, Any]]]:
    """Single-model targets of the baseline run with an outcome for every planned case."""
    pool = []
    listed = []
    for e in entries:
        t = e.target
        states = e.states or {}
        with_outcome = sum(states.get(s, 0) for s in _OUTCOME_STATES)
        reason = None
        if t["kind"] != "single":
            reason = "not a single model"
        elif t["planned"] != cases.keys.size:
            reason = f"{t['planned']} cells planned for {cases.keys.size} cases"
        elif with_outcome != cases.keys.size:
            reason = f"{cases.keys.size - with_outcome} case(s) without a result"
        quality = _quality(t)
        listed.append(
            {
                "target": t["slug"],
                "kind": t["kind"],
                "quality": None if quality is None else float(quality),
                "quality_exact": None if quality is None else str(quality),
                "subject_cost_usd": t["subject_cost_usd"],
                "eligible": reason is None,
                "reason": reason,
            }
        )
        if reason is None and quality is not None:
            pool.append(BaselineCandidate(t["slug"], quality, _dec(t["subject_cost_usd"])))
    return pool, listed


def _interval(lower: float, upper: float, half: float, alpha: float) -> dict[str, Any]:
    return {
        "lower": lower,
        "upper": upper,
        "display_lower": max(lower, -1.0),
        "display_upper": min(upper, 1.0),
        "half_width": half,
        "alpha": alpha,
        "level": 1 - alpha,
    }


def frozen_margin(run: Run) -> Decimal | None:
    """The non-inferiority margin frozen in a run's manifest before the run, or None."""
    raw = run.manifest.get("non_inferiority_margin")
    return None if raw is None else Decimal(str(raw))


class MarginFrozen(ComparisonError):
    """A margin given at comparison time that is not the one frozen before the run."""


def comparison_margin_check(doc: dict[str, Any], *, supplied: Decimal) -> None:
    """R5.5: the margin is fixed in the plan before the run (the manifest is immutable). A
    comparison request may restate it as a check; one that differs from the margin frozen in
    any compared run — or names one where none was frozen — is refused, never applied."""
    for c in doc["comparisons"]:
        frozen = c["non_inferiority"]["margin_exact"]
        if frozen is None or Decimal(frozen) != supplied:
            raise MarginFrozen(
                "the non-inferiority margin is fixed in the plan before the run and cannot be "
                f"set or changed at comparison time: run {c['run']} froze "
                f"{frozen if frozen is not None else 'no margin'}, the request gave {supplied}"
            )


def _run_split(run: Run) -> str | None:
    split: str | None = run.manifest.get("dataset", {}).get("split") or run.dataset.split
    return split


def _non_inferiority(paired: PairedResult, candidate: Run, baseline: Run) -> dict[str, Any]:
    """A parity verdict only on the terms fixed before the run (R5.5, docs/decisions.md
    "Pre-registered margins"): the margin frozen in the candidate run's manifest — the
    baseline run's must agree or hold none — and holdout cases in both runs. With several
    candidates the family-wise bound decides, because the claim is made about whichever
    candidate is picked. The answer names the margin, its run and the interval used."""
    family = paired.family_size > 1
    if family:
        lower, upper, level = paired.family_lower, paired.family_upper, 1 - paired.family_alpha
        method = f"weighted Hoeffding, Bonferroni over {paired.family_size}"
    else:
        lower, upper, level = paired.lower, paired.upper, 1 - paired.alpha
        method = "weighted Hoeffding"
    margin, baseline_margin = frozen_margin(candidate), frozen_margin(baseline)
    split, baseline_split = _run_split(candidate), _run_split(baseline)
    used = f"the {level:.2%} {method} interval [{lower:+.4f}, {upper:+.4f}]"
    out: dict[str, Any] = {
        "margin": None if margin is None else float(margin),
        "margin_exact": None if margin is None else str(margin),
        "margin_run": candidate.pk,
        "margin_plan_sha256": candidate.plan_sha256,
        "lower_bound": lower,
        "interval": {"lower": lower, "upper": upper, "level": level, "method": method},
        "split": split,
    }
    if margin is None:
        return {
            **out,
            "verdict": "not shown",
            "reason": f"no non-inferiority margin was fixed in run {candidate.pk}'s plan "
            "before the run",
        }
    if baseline_margin is not None and baseline_margin != margin:
        return {
            **out,
            "verdict": "not shown",
            "reason": f"the margins fixed before the runs disagree: {margin} in candidate run "
            f"{candidate.pk}, {baseline_margin} in baseline run {baseline.pk}",
        }
    if split != "holdout" or baseline_split != "holdout":
        return {
            **out,
            "verdict": "not shown",
            "reason": f"the cases are the {split or 'unknown'} split; parity needs holdout cases",
        }
    source = f"margin {margin} frozen in run {candidate.pk}'s plan"
    if lower > -margin:
        return {
            **out,
            "verdict": "non-inferior",
            "reason": f"lower bound {lower:+.4f} of {used} is above −{margin} ({source})",
        }
    return {
        **out,
        "verdict": "not shown",
        "reason": f"lower bound {lower:+.4f} of {used} is not above −{margin} ({source})",
    }


def _savings(
    choice: BaselineChoice, candidate: Decimal | None, baseline: Decimal | None
) -> tuple[Decimal | None, str | None]:
    """A savings rate, or why it is unknown (R5.3, R5.4)."""
    if not choice.savings_known:
        return None, "a tied strongest single model has incomplete cost"
    if candidate is None:
        return None, "the candidate's cost is incomplete"
    if baseline is None:
        return None, "the baseline's cost is incomplete"
    value = savings_pct(candidate, baseline)
    return value, None if value is not None else "the baseline cost is zero"


def _cache_neutral_why(
    why: str | None, candidate: dict[str, Any], baseline: dict[str, Any]
) -> str | None:
    """The cache-neutral savings reason, naming the cache-neutral cost (not the bill) and
    adding the report's account of why it is unknown: cells without a result, or calls whose
    receipt entry is missing, unusable or served by an unpriced model."""
    for side, t in (("candidate", candidate), ("baseline", baseline)):
        if why == f"the {side}'s cost is incomplete":
            detail = t.get("cache_neutral_unknown_reason")
            return f"the {side}'s cache-neutral cost is unknown" + (f": {detail}" if detail else "")
    return why


def _usage_block(t: dict[str, Any], run_report_doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "subject_cost_usd": t["subject_cost_usd"],
        "known_cost_usd": t["known_cost_usd"],
        "total_spend_usd": t["total_spend_usd"],
        "cache_neutral_cost_usd": t["cache_neutral_cost_usd"],
        "tokens": t["tokens"],
        "ttft_p50_ms": t["ttft_p50_ms"],
        "latency_p50_ms": t["latency_p50_ms"],
        "latency_p95_ms": t["latency_p95_ms"],
        "request_seconds_sum": t["request_seconds_sum"],
        "wall_seconds": run_report_doc["run"]["wall_seconds"],
        "usage_correction": run_report_doc["usage_correction"],
    }


def comparison_build(
    *,
    baseline_run_id: int,
    candidate_run_ids: Sequence[int],
    baseline_target: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    report_refused: bool = False,
) -> dict[str, Any]:
    """Compare every target of the candidate runs with the strongest single model of the
    baseline run, on identical cases (R5, R6, R11). JSON-serialisable: money and exact
    fractions are strings, unknown is None.

    ``baseline_target`` may name one of the tied strongest single models; any other choice
    is refused, because the baseline is never weaker than the strongest (R5.1). A candidate
    run may be the baseline run itself (its other targets are then candidates). Raises
    :class:`IncomparableRuns` for an incompatible pair and :class:`ComparisonError` otherwise.

    With ``report_refused`` an incompatible candidate run is left out and listed under
    ``refused`` with its differences instead (the page and API compare the rest); when every
    candidate run is refused, :class:`CandidatesRefused` (an IncomparableRuns) lists them all.
    """
    if not candidate_run_ids:
        raise ComparisonError("name at least one candidate run")
    runs = _load_runs(baseline_run_id, candidate_run_ids)
    baseline_run = runs[baseline_run_id]
    refused: list[dict[str, Any]] = []
    first_refusal: IncomparableRuns | None = None
    for run_id in dict.fromkeys(candidate_run_ids):
        differences = runs_differences(baseline_run, runs[run_id])
        if differences:
            if not report_refused:
                raise IncomparableRuns(baseline_run_id, run_id, differences)
            first_refusal = first_refusal or IncomparableRuns(baseline_run_id, run_id, differences)
            refused.append(
                {
                    "run": run_id,
                    "run_name": runs[run_id].name,
                    "differences": [d.as_dict() for d in differences],
                }
            )
    refused_ids = {r["run"] for r in refused}
    candidate_run_ids = [pk for pk in candidate_run_ids if pk not in refused_ids]
    if not candidate_run_ids:
        assert first_refusal is not None
        raise CandidatesRefused(baseline_run_id, refused, first_refusal)
    for run_id in refused_ids - {baseline_run_id}:
        del runs[run_id]

    run_ids = list(runs)
    reports = run_reports(runs=list(runs.values()))
    cases = _Cases.from_manifest(baseline_run.manifest)
    cells = _CellTable.load(run_ids, cases.slots)
    empty = np.zeros(0, dtype=np.int64)

    def entries_of(run_id: int) -> list[_Entry]:
        out = []
        for t in reports[run_id]["targets"]:
            tid = cells.target_ids.get((run_id, t["slug"]))
            e = _Entry(runs[run_id], reports[run_id], t, tid)
            e.states = cells.states.get((run_id, tid), {}) if tid is not None else {}
            e.outcome = cases.outcome(cells.correct_keys((run_id, tid)) if tid else empty)
            out.append(e)
        return out

    baseline_entries = entries_of(baseline_run_id)
    pool, pool_listed = _baseline_pool(baseline_entries, cases)
    if not pool:
        raise ComparisonError(
            f"run {baseline_run_id} has no single-model target with a result for every "
            "planned case: there is no baseline"
        )
    choice = select_baseline(pool)
    if baseline_target is not None and baseline_target != choice.slug:
        if baseline_target not in choice.tied_slugs:
            raise ComparisonError(
                f"{baseline_target} is not among the strongest single models of run "
                f"{baseline_run_id} ({', '.join(choice.tied_slugs)}): the baseline is never "
                "weaker than the strongest measured single model"
            )
        chosen = next(c for c in pool if c.slug == baseline_target)
        choice = BaselineChoice(
            chosen.slug,
            choice.quality,
            chosen.subject_cost,
            choice.tied_slugs,
            choice.savings_known,
        )
    base = next(e for e in baseline_entries if e.target["slug"] == choice.slug)
    assert base.outcome is not None

    candidates: list[_Entry] = []
    for run_id in dict.fromkeys(candidate_run_ids):
        for e in entries_of(run_id) if run_id != baseline_run_id else baseline_entries:
            if run_id == baseline_run_id and e.target["slug"] == choice.slug:
                continue
            candidates.append(e)
    if not candidates:
        raise ComparisonError("the candidate runs hold no target other than the baseline")

    manifest = baseline_run.manifest
    weights = {b: Fraction(manifest["benchmarks"][b]["weight"]) for b in cases.benchmarks}
    split = _run_split(baseline_run)
    margins = {frozen_margin(e.run) for e in candidates}
    # Per *question* (the unit): each question's attempts are summed before any statistic.
    masks = {b: cases.question_benchmark == i for i, b in enumerate(cases.benchmarks)}
    masks = {b: m for b, m in masks.items() if m.any()}

    def per_question_costs(
        costs: npt.NDArray[np.float64] | None,
    ) -> npt.NDArray[np.float64] | None:
        return None if costs is None else question_totals(costs, cases.slots)

    base_t = base.target
    base_subject, base_total = _dec(base_t["subject_cost_usd"]), _dec(base_t["total_spend_usd"])
    base_neutral = _dec(base_t["cache_neutral_cost_usd"])
    case_costs = _case_costs(run_ids, cases, cells)
    base_case_costs = case_costs.get((baseline_run_id, base.target_id or -1))
    subject_savings = [
        _savings(choice, _dec(e.target["subject_cost_usd"]), base_subject) for e in candidates
    ]
    savings_intervals = _savings_intervals(
        per_question_costs(base_case_costs),
        [
            None
            if subject is None
            else per_question_costs(case_costs.get((e.run.pk, e.target_id or -1)))
            for e, (subject, _) in zip(candidates, subject_savings, strict=True)
        ],
        masks,
        alpha,
    )
    comparisons = []
    for e, (subject, subject_why), savings_interval in zip(
        candidates, subject_savings, savings_intervals, strict=True
    ):
        assert e.outcome is not None
        d = question_differences(e.outcome, base.outcome, cases.slots)
        paired = paired_difference(
            {b: d[m] for b, m in masks.items()},
            weights,
            alpha,
            family_size=len(candidates),
            attempts=cases.slots,
        )
        t = e.target
        states_e = e.states or {}
        without_result = cases.keys.size - sum(states_e.get(s, 0) for s in _OUTCOME_STATES)
        total, total_why = _savings(choice, _dec(t["total_spend_usd"]), base_total)
        neutral, neutral_why = _savings(choice, _dec(t["cache_neutral_cost_usd"]), base_neutral)
        neutral_why = _cache_neutral_why(neutral_why, t, base_t)
        quality = _quality(t)
        comparisons.append(
            {
                "run": e.run.pk,
                "run_name": e.run.name,
                "run_created_at": e.run.created_at.isoformat(),
                "target": t["slug"],
                "kind": t["kind"],
                "quality": None if quality is None else float(quality),
                "quality_exact": None if quality is None else str(quality),
                "cases": int(cases.keys.size),
                "questions": int(cases.questions),
                "attempts_per_question": cases.slots,
                "cases_without_result": without_result,
                "failed_or_missing_counted_wrong": True,
                "delta": float(paired.delta),
                "delta_exact": str(paired.delta),
                "micro_delta": float(paired.micro_delta),
                "micro_delta_exact": str(paired.micro_delta),
                "interval": {
                    **_interval(paired.lower, paired.upper, paired.half_width, alpha),
                    "method": "weighted Hoeffding",
                    "clipped": paired.clipped,
                },
                "family_interval": {
                    **_interval(
                        paired.family_lower,
                        paired.family_upper,
                        paired.family_half_width,
                        paired.family_alpha,
                    ),
                    "method": f"weighted Hoeffding, Bonferroni over {paired.family_size}",
                    "family_size": paired.family_size,
                },
                "bootstrap": None
                if paired.bootstrap is None
                else {
                    "lower": paired.bootstrap.lower,
                    "upper": paired.bootstrap.upper,
                    "alpha": paired.bootstrap.alpha,
                    "draws": paired.bootstrap.draws,
                    "seed": paired.bootstrap.seed,
                    "label": "diagnostic only",
                },
                "improvement": paired.improvement,
                "family_improvement": paired.family_improvement,
                "not_an_improvement": paired.not_an_improvement_reason,
                # The regression named, not folded into "no improvement shown".
                "worse": paired.upper < 0,
                "non_inferiority": _non_inferiority(paired, e.run, baseline_run),
                "wins": paired.wins,
                "losses": paired.losses,
                "ties": paired.ties,
                "benchmarks": [
                    {
                        "benchmark": b.benchmark,
                        "n": b.n,
                        "weight": str(b.weight),
                        "mean_difference": float(b.mean_difference),
                        "mean_difference_exact": str(b.mean_difference),
                        "wins": b.wins,
                        "losses": b.losses,
                        "ties": b.ties,
                    }
                    for b in paired.benchmarks
                ],
                "savings": {
                    "subject_cost_pct": _pct(subject),
                    "subject_cost_unknown_reason": subject_why,
                    "total_spend_pct": _pct(total),
                    "total_spend_unknown_reason": total_why,
                    "cache_neutral_pct": _pct(neutral),
                    "cache_neutral_unknown_reason": neutral_why,
                    "cache_neutral_label": STATEMENTS["cache_neutral"],
                },
                "savings_interval": savings_interval,
                "usage": _usage_block(t, e.report),
            }
        )

    return {
        "baseline": {
            "run": baseline_run.pk,
            "run_name": baseline_run.name,
            "target": choice.slug,
            "quality": float(choice.quality),
            "quality_exact": str(choice.quality),
            "subject_cost_usd": money_text(choice.subject_cost),
            "tied": list(choice.tied_slugs),
            "savings_known": choice.savings_known,
            "rule": (
                "strongest single model by exact weighted quality on the identical complete "
                "case set; ties: complete and lowest subject cost, then target slug"
            ),
            "candidates": pool_listed,
            "usage": _usage_block(base.target, base.report),
        },
        "alpha": alpha,
        "family_size": len(candidates),
        "weights": {b: str(w) for b, w in weights.items() if b in masks},
        "split": split,
        # Each comparison's own verdict names its margin; this is the one they share, if any.
        "non_inferiority_margin": (
            None if len(margins) != 1 or None in margins else float(next(iter(margins)))
        ),
        "comparisons": sorted(
            comparisons, key=lambda c: (c["run_created_at"], c["run"], c["target"])
        ),
        "refused": refused,
        # Compared runs may differ in how they were driven (concurrency, timeouts, a cost
        # cap), never in what they asked: each such difference is named here (R11.2).
        "execution_differences": [
            {
                "run": run_id,
                "run_name": runs[run_id].name,
                "differences": [d.as_dict() for d in found],
            }
            for run_id in dict.fromkeys(candidate_run_ids)
            if (found := execution_differences(baseline_run, runs[run_id]))
        ],
        "statements": STATEMENTS,
        "model_requests": 0,
    }
