"""Statistics for reports and comparisons (DESIGN §6; SPEC R4, R5, R6, R11.5).

Quality values that decide something (the baseline, a tie) are exact ``Fraction`` s. Interval
bounds are floats: they come from square roots and quantiles and only ever get compared with
0 or a margin. Money stays ``Decimal``.

The question is the statistical unit (DESIGN §6, issue 21): with several attempt slots per
question, a question's score is the mean over its attempts, every n and n_b counts questions,
never cells, and the bootstrap resamples questions with all their attempts. An interval never
narrows because the same question was asked again. docs/statistics.md gives every formula.

None of the intervals here covers the uncertainty of having picked the strongest baseline, of
tuning choices, or of data contamination (R6.3); the UI has to say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_BOOTSTRAP_DRAWS",
    "DEFAULT_BOOTSTRAP_SEED",
    "Z_95",
    "BaselineCandidate",
    "BaselineChoice",
    "BenchmarkPaired",
    "BootstrapInterval",
    "NonInferiority",
    "PairedResult",
    "accuracy",
    "hoeffding_half_width",
    "paired_difference",
    "paired_differences",
    "question_differences",
    "question_totals",
    "renormalised_weights",
    "savings_pct",
    "select_baseline",
    "stratified_bootstrap_interval",
    "weighted_quality",
    "wilson_interval",
]

Z_95 = 1.959963984540054
DEFAULT_ALPHA = 0.05
DEFAULT_BOOTSTRAP_DRAWS = 2000
# sr-bench's default seed, so a diagnostic interval is reproducible run to run.
DEFAULT_BOOTSTRAP_SEED = 20260918

DiffArray = npt.NDArray[np.integer]


# --------------------------------------------------------------------------------------------
# Accuracy and weighted quality


def accuracy(correct: int, planned: int) -> Fraction:
    """Correct over *planned* cases: a failed or missing case counts as wrong."""
    if planned <= 0 or not 0 <= correct <= planned:
        raise ValueError(f"need 0 <= correct <= planned and planned > 0: {correct}/{planned}")
    return Fraction(correct, planned)


def wilson_interval(correct: int | Fraction, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """Wilson score interval for a proportion over ``n`` questions; None when there are none.

    ``correct`` is the sum of the question scores: with one attempt per question it is the
    number of correct questions (the classic binomial Wilson interval); with several attempts
    each question scores the mean over its attempts and ``correct`` is the exact ``Fraction``
    Σ_q s_q, so p̂ = correct / n is the mean question score and n counts questions, never
    cells (the question is the unit, DESIGN §6). Repeated attempts therefore never narrow it.

    Unlike the normal approximation it stays inside [0, 1] and has non-zero width at 0/n and
    n/n, which is exactly where small benchmark samples live.
    """
    if n < 0 or not 0 <= correct <= max(n, 0):
        raise ValueError(f"need 0 <= correct <= n: {correct}/{n}")
    if n == 0:
        return None
    # Both spellings round the exact quotient once, so an integer count gives the same float
    # as before and a Fraction sum of question scores is as exact as a float can be.
    p = correct / n if isinstance(correct, int) else float(Fraction(correct) / n)
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At 0/n and n/n the bound is exactly 0 or 1; floating-point cancellation would otherwise
    # give 0.9999999999999999 or a tiny negative number.
    lower = 0.0 if correct == 0 else max(0.0, centre - half)
    upper = 1.0 if correct == n else min(1.0, centre + half)
    return lower, upper


def renormalised_weights(
    benchmarks: Iterable[str], weights: Mapping[str, Fraction]
) -> dict[str, Fraction]:
    """The weights of the benchmarks present, scaled to sum to 1 (a weighted subset average).

    Every present benchmark must have a positive weight: silently weighting an unknown
    benchmark at 0 would hide it from the score.
    """
    present = list(dict.fromkeys(benchmarks))
    if not present:
        raise ValueError("no benchmarks")
    missing = [b for b in present if b not in weights]
    if missing:
        raise ValueError(f"no weight for benchmark(s): {', '.join(sorted(missing))}")
    chosen = {b: Fraction(weights[b]) for b in present}
    if any(w <= 0 for w in chosen.values()):
        raise ValueError("benchmark weights must be positive")
    total = sum(chosen.values(), Fraction(0))
    return {b: w / total for b, w in chosen.items()}


def weighted_quality(
    acc_by_benchmark: Mapping[str, Fraction], weights: Mapping[str, Fraction]
) -> Fraction:
    """Σ w_b · acc_b over the benchmarks given, with weights renormalised over them.

    With all nine benchmarks and the R4.1 weights (which sum to 1) this is the sr-bench score;
    with fewer it is the "selected-benchmark" weighted subset average, which callers must label
    as such (R4.2).
    """
    normalised = renormalised_weights(acc_by_benchmark, weights)
    return sum((normalised[b] * Fraction(acc) for b, acc in acc_by_benchmark.items()), Fraction(0))


# --------------------------------------------------------------------------------------------
# Paired differences


def paired_differences(
    candidate_correct: npt.ArrayLike, baseline_correct: npt.ArrayLike
) -> npt.NDArray[np.int8]:
    """Per case d_i = c_i − b_i ∈ {−1, 0, 1}, the two arrays aligned on identical cases."""
    c = np.asarray(candidate_correct)
    b = np.asarray(baseline_correct)
    if c.shape != b.shape or c.ndim != 1:
        raise ValueError("candidate and baseline must be 1-D arrays over the same cases")
    for name, arr in (("candidate", c), ("baseline", b)):
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} outcomes must be 0/1 or booleans")
    return c.astype(np.int8) - b.astype(np.int8)


def question_totals(per_attempt: npt.ArrayLike, attempts: int) -> npt.NDArray[np.generic]:
    """Sum each question's ``attempts`` consecutive attempt values: the array is ordered by
    question, then attempt slot, as a plan's cases are. Integers stay integers; a NaN (an
    unknown cost) makes its question's total NaN."""
    arr = np.asarray(per_attempt)
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    if arr.ndim != 1 or arr.size % attempts:
        raise ValueError(f"a 1-D array of whole questions of {attempts} attempts is needed")
    if attempts == 1:
        return arr
    total: npt.NDArray[np.generic] = arr.reshape(-1, attempts).sum(axis=1)
    return total


