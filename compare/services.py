"""Comparisons: the strongest single-model baseline and every candidate against it (R5, R6, R11).

Each pair's compatibility is re-verified on every request and the baseline is re-selected;
qualities, costs and tokens come from the runs' reports, which read the effective
(reconciled) usage. A settled run's report and per-cell figures are read from what was
stored for its ledger state (`compare.figures`), so a comparison costs a constant number of
queries and does not re-aggregate its runs' cells and calls. Per-case outcomes are numpy
arrays, and all differences are array arithmetic. Reads only; no model call.

`comparison_compute` is a few named steps — load, check compatibility, pick the baseline,
statistics, savings — giving a typed :class:`compare.results.Comparison`;
`comparison_build` is its JSON.

The question is the statistical unit (DESIGN §6, docs/statistics.md): the attempts of one
question are summed into one paired difference and one cost before any interval is computed,
so n_b, the Hoeffding radius, the family-wise interval and both bootstraps count questions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from compare.bootstrap_memo import resampled_sums_kept, savings_intervals
from compare.compatibility import (
    IncomparableRuns,
    baseline_refusal,
    execution_differences,
    run_comparison_problems,
    runs_differences,
)
from compare.figures import STATUSES, run_figures, target_slugs
from compare.models import PlanCases
from compare.plan_cases import kept_head, plan_cases, planned_cases
from compare.results import (
    CandidateResult,
    Comparison,
    Entry,
    PoolMember,
    RunDifferences,
    Savings,
)
from compare.verdict import Unfinished, comparison_verdict, frozen_margin, run_split
from runs.ledger.selectors import manifest_without_cases, without_case_list
from runs.models import CELL_OUTCOMES, Run
from srbench.refusals import Refusal
from srbench.savings_bootstrap import SavingsInterval
from srbench.stats import (
    DEFAULT_ALPHA,
    DEFAULT_BOOTSTRAP_DRAWS,
    DEFAULT_BOOTSTRAP_SEED,
    BaselineCandidate,
    BaselineChoice,
    paired_difference,
    question_differences,
    question_totals,
    renormalised_weights,
    savings_pct,
    select_baseline,
)

__all__ = [
    "CandidatesRefused",
    "ComparisonError",
    "comparison_build",
    "comparison_compute",
    "frozen_margin",
]


class ComparisonError(Refusal):
    """The comparison cannot be built (bad input, no eligible baseline)."""

    http_status = 422
    code = "no_comparison"


class CandidatesRefused(IncomparableRuns):
    """Every candidate run was refused; ``refused`` lists each one with its differences
    (an IncomparableRuns, so callers that handle the first refusal keep working)."""

    http_status = 409

    def __init__(self, baseline_run: int, runs: list[RunDifferences], first: IncomparableRuns):
        super().__init__(baseline_run, first.candidate_run, first.differences)
        self.runs = runs  # typed, for the page (compare.cards.differences_rows)
        self.refused = refused = [r.as_dict() for r in runs]
        # As a refusal: every refused candidate run with its differences.
        self.message = f"every candidate run was refused against run {baseline_run}"
        self.detail = {"baseline_run": baseline_run, "refused": refused}


class MarginFrozen(ComparisonError):
    """A margin given at comparison time that is not the one frozen before the run."""

    http_status = 409
    code = "margin_frozen"


# The status codes (compare.figures.STATUSES) of a cell with an outcome.
_OUTCOME_CODES = np.array([STATUSES.index(s) for s in CELL_OUTCOMES], dtype=np.int64)


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
    def from_plan(cls, plan: PlanCases, manifest: Mapping[str, Any]) -> _Cases:
        """The cases of a run from its packed case list and its manifest's other fields."""
        slots = int(manifest.get("slots", 1))
        benchmarks = tuple(manifest["benchmarks"])
        qids, bench = planned_cases(plan, benchmarks)
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

    def masks(self) -> dict[str, npt.NDArray[np.bool_]]:
        """Per benchmark with questions: which questions are its own."""
        masks = {b: self.question_benchmark == i for i, b in enumerate(self.benchmarks)}
        return {b: m for b, m in masks.items() if m.any()}


