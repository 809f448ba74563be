"""The diagnostic interval of subject-cost savings: a stratified paired bootstrap (R5.3).

Savings are 100 × (1 − Σ candidate / Σ baseline) over the cost of each *question* (its
attempts' costs summed, :func:`srbench.stats.question_totals`). Questions are resampled with
replacement within each benchmark, and the same drawn questions are applied to both sides, so
the pair (baseline cost, candidate cost) of one question stays together: the two costs are
correlated through the question's length.

The resamples depend only on the benchmarks' sizes, the draws and the seed — never on the
costs — and every resampled sum is an exact integer of whole 1e-10 USD. So the work splits in
two (issue 38 item 5): each side's vector of resampled sums (:func:`resampled_cost_sums`, the
draws: 1–2 s at 100,000 questions) and the interval of a pair from its two vectors
(:func:`savings_interval_from_sums`, microseconds). A side's sums are the same numbers whatever
it is paired with, so they can be kept per side (`compare.bootstrap_memo`) and a comparison of
runs whose sums were kept at run end draws nothing; the interval is bit for bit the one a
single computation gives (tests/compare/test_savings_interval.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from srbench.stats import DEFAULT_ALPHA, DEFAULT_BOOTSTRAP_DRAWS, DEFAULT_BOOTSTRAP_SEED

__all__ = [
    "COST_UNITS_PER_USD",
    "SAVINGS_BOOTSTRAP_VERSION",
    "SAVINGS_INTERVAL_LABEL",
    "SavingsInterval",
    "resampled_cost_sums",
    "savings_bootstrap_interval",
    "savings_bootstrap_intervals",
    "savings_interval_from_sums",
]

# Resampled case indices held at once (about 32 MB of int64).
BOOTSTRAP_BLOCK_ELEMENTS = 1 << 22
# The savings bootstrap's unit of cost: 1e-10 USD. The ledger keeps every digit (18 places,
# issue 35 item 5); this diagnostic interval resamples float64 per-question costs, and whole
# units this small keep its integer sums exact (below 2**53 units, about 900,000 USD, in
# float64; past that the sums are done in int64).
COST_UNITS_PER_USD = 10**10
# The algorithm, as kept sums are addressed (compare.bootstrap_memo): change it whenever the
# same costs, draws and seed could give other resampled sums.
SAVINGS_BOOTSTRAP_VERSION = 2

SAVINGS_INTERVAL_LABEL = "diagnostic: stratified paired bootstrap of the cost ratio"

Costs = Mapping[str, npt.ArrayLike]


@dataclass(frozen=True, slots=True)
class SavingsInterval:
    lower: float  # savings %, 100 × (1 − candidate / baseline)
    upper: float
    alpha: float
    draws: int
    seed: int
    label: str = SAVINGS_INTERVAL_LABEL


def savings_bootstrap_interval(
    baseline_costs_by_benchmark: Costs,
    candidate_costs_by_benchmark: Costs,
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    alpha: float = DEFAULT_ALPHA,
) -> SavingsInterval | None:
    """Percentile bootstrap of subject-cost savings, 100 × (1 − Σ candidate / Σ baseline).

    The arrays hold one cost per question, benchmark by benchmark, paired by position.
    Savings are a ratio of *sums*, not a mean of per-question ratios, matching the point
    estimate. Benchmarks are drawn in sorted order so one seed gives one interval whatever the
    dict order. A diagnostic only: it says how much the savings depend on which questions
    happened to be sampled, nothing about prices or other workloads.

    None (unknown) when any cost is unknown (None or NaN) — an interval over the known part
    would pass a partial sum off as the whole — when the baseline's total cost is 0, or when
    some resample draws only free baseline questions, so that its ratio does not exist.
    """
    (interval,) = savings_bootstrap_intervals(
        baseline_costs_by_benchmark,
        [candidate_costs_by_benchmark],
        draws=draws,
        seed=seed,
        alpha=alpha,
    )
    return interval


def savings_bootstrap_intervals(
    baseline_costs_by_benchmark: Costs,
    candidates_costs_by_benchmark: Sequence[Costs],
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    alpha: float = DEFAULT_ALPHA,
) -> list[SavingsInterval | None]:
    """:func:`savings_bootstrap_interval` of several candidates against one baseline, in order:
    the resamples are drawn once for all of them, and every candidate gets the interval a lone
    call gives (the sums are exact)."""
    _check_alpha(alpha)
    sums = resampled_cost_sums(
        [baseline_costs_by_benchmark, *candidates_costs_by_benchmark], draws=draws, seed=seed
    )
    return [
        savings_interval_from_sums(sums[0], s, alpha=alpha, draws=draws, seed=seed)
        for s in sums[1:]
    ]


def savings_interval_from_sums(
    baseline: npt.NDArray[np.int64] | None,
    candidate: npt.NDArray[np.int64] | None,
    *,
    alpha: float,
    draws: int,
    seed: int,
) -> SavingsInterval | None:
    """The percentile interval of a pair from both sides' :func:`resampled_cost_sums` (drawn
    with the same draws and seed over the same questions); None when either side is unknown or
    a resample's baseline sum is zero (which a zero baseline total always gives)."""
    _check_alpha(alpha)
    if baseline is None or candidate is None:
        return None
    if baseline.shape != (draws,) or candidate.shape != (draws,):
        raise ValueError(f"resampled sums must hold {draws} draws")
    if (baseline == 0).any():
        return None
    savings = 100.0 * (1.0 - candidate.astype(np.float64) / baseline.astype(np.float64))
    lower, upper = np.quantile(savings, [alpha / 2, 1 - alpha / 2])
    return SavingsInterval(float(lower), float(upper), alpha, draws, seed)


