"""A comparison's typed result and its one edge to text (issue 24).

`compare.services` computes a :class:`Comparison`: exact fractions for qualities and
differences, Decimal for money and savings rates, None for unknown. Text appears only here,
in :meth:`Comparison.as_dict` — the JSON the API, the page, the CLI and the exports read —
and in the fixed statements every comparison carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from compare.compatibility import Difference
from compare.verdict import (
    RULE,
    Verdict,
    frozen_margin,
    interval_shown,
    lower_shown,
    margin_terms,
    run_split,
)
from datasets.provenance import UNKNOWN
from runs.models import CELL_OUTCOMES, Run
from runs.reporting.official_metrics import NOTE as OFFICIAL_NOTE
from runs.reporting.official_metrics import official_metrics
from runs.reporting.report_types import Report, TargetReport
from srbench.figures_text import level_text
from srbench.money import money_text
from srbench.savings_bootstrap import SavingsInterval
from srbench.stats import BaselineChoice, PairedResult, clipped_to_unit

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
    "verdict": RULE,
    "official": OFFICIAL_NOTE,
}

BASELINE_RULE = (
    "strongest single model by exact weighted quality on the identical complete case set; "
    "ties: complete and lowest subject cost, then target slug"
)


# A savings rate is computed in Decimal from the exact costs, so it is written with the same
# exact-text rule as money (never through a float).
_pct = money_text


@dataclass
class Entry:
    """One (run, target) taking part: its run's typed report and its target's block of it
    (exact values), and its per-case outcomes."""

    run: Run
    report: Report
    target: TargetReport
    target_id: int | None
    outcome: npt.NDArray[np.int8] | None = None
    states: dict[str, int] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return self.target.slug

    @property
    def label(self) -> str:
        return f"run {self.run.pk} / {self.slug}"

    @property
    def quality(self) -> Fraction | None:
        return self.target.score.exact

    @property
    def with_outcome(self) -> int:
        """Cells with an outcome (runs.models.CELL_OUTCOMES); the rest are without a result."""
        return sum(self.states.get(status, 0) for status in CELL_OUTCOMES)

    @property
    def provenance(self) -> dict[str, str]:
        """Per benchmark: where its questions came from (`datasets.provenance`)."""
        return {b: row.provenance for b, row in self.target.benchmarks.items()}

    @property
    def official(self) -> list[dict[str, Any]]:
        """The benchmarks' official scorers (`runs.reporting.official_metrics`), named apart from the
        quality: never part of it, of Δ or of the verdict (issue 35 item 4)."""
        section = self.target.official
        return official_metrics(None if section is None else section.to_doc())

    @property
    def subject_cost(self) -> Decimal | None:
        return self.target.subject_cost_usd

    @property
    def total_spend(self) -> Decimal | None:
        return self.target.total_spend_usd

    @property
    def cache_neutral_cost(self) -> Decimal | None:
        return self.target.cache_neutral_cost_usd


@dataclass(frozen=True)
class Savings:
    """A savings rate in percent (exact), or None with the reason it is unknown."""

    pct: Decimal | None
    unknown_reason: str | None


@dataclass(frozen=True)
class PoolMember:
    """A target of the baseline run, and whether it may be the baseline."""

    slug: str
    kind: str
    quality: Fraction | None
    subject_cost_usd: Decimal | None
    reason: str | None  # None: eligible


@dataclass(frozen=True)
class CandidateResult:
    entry: Entry
    paired: PairedResult
    cases: int
    questions: int
    attempts: int
    without_result: int
    subject: Savings
    total: Savings
    cache_neutral: Savings
    savings_interval: SavingsInterval | None
    verdict: Verdict


@dataclass(frozen=True)
class RunDifferences:
    run: Run
    differences: list[Difference]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.pk,
            "run_name": self.run.name,
            "differences": [d.as_dict() for d in self.differences],
        }


@dataclass(frozen=True)
class Comparison:
    baseline_run: Run
    base: Entry
    choice: BaselineChoice
    pool: list[PoolMember]
    alpha: float
    weights: dict[str, Fraction]  # over the benchmarks with questions
    split: str | None
    margins: set[Decimal | None]
    candidates: list[CandidateResult]
    refused: list[RunDifferences]
    execution_differences: list[RunDifferences]

    @property
    def ordered(self) -> list[CandidateResult]:
        """The candidates in the order every reader shows them (the API's ``comparisons``, the
        Compare page's cards, legend and charts): by their run's creation, run, target."""
        return sorted(
            self.candidates, key=lambda c: (c.entry.run.created_at, c.entry.run.pk, c.entry.slug)
        )

    @property
    def shared_margin(self) -> Decimal | None:
        """The non-inferiority margin every candidate shares; None when they hold none or
        differ (each comparison's own verdict names its margin)."""
        margins = self.margins
        return None if len(margins) != 1 or None in margins else next(iter(margins))

    def as_dict(self) -> dict[str, Any]:
        """The comparison as JSON: money and exact fractions are strings, unknown is None."""
        margin = self.shared_margin
        return {
            "baseline": self._baseline_dict(),
            "alpha": self.alpha,
            "family_size": len(self.candidates),
            "weights": {b: str(w) for b, w in self.weights.items()},
            "split": self.split,
            # Each comparison's own verdict names its margin; this is the one they share.
            "non_inferiority_margin": None if margin is None else float(margin),
            "comparisons": [self._candidate_dict(c) for c in self.ordered],
            "refused": [r.as_dict() for r in self.refused],
            # Compared runs may differ in how they were driven (concurrency, timeouts, a cost
            # cap), never in what they asked: each such difference is named here (R11.2).
            "execution_differences": [r.as_dict() for r in self.execution_differences],
            "statements": STATEMENTS,
            "model_requests": 0,
        }

    def _baseline_dict(self) -> dict[str, Any]:
        choice = self.choice
        return {
            "run": self.baseline_run.pk,
            "run_name": self.baseline_run.name,
            "target": choice.slug,
            "quality": float(choice.quality),
            "quality_exact": str(choice.quality),
            "provenance": self.base.provenance,
            "official": self.base.official,
            "subject_cost_usd": money_text(choice.subject_cost),
            "tied": list(choice.tied_slugs),
            "savings_known": choice.savings_known,
            "rule": BASELINE_RULE,
            "candidates": [
                {
                    "target": m.slug,
                    "kind": m.kind,
                    "quality": None if m.quality is None else float(m.quality),
                    "quality_exact": None if m.quality is None else str(m.quality),
                    "subject_cost_usd": money_text(m.subject_cost_usd),
                    "eligible": m.reason is None,
                    "reason": m.reason,
                }
                for m in self.pool
            ],
            "usage": _usage_block(self.base),
        }

    def _candidate_dict(self, c: CandidateResult) -> dict[str, Any]:
        e, paired, quality = c.entry, c.paired, c.entry.quality
        return {
            "run": e.run.pk,
            "run_name": e.run.name,
            "run_created_at": e.run.created_at.isoformat(),
            "target": e.slug,
            "kind": e.target.kind,
            "quality": None if quality is None else float(quality),
            "quality_exact": None if quality is None else str(quality),
            "provenance": e.provenance,
            # Each benchmark's own metric beside the baseline's, apart from the quality.
            "official": e.official,
            "cases": c.cases,
            "questions": c.questions,
            "attempts_per_question": c.attempts,
            "cases_without_result": c.without_result,
            "failed_or_missing_counted_wrong": True,
            "delta": float(paired.delta),
            "delta_exact": str(paired.delta),
            "micro_delta": float(paired.micro_delta),
            "micro_delta_exact": str(paired.micro_delta),
            **_intervals(paired, self.alpha),
            # THE verdict (compare.verdict): one word from the family-wise interval.
            **c.verdict.as_dict(),
            "improvement": paired.improvement,
            "family_improvement": paired.family_improvement,
            "not_an_improvement": paired.not_an_improvement_reason,
            # The regression named, not folded into "no improvement shown".
            "worse": paired.upper < 0,
            "non_inferiority": non_inferiority(paired, e.run, self.baseline_run),
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
                    "provenance": e.provenance.get(b.benchmark, UNKNOWN),
                }
                for b in paired.benchmarks
            ],
            "savings": {
                "subject_cost_pct": _pct(c.subject.pct),
                "subject_cost_unknown_reason": c.subject.unknown_reason,
                "total_spend_pct": _pct(c.total.pct),
                "total_spend_unknown_reason": c.total.unknown_reason,
                "cache_neutral_pct": _pct(c.cache_neutral.pct),
                "cache_neutral_unknown_reason": c.cache_neutral.unknown_reason,
                "cache_neutral_label": STATEMENTS["cache_neutral"],
                # Known savings that may still be wrong: a side's usage may be an estimate.
                "caution": savings_caution(self.base, e),
            },
            "savings_interval": _savings_interval(c.savings_interval),
            "usage": _usage_block(e),
        }