@dataclass(frozen=True)
class _CellTable:
    """Every cell of the compared runs as arrays grouped by (run, target)."""

    key: npt.NDArray[np.int64]  # question_id * slots + slot, as in _Cases
    correct: npt.NDArray[np.bool_]
    status: npt.NDArray[np.int64]  # index into compare.figures.STATUSES
    cost: npt.NDArray[np.float64]  # effective subject cost of the cell; NaN when unknown
    rows: dict[tuple[int, int], npt.NDArray[np.intp]]  # (run, target) -> its rows, ascending
    states: dict[tuple[int, int], dict[str, int]]  # (run, target) -> status -> cells
    target_ids: dict[tuple[int, str], int]  # (run, target slug) -> target id

    @classmethod
    def from_figures(cls, cells: dict[int, npt.NDArray[np.void]], slots: int) -> _CellTable:
        packed: npt.NDArray[np.void] = (
            np.concatenate([cells[pk] for pk in cells]) if cells else np.zeros(0, dtype=np.void)
        )
        if not packed.size:
            none = np.zeros(0, dtype=np.int64)
            return cls(none, np.zeros(0, dtype=np.bool_), none, np.zeros(0), {}, {}, {})
        run_a = np.concatenate([np.full(cells[pk].size, pk, dtype=np.int64) for pk in cells])
        target_a = packed["target"].astype(np.int64)
        span = int(target_a.max()) + 1
        pair_codes, inverse = np.unique(run_a * span + target_a, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(pair_codes.size + 1))
        by_pair = {
            (int(code // span), int(code % span)): order[bounds[i] : bounds[i + 1]]
            for i, code in enumerate(pair_codes)
        }
        states: dict[tuple[int, int], dict[str, int]] = {}
        # Cells per (pair, status), counted in one pass: 100,000 cells a run.
        width = len(STATUSES)
        counted = np.bincount(
            inverse * width + packed["status"].astype(np.int64), minlength=pair_codes.size * width
        ).reshape(-1, width)
        for pair, state in zip(*np.nonzero(counted), strict=True):
            code = int(pair_codes[pair])
            n = int(counted[pair, state])
            states.setdefault((code // span, code % span), {})[STATUSES[state]] = n
        slugs = target_slugs(cells)
        return cls(
            key=packed["question"].astype(np.int64) * slots + packed["slot"].astype(np.int64),
            correct=packed["correct"].astype(np.bool_),
            status=packed["status"].astype(np.int64),
            cost=packed["cost"].astype(np.float64),
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

    def ended_keys(self, pair: tuple[int, int]) -> npt.NDArray[np.int64]:
        """The (question, slot) keys of the pair's cells with an outcome (completed or
        failed, `runs.models.CELL_OUTCOMES`), sorted: the rest never ended."""
        rows = self.rows.get(pair)
        if rows is None:
            return np.zeros(0, dtype=np.int64)
        ended = np.isin(self.status[rows], _OUTCOME_CODES)
        return np.sort(self.key[rows[ended]])

    def case_costs(self, cases: _Cases) -> dict[tuple[int, int], npt.NDArray[np.float64]]:
        """Per (run, target): each planned case's subject cost, NaN where unknown (its cell
        has no subject call, a subject call has no cost, or it has no cell at all)."""
        idx = np.searchsorted(cases.keys, self.key)
        planned = idx < cases.keys.size
        planned[planned] = cases.keys[idx[planned]] == self.key[planned]
        out = {}
        for pair, rows in self.rows.items():
            rows = rows[planned[rows]]
            per_case = np.full(cases.keys.size, np.nan)
            per_case[idx[rows]] = self.cost[rows]
            out[pair] = per_case
        return out


@dataclass
class _Loaded:
    """What the steps share: the runs, the baseline's cases and every entry's figures."""

    runs: dict[int, Run]
    baseline_run: Run
    cases: _Cases
    cells: _CellTable
    entries: dict[int, list[Entry]]  # run id -> its targets, in report order


def _load_runs(baseline_run_id: int, candidate_run_ids: Sequence[int]) -> dict[int, Run]:
    """The runs, each with its manifest's fields but the case list (`manifest_without_cases`):
    the case lists are read packed (`compare.plan_cases`)."""
    wanted = list(dict.fromkeys([baseline_run_id, *candidate_run_ids]))
    found = without_case_list(Run.objects.filter(pk__in=wanted), kept=kept_head())
    runs = {r.pk: r for r in found}
    missing = [str(pk) for pk in wanted if pk not in runs]
    if missing:
        raise ComparisonError(f"unknown run(s): {', '.join(missing)}")
    return runs


def _check_compatibility(
    runs: dict[int, Run],
    plans: dict[int, PlanCases],
    baseline_run_id: int,
    candidate_run_ids: Sequence[int],
) -> tuple[list[int], list[RunDifferences]]:
    """The candidate runs that may be compared, and the refused ones with their differences
    (CandidatesRefused when every one is refused)."""
    baseline_run = runs[baseline_run_id]
    refused: list[RunDifferences] = []
    first: IncomparableRuns | None = None
    for run_id in dict.fromkeys(candidate_run_ids):
        same_cases = plans[run_id].digest == plans[baseline_run_id].digest
        differences = runs_differences(baseline_run, runs[run_id], same_cases=same_cases)
        if differences:
            first = first or IncomparableRuns(baseline_run_id, run_id, differences)
            refused.append(RunDifferences(runs[run_id], differences))
    refused_ids = {r.run.pk for r in refused}
    kept = [pk for pk in dict.fromkeys(candidate_run_ids) if pk not in refused_ids]
    if not kept:
        assert first is not None
        raise CandidatesRefused(baseline_run_id, refused, first)
    for run_id in refused_ids - {baseline_run_id}:
        del runs[run_id]
    return kept, refused


def _load(runs: dict[int, Run], plan: PlanCases, baseline_run_id: int) -> _Loaded:
    """The reports and cells of every run (stored where settled), as entries with outcomes,
    over the baseline run's planned cases (``plan``)."""
    baseline_run = runs[baseline_run_id]
    figures = run_figures(list(runs.values()))
    cases = _Cases.from_plan(plan, manifest_without_cases(baseline_run))
    cells = _CellTable.from_figures(figures.cells, cases.slots)
    empty = np.zeros(0, dtype=np.int64)
    entries: dict[int, list[Entry]] = {}
    for run_id, run in runs.items():
        report = figures.reports[run_id]
        entries[run_id] = []
        for t in report.targets:
            tid = cells.target_ids.get((run_id, t.slug))
            e = Entry(run, report, t, tid)
            e.states = cells.states.get((run_id, tid), {}) if tid is not None else {}
            e.outcome = cases.outcome(cells.correct_keys((run_id, tid)) if tid else empty)
            entries[run_id].append(e)
    return _Loaded(runs, baseline_run, cases, cells, entries)


def _baseline_pool(
    entries: list[Entry], cases: _Cases
) -> tuple[list[BaselineCandidate], list[PoolMember]]:
    """Single-model targets of the baseline run with an outcome for every planned case."""
    pool = []
    listed = []
    for e in entries:
        t = e.target
        reason = baseline_refusal(
            kind=t.kind, planned=t.planned, with_outcome=e.with_outcome, cases=cases.keys.size
        )
        quality = e.quality
        listed.append(PoolMember(e.slug, t.kind, quality, t.subject_cost_usd, reason))
        if reason is None and quality is not None:
            pool.append(BaselineCandidate(e.slug, quality, e.subject_cost))
    return pool, listed


def _pick_baseline(
    loaded: _Loaded, baseline_target: str | None
) -> tuple[BaselineChoice, Entry, list[PoolMember]]:
    """The strongest single model of the baseline run, or the named one among those tied
    with it (never a weaker one, R5.1)."""
    run_id = loaded.baseline_run.pk
    if not loaded.cases.keys.size:
        # Every target "has a result for each" of no case: say what is true instead.
        raise ComparisonError(f"run {run_id} plans no case: there is nothing to compare")
    pool, listed = _baseline_pool(loaded.entries[run_id], loaded.cases)
    if not pool:
        raise ComparisonError(
            f"run {run_id} has no single-model target with a result for every "
            "planned case: there is no baseline"
        )
    choice = select_baseline(pool)
    if baseline_target is not None and baseline_target != choice.slug:
        if baseline_target not in choice.tied_slugs:
            raise ComparisonError(
                f"{baseline_target} is not among the strongest single models of run "
                f"{run_id} ({', '.join(choice.tied_slugs)}): the baseline is never "
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
    base = next(e for e in loaded.entries[run_id] if e.slug == choice.slug)
    return choice, base, listed


def _candidates(loaded: _Loaded, candidate_run_ids: list[int], base: Entry) -> list[Entry]:
    """Every target of the candidate runs except the baseline itself."""
    out = [
        e
        for run_id in candidate_run_ids
        for e in loaded.entries[run_id]
        if not (run_id == base.run.pk and e.slug == base.slug)
    ]
    if not out:
        raise ComparisonError("the candidate runs hold no target other than the baseline")
    return out


# What the total savings compare: the subject's and the judge's or user simulator's calls.
TOTAL_SPEND_WORDS = "total spend (subject and evaluation calls)"


def _savings(
    choice: BaselineChoice,
    candidate: Decimal | None,
    baseline: Decimal | None,
    what: str = "cost",
) -> Savings:
    """A savings rate, or why it is unknown (R5.3, R5.4), naming ``what`` is incomplete (the
    subject cost, or the total spend). The baseline's own incomplete cost is named as the
    baseline's, not as a tie's (the baseline is one of its tied models)."""
    if not choice.savings_known and baseline is not None:
        return Savings(None, "a tied strongest single model has incomplete cost")
    if candidate is None:
        return Savings(None, f"the candidate's {what} is incomplete")
    if baseline is None:
        return Savings(None, f"the baseline's {what} is incomplete")
    value = savings_pct(candidate, baseline)
    return Savings(value, None if value is not None else "the baseline cost is zero")


def _cache_neutral_savings(
    choice: BaselineChoice, candidate: Entry, baseline: Entry, tied: list[Entry]
) -> Savings:
    """The cache-neutral savings, its reason naming the cache-neutral cost (not the bill)
    and adding the report's account of why it is unknown: cells without a result, or calls
    whose receipt entry is missing, unusable or served by an unpriced model.

    It depends on cache-neutral costs only (issue 35 item 5): a baseline whose bill is unknown
    (cached tokens without a cached-input price) but whose cache-neutral cost is complete still
    has cache-neutral savings; the tie rule asks the same of every tied strongest model's
    cache-neutral cost, never of its bill."""
    if any(e.cache_neutral_cost is None for e in tied if e is not baseline):
        return Savings(None, "a tied strongest single model has incomplete cache-neutral cost")
    neutral_choice = replace(choice, savings_known=True)
    s = _savings(neutral_choice, candidate.cache_neutral_cost, baseline.cache_neutral_cost)
    for side, e in (("candidate", candidate), ("baseline", baseline)):
        if s.unknown_reason == f"the {side}'s cost is incomplete":
            detail = e.target.cache_neutral_unknown_reason
            why = f"the {side}'s cache-neutral cost is unknown" + (f": {detail}" if detail else "")
            return Savings(None, why)
    return s


def _savings_intervals(
    loaded: _Loaded, base: Entry, candidates: list[Entry], subject: list[Savings], alpha: float
) -> list[SavingsInterval | None]:
    """The bootstrap interval of each candidate's subject savings, per question, or None
    (unknown): never stated for a candidate whose point savings are unknown."""
    cases = loaded.cases
    costs = loaded.cells.case_costs(cases)
    base_costs = costs.get((base.run.pk, base.target_id or -1))
    out: list[SavingsInterval | None] = [None] * len(candidates)
    wanted = [
        (i, question_totals(c, cases.slots))
        for i, (e, s) in enumerate(zip(candidates, subject, strict=True))
        if s.pct is not None and (c := costs.get((e.run.pk, e.target_id or -1))) is not None
    ]
    if base_costs is None or not wanted:
        return out
    base_q = question_totals(base_costs, cases.slots)
    masks = cases.masks()
    # Kept under the address of their inputs (compare.bootstrap_memo): drawn once per inputs.
    intervals = savings_intervals(
        {b: base_q[m] for b, m in masks.items()},
        [{b: q[m] for b, m in masks.items()} for _, q in wanted],
        alpha=alpha,
    )
    for (i, _), interval in zip(wanted, intervals, strict=True):
        out[i] = interval
    return out


def _statistics(
    loaded: _Loaded,
    choice: BaselineChoice,
    base: Entry,
    candidates: list[Entry],
    alpha: float,
) -> list[CandidateResult]:
    """Per candidate: the paired difference per question against the baseline, its verdict
    (compare.verdict) and its savings (point and interval)."""
    cases = loaded.cases
    weights = _weights(loaded)
    masks = cases.masks()
    subject = [_savings(choice, e.subject_cost, base.subject_cost) for e in candidates]
    base_run = loaded.entries[loaded.baseline_run.pk]
    tied = [e for e in base_run if e.slug in choice.tied_slugs]
    intervals = _savings_intervals(loaded, base, candidates, subject, alpha)
    assert base.outcome is not None
    out = []
    for e, subject_savings, interval in zip(candidates, subject, intervals, strict=True):
        assert e.outcome is not None
        d = question_differences(e.outcome, base.outcome, cases.slots)
        unfinished = _unfinished(loaded, e)
        paired = paired_difference(
            {b: d[m] for b, m in masks.items()},
            weights,
            alpha,
            family_size=len(candidates),
            attempts=cases.slots,
        )
        out.append(
            CandidateResult(
                entry=e,
                paired=paired,
                cases=int(cases.keys.size),
                questions=int(cases.questions),
                attempts=cases.slots,
                without_result=int(cases.keys.size) - e.with_outcome,
                subject=subject_savings,
                total=_savings(choice, e.total_spend, base.total_spend, TOTAL_SPEND_WORDS),
                cache_neutral=_cache_neutral_savings(choice, e, base, tied),
                savings_interval=interval,
                verdict=comparison_verdict(
                    paired, e.run, loaded.baseline_run, unfinished=unfinished
                ),
            )
        )
    return out


def savings_sums_keep(*, run_id: int) -> None:
    """The run-end hook (`runs.ledger.hooks`, after the case figures and the packed cases):
    keep the savings bootstrap's resampled sums of each of the ended run's targets whose
    per-question costs are known (`compare.bootstrap_memo`), the inputs a comparison of the run
    would draw them from — so the first comparison of ended runs draws nothing (1–2 s at
    100,000 questions). For a run no comparison may read, only its packed cases; idempotent."""
    runs = _load_runs(run_id, [])
    # Every ended run's cases packed, comparable or not: the Compare page's offer reads its
    # kept fingerprint, and `runs_without_plan_cases` (the backlog) asks for the row.
    plans = plan_cases(list(runs.values()))
    if run_comparison_problems(runs[run_id]):
        return
    loaded = _load(runs, plans[run_id], run_id)
    masks = loaded.cases.masks()
    if not masks:
        return
    sides = [
        {b: q[m] for b, m in masks.items()}
        for pair, costs in loaded.cells.case_costs(loaded.cases).items()
        if pair[0] == run_id
        for q in [question_totals(costs, loaded.cases.slots)]
    ]
    if sides:
        resampled_sums_kept(sides, draws=DEFAULT_BOOTSTRAP_DRAWS, seed=DEFAULT_BOOTSTRAP_SEED)


def _unfinished(loaded: _Loaded, e: Entry) -> Unfinished:
    """The candidate's cases that never ended (pending, running, cancelled: no outcome), and
    how far Δ would rise were each of them right — each case weighs ŵ_b / (n_b · attempts) in
    Δ, as in `paired_difference`. The baseline has an outcome for every case (its pool's
    rule), so only the candidate's side can move."""
    cases = loaded.cases
    tid = e.target_id
    pair = (e.run.pk, tid) if tid is not None else None
    ended = cases.outcome(loaded.cells.ended_keys(pair) if pair else np.zeros(0, np.int64))
    never = question_totals(1 - ended, cases.slots)  # per question: attempts without outcome
    masks = cases.masks()
    weights = renormalised_weights({b: never[m] for b, m in masks.items()}, _weights(loaded))
    rise = sum(
        (
            w * Fraction(int(never[masks[b]].sum()), int(masks[b].sum()) * cases.slots)
            for b, w in weights.items()
        ),
        Fraction(0),
    )
    return Unfinished(cases=int((1 - ended).sum()), rise=rise)


def _weights(loaded: _Loaded) -> dict[str, Fraction]:
    benchmarks = manifest_without_cases(loaded.baseline_run)["benchmarks"]
    return {b: Fraction(benchmarks[b]["weight"]) for b in loaded.cases.benchmarks}


def comparison_compute(
    *,
    baseline_run_id: int,
    candidate_run_ids: Sequence[int],
    baseline_target: str | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> Comparison:
    """The typed comparison behind :func:`comparison_build` (same arguments and errors)."""
    if not candidate_run_ids:
        raise ComparisonError("name at least one candidate run")
    runs = _load_runs(baseline_run_id, candidate_run_ids)
    plans = plan_cases(list(runs.values()))
    kept, refused = _check_compatibility(runs, plans, baseline_run_id, candidate_run_ids)
    loaded = _load(runs, plans[baseline_run_id], baseline_run_id)
    choice, base, pool = _pick_baseline(loaded, baseline_target)
    candidates = _candidates(loaded, kept, base)
    results = _statistics(loaded, choice, base, candidates, alpha)
    baseline_run = loaded.baseline_run
    masks = loaded.cases.masks()
    return Comparison(
        baseline_run=baseline_run,
        base=base,
        choice=choice,
        pool=pool,
        alpha=alpha,
        weights={b: w for b, w in _weights(loaded).items() if b in masks},
        split=run_split(baseline_run),
        margins={frozen_margin(e.run) for e in candidates},
        candidates=results,
        refused=refused,
        execution_differences=[
            RunDifferences(runs[pk], found)
            for pk in kept
            if (found := execution_differences(baseline_run, runs[pk]))
        ],
    )


def comparison_build(
    *,
    baseline_run_id: int,
    candidate_run_ids: Sequence[int],
    baseline_target: str | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> dict[str, Any]:
    """Compare every target of the candidate runs with the strongest single model of the
    baseline run, on identical cases (R5, R6, R11). JSON-serialisable: money and exact
    fractions are strings, unknown is None.

    ``baseline_target`` may name one of the tied strongest single models; any other choice
    is refused, because the baseline is never weaker than the strongest (R5.1). A candidate
    run may be the baseline run itself (its other targets are then candidates).

    An incompatible candidate run is left out and listed under ``refused`` with its
    differences (the page, the API and the CLI compare the rest); when every candidate run is
    refused, :class:`CandidatesRefused` (an IncomparableRuns) lists them all. Raises
    :class:`ComparisonError` otherwise (no baseline, unknown run).
    """
    return comparison_compute(
        baseline_run_id=baseline_run_id,
        candidate_run_ids=candidate_run_ids,
        baseline_target=baseline_target,
        alpha=alpha,
    ).as_dict()


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