def resampled_cost_sums(
    sides: Sequence[Costs],
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> list[npt.NDArray[np.int64] | None]:
    """Per side (a cost per question, benchmark by benchmark; every side covers the same
    benchmarks with the same number of questions), the exact sum of its costs in each of
    `draws` stratified resamples, in whole 1e-10 USD; None for a side with an unknown cost.

    One generator per seed, benchmarks in sorted order, the same resamples for every side: a
    side's sums do not depend on the other sides given with it, so they may be kept per side.
    """
    if draws < 1:
        raise ValueError("draws must be at least 1")
    if not sides or not sides[0]:
        raise ValueError("no benchmarks")
    benchmarks = sorted(sides[0])
    for side in sides[1:]:
        if set(side) != set(benchmarks):
            raise ValueError("baseline and candidate must cover the same benchmarks")
    columns: dict[str, list[npt.NDArray[np.float64]]] = {b: [] for b in benchmarks}
    for b in benchmarks:
        for side in sides:
            size = columns[b][0].size if columns[b] else None
            columns[b].append(_cost_array(b, side[b], size))
    known = [
        j for j in range(len(sides)) if not any(np.isnan(columns[b][j]).any() for b in benchmarks)
    ]
    out: list[npt.NDArray[np.int64] | None] = [None] * len(sides)
    if not known:
        return out
    units = [
        np.column_stack([np.rint(columns[b][j] * COST_UNITS_PER_USD) for j in known])
        for b in benchmarks
    ]
    sums = _resampled_sums(np.random.default_rng(seed), units, draws)
    for k, j in enumerate(known):
        out[j] = np.ascontiguousarray(sums[:, k])
    return out


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")


def _cost_array(benchmark: str, raw: npt.ArrayLike, size: int | None) -> npt.NDArray[np.float64]:
    # Casting to float64 turns None into NaN, so one NaN test catches both spellings of
    # unknown; Decimals become floats, enough for a diagnostic interval.
    costs = np.asarray(raw, dtype=np.float64)
    if costs.ndim != 1 or costs.size == 0:
        raise ValueError(f"{benchmark}: costs must be a non-empty 1-D array")
    if size is not None and costs.size != size:
        raise ValueError(f"{benchmark}: baseline and candidate must be paired on cases")
    if (costs < 0).any():
        raise ValueError("costs cannot be negative")
    return costs


def _resampled_sums(
    rng: np.random.Generator, units: list[npt.NDArray[np.float64]], draws: int
) -> npt.NDArray[np.int64]:
    """Per resample, the exact sum of each cost column (whole units), resampling each block of
    `units` (one per benchmark, in order; rows are questions) with replacement `draws` times.

    The resamples are drawn a block of rows at a time: the generator's stream is the same as
    one draw of (draws, n) (tests/compare/test_savings_interval.py checks it), and a block stays
    in cache where the whole (draws, n) matrix took gigabytes at 100,000 questions. Each block's
    indices become per-question counts, so every column's sums are one matrix product; float64
    products and sums of integers below 2**53 are exact in any order, so a column's sums never
    depend on the other columns nor on the blocking."""
    largest = sum(u.max(axis=0) * u.shape[0] for u in units)
    if largest.max() >= 2**63:
        raise ValueError("costs too large to resample exactly")
    in_float = bool(largest.max() < 2**53)
    sums = np.zeros((draws, units[0].shape[1]), dtype=np.int64)
    for block in units:
        n = block.shape[0]
        exact = block.astype(np.int64)  # the int64 path's weights (past 2**53 units)
        rows = max(1, BOOTSTRAP_BLOCK_ELEMENTS // n)
        for start in range(0, draws, rows):
            stop = min(start + rows, draws)
            idx = rng.integers(0, n, size=(stop - start, n))
            # counts[d, i]: how often resample d drew question i: its sum is counts @ costs.
            idx += (np.arange(stop - start, dtype=np.int64) * n)[:, None]
            counts = np.bincount(idx.ravel(), minlength=(stop - start) * n).reshape(-1, n)
            if in_float:
                sums[start:stop] += (counts.astype(np.float64) @ block).astype(np.int64)
            else:
                sums[start:stop] += counts @ exact
    return sums