def question_differences(
    candidate_correct: npt.ArrayLike, baseline_correct: npt.ArrayLike, attempts: int = 1
) -> npt.NDArray[np.int64]:
    """Per question D_q = Σ_attempts (c − b) ∈ [−attempts, attempts]: ``attempts`` times the
    difference of the two question scores (each the mean over the question's attempts). The
    arrays hold one entry per case, ordered by question then slot, aligned on identical
    cases. Pass the result to :func:`paired_difference` with the same ``attempts``."""
    per_case = paired_differences(candidate_correct, baseline_correct)
    return question_totals(per_case.astype(np.int64), attempts)


def _checked_diffs(
    diffs_by_benchmark: Mapping[str, npt.ArrayLike], attempts: int = 1
) -> dict[str, DiffArray]:
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    checked: dict[str, DiffArray] = {}
    for benchmark, raw in diffs_by_benchmark.items():
        arr = np.asarray(raw)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"{benchmark}: differences must be a non-empty 1-D array")
        if (
            arr.dtype == np.bool_
            or not np.issubdtype(arr.dtype, np.integer)
            or (np.abs(arr) > attempts).any()
        ):
            raise ValueError(
                f"{benchmark}: per-question differences must be integers in "
                f"[-{attempts}, {attempts}] (the sum over {attempts} attempt(s))"
            )
        checked[benchmark] = arr.astype(np.int64)
    if not checked:
        raise ValueError("no benchmarks to compare")
    return checked