def _interval(lower: float, upper: float, half: float, alpha: float) -> dict[str, Any]:
    display_lower, display_upper = clipped_to_unit(lower, upper)
    return {
        "lower": lower,
        "upper": upper,
        "display_lower": display_lower,
        "display_upper": display_upper,
        "half_width": half,
        "alpha": alpha,
        "level": 1 - alpha,
    }


def _intervals(paired: PairedResult, alpha: float) -> dict[str, Any]:
    """The Hoeffding interval, its family-wise (Bonferroni) widening and the bootstrap."""
    boot = paired.bootstrap
    return {
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
        if boot is None
        else {
            "lower": boot.lower,
            "upper": boot.upper,
            "alpha": boot.alpha,
            "draws": boot.draws,
            "seed": boot.seed,
            "label": "diagnostic only",
        },
    }


def _savings_interval(interval: SavingsInterval | None) -> dict[str, Any] | None:
    if interval is None:
        return None
    return {
        "lower": interval.lower,
        "upper": interval.upper,
        "alpha": interval.alpha,
        "draws": interval.draws,
        "seed": interval.seed,
        "label": interval.label,
    }


def savings_caution(base: Entry, candidate: Entry) -> str | None:
    """Why a comparison's savings may be wrong though both costs are known (None when neither
    side carries a `usage_caution`): a side's known tokens and costs may be a LiteLLM gateway's
    own estimate (`runs.reporting.report_spend.usage_caution`, its words kept whole). Said on
    the card, in the JSON and in the headline; the savings stay as computed."""
    sides = [
        f"the {side}'s (run {e.run.pk} / {e.slug}) {e.target.usage_caution}"
        for side, e in (("baseline", base), ("candidate", candidate))
        if e.target.usage_caution
    ]
    if not sides:
        return None
    return "these savings may be wrong: " + "; and ".join(sides)