def hoeffding_half_width(
    n_by_benchmark: Mapping[str, int], weights: Mapping[str, Fraction], alpha: float
) -> float:
    """r = sqrt(2 · ln(2/α) · Σ_b w_b² / n_b) for per-question differences in [−1, 1].

    n_b is the number of *questions* of benchmark b (the question is the unit: a question's
    difference is the mean over its attempts, still in [−1, 1]). Hoeffding with each
    question's term ranging over 2·w_b/n_b. It depends only on the sample
    sizes, never on the observed differences, so it cannot collapse to zero width when every
    pair is identical (R6.1). Weights are renormalised over the benchmarks given.
    """
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    if any(n <= 0 for n in n_by_benchmark.values()):
        raise ValueError("every benchmark needs at least one paired question")
    normalised = renormalised_weights(n_by_benchmark, weights)
    # Σ w²/n is summed exactly; only the final square root is floating point.
    variance_term = float(
        sum((normalised[b] ** 2 / n for b, n in n_by_benchmark.items()), Fraction(0))
    )
    return math.sqrt(2 * math.log(2 / alpha) * variance_term)


@dataclass(frozen=True, slots=True)
class BootstrapInterval:
    lower: float
    upper: float
    alpha: float
    draws: int
    seed: int


def stratified_bootstrap_interval(
    diffs_by_benchmark: Mapping[str, npt.ArrayLike],
    weights: Mapping[str, Fraction],
    alpha: float = DEFAULT_ALPHA,
    *,
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    attempts: int = 1,
) -> BootstrapInterval:
    """Percentile bootstrap of Δ, resampling questions with replacement within each benchmark.

    ``diffs_by_benchmark`` holds one entry per question, D_q = Σ over its ``attempts``
    attempts of (c − b), as :func:`question_differences` makes: a question is resampled with
    all its attempts together (the question is the unit). A diagnostic only (R6.2): on a small
    sample with identical pairs it is [0, 0], which proves nothing. Because D_q takes only the
    2·attempts + 1 values −attempts … attempts, resampling n_b questions with replacement is
    exactly a multinomial draw of how many of each value the resample holds, so each benchmark
    costs ``draws × (2·attempts + 1)`` numbers instead of ``draws × n_b``. Benchmarks are drawn
    in sorted order so the same seed gives the same interval whatever the dict order.
    Quantiles use numpy's default (linear) interpolation.
    """
    if draws < 1:
        raise ValueError("draws must be at least 1")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    diffs = _checked_diffs(diffs_by_benchmark, attempts)
    normalised = renormalised_weights(diffs, weights)
    rng = np.random.default_rng(seed)
    values = np.arange(-attempts, attempts + 1, dtype=np.int64)
    estimates = np.zeros(draws, dtype=np.float64)
    for benchmark in sorted(diffs):
        d = diffs[benchmark]
        n = d.size
        shares = np.array([np.count_nonzero(d == v) for v in values], dtype=np.float64) / n
        counts = rng.multinomial(n, shares, size=draws)
        # Σ_v v·count_v is an exact integer; one division gives the resample's mean score gap.
        resampled_means = (counts @ values) / (n * attempts)
        estimates += float(normalised[benchmark]) * resampled_means
    lower, upper = np.quantile(estimates, [alpha / 2, 1 - alpha / 2])
    return BootstrapInterval(float(lower), float(upper), alpha, draws, seed)


def clipped_to_unit(lower: float, upper: float) -> tuple[float, float]:
    """An interval of a difference of proportions as displayed: its bounds clipped to [−1, 1]
    (the Hoeffding bounds can reach past them on small samples; verdicts use them unclipped)."""
    return max(lower, -1.0), min(upper, 1.0)


@dataclass(frozen=True, slots=True)
class BenchmarkPaired:
    benchmark: str
    n: int  # questions (not cells)
    weight: Fraction  # renormalised over the benchmarks compared
    mean_difference: Fraction
    wins: int  # questions where the candidate's score is above the baseline's
    losses: int  # questions where it is below
    ties: int  # questions with equal scores


@dataclass(frozen=True, slots=True)
class NonInferiority:
    """Quality parity claim against a margin fixed before looking at the data (R5.5): the
    candidate is non-inferior when the interval's lower bound is above −margin."""

    margin: float
    lower: float
    non_inferior: bool


@dataclass(frozen=True, slots=True)
class PairedResult:
    """Candidate minus baseline on identical questions.

    ``lower``/``upper`` are the Hoeffding interval exactly as computed (it can reach past
    [−1, 1] on small samples); ``display_lower``/``display_upper`` are clipped to [−1, 1] for
    charts and ``clipped`` says whether that changed anything. Verdicts use the unclipped bounds.
    The ``family_*`` fields are the Bonferroni interval at α/k for k candidates compared
    against the same baseline; ``family_improvement`` is the claim to make when picking a
    winner among them.
    """

    benchmarks: tuple[BenchmarkPaired, ...]
    delta: Fraction
    micro_delta: Fraction
    alpha: float
    half_width: float
    lower: float
    upper: float
    display_lower: float
    display_upper: float
    clipped: bool
    improvement: bool
    not_an_improvement_reason: str | None
    family_size: int
    family_alpha: float
    family_half_width: float
    family_lower: float
    family_upper: float
    family_improvement: bool
    non_inferiority: NonInferiority | None
    bootstrap: BootstrapInterval | None

    @property
    def wins(self) -> int:
        return sum(b.wins for b in self.benchmarks)

    @property
    def losses(self) -> int:
        return sum(b.losses for b in self.benchmarks)

    @property
    def ties(self) -> int:
        return sum(b.ties for b in self.benchmarks)


def _per_benchmark(
    diffs: dict[str, DiffArray], normalised: Mapping[str, Fraction], attempts: int
) -> list[BenchmarkPaired]:
    """Per benchmark: questions, renormalised weight, exact mean difference, and wins, losses
    and ties by the sign of each question's difference."""
    out = []
    for benchmark, d in diffs.items():
        wins = int(np.count_nonzero(d > 0))
        losses = int(np.count_nonzero(d < 0))
        n = int(d.size)
        mean = Fraction(int(d.sum()), n * attempts)
        out.append(
            BenchmarkPaired(
                benchmark, n, normalised[benchmark], mean, wins, losses, n - wins - losses
            )
        )
    return out


def paired_difference(
    diffs_by_benchmark: Mapping[str, npt.ArrayLike],
    weights: Mapping[str, Fraction],
    alpha: float = DEFAULT_ALPHA,
    *,
    margin: float | None = None,
    family_size: int = 1,
    bootstrap_draws: int | None = DEFAULT_BOOTSTRAP_DRAWS,
    bootstrap_seed: int = DEFAULT_BOOTSTRAP_SEED,
    attempts: int = 1,
) -> PairedResult:
    """Paired quality difference with its conservative interval (R6, R11.5).

    ``diffs_by_benchmark`` holds one integer per *question*, D_q = Σ over its ``attempts``
    attempts of (c − b) (:func:`question_differences`); the question's difference is
    d_q = D_q / attempts ∈ [−1, 1], the candidate's mean score on it minus the baseline's.
    Δ = Σ_b w_b · mean_{q∈b}(d_q), with the weights renormalised over the benchmarks present
    (the same subset rule as :func:`weighted_quality`, so Δ equals the difference of the two
    weighted qualities). n_b, the Hoeffding radius, the family-wise interval and the
    bootstrap all count questions, so asking a question again never narrows an interval.
    Wins, losses and ties count questions by the sign of d_q. The micro Δ pools every
    question with equal weight. ``bootstrap_draws`` None skips the diagnostic bootstrap.
    With ``attempts`` = 1 a question is a case and D_q = c − b ∈ {−1, 0, 1}.
    """
    if family_size < 1:
        raise ValueError("family_size must be at least 1")
    if margin is not None and not 0 <= margin <= 2:
        raise ValueError("the non-inferiority margin must be in [0, 2]")
    diffs = _checked_diffs(diffs_by_benchmark, attempts)
    normalised = renormalised_weights(diffs, weights)
    per_benchmark = _per_benchmark(diffs, normalised, attempts)
    delta = sum((b.weight * b.mean_difference for b in per_benchmark), Fraction(0))
    total_n = sum(b.n for b in per_benchmark)
    total_sum = sum(int(d.sum()) for d in diffs.values())

    sizes = {b.benchmark: b.n for b in per_benchmark}
    half_width = hoeffding_half_width(sizes, normalised, alpha)
    point = float(delta)
    lower, upper = point - half_width, point + half_width
    display_lower, display_upper = clipped_to_unit(lower, upper)

    family_alpha = alpha / family_size
    family_half = hoeffding_half_width(sizes, normalised, family_alpha)

    improvement = lower > 0
    reason = None
    if delta > 0 and not improvement:
        reason = (
            f"the point estimate is positive but the {1 - alpha:.0%} interval "
            f"[{lower:+.4f}, {upper:+.4f}] includes zero: not an improvement"
        )
    non_inferiority = None if margin is None else NonInferiority(margin, lower, lower > -margin)
    bootstrap = None
    if bootstrap_draws is not None:
        bootstrap = stratified_bootstrap_interval(
            diffs, normalised, alpha, draws=bootstrap_draws, seed=bootstrap_seed, attempts=attempts
        )

    return PairedResult(
        benchmarks=tuple(per_benchmark),
        delta=delta,
        micro_delta=Fraction(total_sum, total_n * attempts),
        alpha=alpha,
        half_width=half_width,
        lower=lower,
        upper=upper,
        display_lower=display_lower,
        display_upper=display_upper,
        clipped=(display_lower, display_upper) != (lower, upper),
        improvement=improvement,
        not_an_improvement_reason=reason,
        family_size=family_size,
        family_alpha=family_alpha,
        family_half_width=family_half,
        family_lower=point - family_half,
        family_upper=point + family_half,
        family_improvement=point - family_half > 0,
        non_inferiority=non_inferiority,
        bootstrap=bootstrap,
    )