def _usage_block(e: Entry) -> dict[str, Any]:
    t, correction = e.target, e.report.usage_correction
    return {
        "subject_cost_usd": money_text(t.subject_cost_usd),
        "known_cost_usd": money_text(t.known_cost_usd),
        "total_spend_usd": money_text(t.total_spend_usd),
        "cache_neutral_cost_usd": money_text(t.cache_neutral_cost_usd),
        # Why tokens and cost are unknown when the server sent no usage while streaming.
        "usage_unknown_reason": t.usage_unknown_reason,
        # Why known tokens and cost may be a gateway's estimate (an unchecked LiteLLM answered).
        "usage_caution": t.usage_caution,
        "tokens": dict(t.tokens),
        "ttft_p50_ms": t.ttft_p50_ms,
        "latency_p50_ms": t.latency_p50_ms,
        "latency_p95_ms": t.latency_p95_ms,
        "request_seconds_sum": t.request_seconds_sum,
        "wall_seconds": e.report.run.wall_seconds,
        "usage_correction": None if correction is None else correction.to_doc(),
    }


def non_inferiority(paired: PairedResult, candidate: Run, baseline: Run) -> dict[str, Any]:
    """The non-inferiority test alone, on the terms fixed before the run (R5.5,
    docs/decisions.md "Pre-registered margins"): the margin frozen in the candidate run's
    manifest — the baseline run's must agree or hold none — and holdout cases in both runs
    (:func:`compare.verdict.margin_terms`). With several candidates the family-wise bound
    decides, because the claim is made about whichever candidate is picked. The answer names
    the margin, its run and the interval used. The comparison's one word is its ``verdict``
    (:func:`compare.verdict.comparison_verdict`), which folds this test in."""
    if paired.family_size > 1:
        lower, upper, level = paired.family_lower, paired.family_upper, 1 - paired.family_alpha
        method = f"weighted Hoeffding, Bonferroni over {paired.family_size}"
    else:
        lower, upper, level = paired.lower, paired.upper, 1 - paired.alpha
        method = "weighted Hoeffding"
    margin = frozen_margin(candidate)
    applicable, why_not = margin_terms(candidate, baseline)
    used = f"the {level_text(level)} {method} interval {interval_shown(lower, upper)}"
    low = lower_shown(lower, upper)
    out: dict[str, Any] = {
        "margin": None if margin is None else float(margin),
        "margin_exact": None if margin is None else str(margin),
        "margin_run": candidate.pk,
        "margin_plan_sha256": candidate.plan_sha256,
        "lower_bound": lower,
        "interval": {"lower": lower, "upper": upper, "level": level, "method": method},
        "split": run_split(candidate),
    }
    source = f"margin {margin} frozen in run {candidate.pk}'s plan"
    if applicable is None:
        reason = str(why_not)
    elif lower > -applicable:
        reason = f"lower bound {low} of {used} is above −{margin} ({source})"
        return {**out, "verdict": "non-inferior", "reason": reason}
    else:
        reason = f"lower bound {low} of {used} is not above −{margin} ({source})"
    return {**out, "verdict": "not shown", "reason": reason}