# --------------------------------------------------------------------------------------------
# Baseline and savings


class BaselineCandidateLike(Protocol):
    @property
    def slug(self) -> str: ...

    @property
    def quality(self) -> Fraction: ...

    @property
    def subject_cost(self) -> Decimal | None: ...


@dataclass(frozen=True, slots=True)
class BaselineCandidate:
    slug: str
    quality: Fraction
    subject_cost: Decimal | None


@dataclass(frozen=True, slots=True)
class BaselineChoice:
    """The strongest single model (R5.1–R5.3) and every model tied with it."""

    slug: str
    quality: Fraction
    subject_cost: Decimal | None
    tied_slugs: tuple[str, ...]  # includes ``slug``; sorted
    savings_known: bool

    def savings_pct(self, candidate_cost: Decimal | None) -> Decimal | None:
        """Savings against this baseline, unknown when any tied baseline's cost is unknown."""
        if not self.savings_known:
            return None
        return savings_pct(candidate_cost, self.subject_cost)


def select_baseline(candidates: Iterable[BaselineCandidateLike]) -> BaselineChoice:
    """Highest exact weighted quality; on an exact tie, a model with known cost before one
    without, then the lowest cost, then the slug (the fixed target-ID order)."""
    pool = list(candidates)
    if not pool:
        raise ValueError("no single-model candidate for a baseline")
    slugs = [c.slug for c in pool]
    if len(set(slugs)) != len(slugs):
        raise ValueError("baseline candidates must have distinct slugs")
    best_quality = max(Fraction(c.quality) for c in pool)
    tied = [c for c in pool if Fraction(c.quality) == best_quality]

    def tie_key(c: BaselineCandidateLike) -> tuple[bool, Decimal, str]:
        cost = c.subject_cost
        return (cost is None, cost if cost is not None else Decimal(0), c.slug)

    chosen = min(tied, key=tie_key)
    return BaselineChoice(
        slug=chosen.slug,
        quality=best_quality,
        subject_cost=chosen.subject_cost,
        tied_slugs=tuple(sorted(c.slug for c in tied)),
        savings_known=all(c.subject_cost is not None for c in tied),
    )


def savings_pct(candidate_cost: Decimal | None, baseline_cost: Decimal | None) -> Decimal | None:
    """100 × (1 − candidate / baseline); None when either cost is unknown or the baseline cost
    is 0 (no rate can be stated against a free baseline). Negative means the candidate costs
    more. Not quantised: display code rounds."""
    if candidate_cost is None or baseline_cost is None:
        return None
    if candidate_cost < 0 or baseline_cost < 0:
        raise ValueError("costs cannot be negative")
    if baseline_cost == 0:
        return None
    with localcontext() as ctx:
        ctx.prec = 34
        return 100 * (1 - candidate_cost / baseline_cost)
