"""THE verdict of a comparison (issue 35, "a verdict vocabulary"; SPEC R5.5, R11.5).

Every candidate compared with the baseline gets exactly one word, decided here and nowhere
else, from the **family-wise** interval of its paired quality difference Δ (the weighted
Hoeffding interval at α/k, Bonferroni over the k candidates compared against the same
baseline; with k = 1 it is the Hoeffding interval itself) — `srbench.stats.paired_difference`
computes it, nothing here computes a statistic:

1. ``better``        the whole interval lies above 0 (lower > 0);
2. ``non_inferior``  the lower bound is above −m, m the non-inferiority margin frozen in the
                     candidate run's plan before the run (R5.5), on holdout cases in both runs,
                     the baseline run's frozen margin agreeing or absent;
3. ``worse``         the whole interval lies below 0 (upper < 0), and stays below 0 were
                     every candidate case that never ended (a run cancelled or stopped before
                     it: no outcome, counted wrong in Δ) right instead (upper + u < 0, u the
                     rise in Δ that would bring; `Unfinished`);
4. ``inconclusive``  otherwise.

Why only ``worse`` looks at unfinished cases: they are counted wrong in Δ, which can only push
the candidate down, so ``better`` and ``non_inferior`` already hold whatever those cases would
have been; ``worse`` could be made by cases the candidate was never asked. The baseline has an
outcome for every case (its pool's rule), so its side cannot move. A failed cell has an
outcome — its target was asked and failed — and stays wrong.

The checks run in this order, and every inequality is strict: a bound exactly at 0 or exactly
at −m decides nothing. A candidate whose whole interval lies inside (−m, 0) is non-inferior —
that is what a pre-registered margin means — and its reason says that it is measurably worse
by less than the margin. There is no default margin: a margin chosen after the results are
known proves nothing (R5.5), so without a frozen one the rule never says non-inferior, and the
reason says why (no margin, margins disagree, or the cases are not the holdout split).

The page, the API (`verdict`), the CLI and the exports all print :class:`Verdict` as built by
:func:`verdict_decide`; docs/statistics.md "The verdict" states the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from runs.ledger.selectors import manifest_without_cases
from runs.models import Run
from srbench.figures_text import level_text, signed_interval_text
from srbench.stats import PairedResult, clipped_to_unit

VerdictWord = Literal["better", "non_inferior", "inconclusive", "worse"]
VERDICTS: tuple[VerdictWord, ...] = ("better", "non_inferior", "inconclusive", "worse")
VERDICT_HELP = {
    "better": "the whole family-wise interval of Δ lies above 0",
    "non_inferior": (
        "the family-wise lower bound of Δ is above −margin (the margin frozen in the plan "
        "before the run, holdout cases on both sides)"
    ),
    "inconclusive": "neither better, nor non-inferior, nor worse",
    "worse": (
        "the whole family-wise interval of Δ lies below 0, even were the candidate's cases "
        "that never ended right"
    ),
}
RULE = (
    "Verdict, from the family-wise interval of Δ (weighted Hoeffding, Bonferroni over the "
    "compared candidates): better when the whole interval lies above 0; otherwise "
    "non-inferior when its lower bound is above −margin, the margin frozen in the plan before "
    "the run, on holdout cases; otherwise worse when the whole interval lies below 0 even were "
    "the candidate's cases that never ended right; otherwise inconclusive."
)


CLIPPED_NOTE = "clipped to [−1, +1]"


def interval_shown(lower: float, upper: float, *, method: str = "") -> str:
    """THE words of an interval of Δ wherever one is quoted: the card's table and legend, the
    verdict's and the non-inferiority test's reasons. A difference of accuracies lies in
    [−1, 1], so the bounds are clipped to it (`srbench.stats.clipped_to_unit`) and say so when
    that changed them; ``method`` joins the same parenthesis. The rule itself decides on the
    bounds as computed (clipping cannot change a comparison with 0 or with −margin, m < 1)."""
    shown = clipped_to_unit(lower, upper)
    notes = ([CLIPPED_NOTE] if shown != (lower, upper) else []) + ([method] if method else [])
    text = signed_interval_text(*shown)
    return f"{text} ({'; '.join(notes)})" if notes else text


def lower_shown(lower: float, upper: float) -> str:
    """The lower bound of an interval of Δ as :func:`interval_shown` quotes it."""
    return f"{clipped_to_unit(lower, upper)[0]:+.4f}"


@dataclass(frozen=True)
class Unfinished:
    """A candidate's cases that never ended (no outcome: counted wrong in Δ), and how far Δ
    would rise were each of them right (`compare.services._unfinished`)."""

    cases: int = 0
    rise: Fraction = Fraction(0)


@dataclass(frozen=True)
class Verdict:
    word: VerdictWord
    reason: str
    margin: Decimal | None  # the margin the rule could apply; None when it could apply none
    lower: float
    upper: float
    level: float
    method: str

    @property
    def label(self) -> str:
        """The word for people: "Non-inferior (margin 0.05)" carries its margin."""
        if self.word == "non_inferior":
            return f"Non-inferior (margin {self.margin})"
        return self.word.capitalize()

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.word,
            "verdict_label": self.label,
            "verdict_reason": self.reason,
            "verdict_margin": None if self.margin is None else str(self.margin),
            "verdict_interval": {
                "lower": self.lower,
                "upper": self.upper,
                "level": self.level,
                "method": self.method,
            },
        }


def frozen_margin(run: Run) -> Decimal | None:
    """The non-inferiority margin frozen in a run's manifest before the run, or None."""
    raw = manifest_without_cases(run).get("non_inferiority_margin")
    return None if raw is None else Decimal(str(raw))


def run_split(run: Run) -> str | None:
    split: str | None = (
        manifest_without_cases(run).get("dataset", {}).get("split") or run.dataset.split
    )
    return split


def margin_terms(candidate: Run, baseline: Run) -> tuple[Decimal | None, str | None]:
    """The pre-registered margin that may decide non-inferiority, or (None, why not): the
    candidate run's frozen margin, the baseline run's agreeing or absent, holdout cases in
    both runs (R5.5, docs/decisions.md "Pre-registered margins")."""
    margin, baseline_margin = frozen_margin(candidate), frozen_margin(baseline)
    split, baseline_split = run_split(candidate), run_split(baseline)
    if margin is None:
        return (
            None,
            f"no non-inferiority margin was fixed in run {candidate.pk}'s plan before the run",
        )
    if baseline_margin is not None and baseline_margin != margin:
        return None, (
            f"the margins fixed before the runs disagree: {margin} in candidate run "
            f"{candidate.pk}, {baseline_margin} in baseline run {baseline.pk}"
        )
    if split != "holdout" or baseline_split != "holdout":
        shown = split if split != "holdout" else baseline_split
        return None, f"the cases are the {shown or 'unknown'} split; parity needs holdout cases"
    return margin, None


def verdict_decide(
    *,
    delta: Fraction | float,
    lower: float,
    upper: float,
    level: float,
    method: str,
    margin: Decimal | None,
    no_margin_reason: str | None,
    margin_source: str = "",
    single: tuple[float, float, float] | None = None,
    unfinished: Unfinished = Unfinished(),
) -> Verdict:
    """THE rule (module docstring): one word and its reason in words, from the family-wise
    interval [lower, upper] at ``level``. ``margin`` is the pre-registered margin the rule may
    apply (None, with ``no_margin_reason``, when non-inferiority cannot be claimed);
    ``single`` is the single-comparison interval (lower, upper, level), named in the reason
    when it alone would have cleared 0."""
    interval = (
        f"{level_text(level)} family-wise interval {interval_shown(lower, upper, method=method)}"
    )
    low = lower_shown(lower, upper)
    keep = (margin, lower, upper, level, method)
    if lower > 0:
        return Verdict("better", f"the whole {interval} lies above 0", *keep)
    source = f" ({margin_source})" if margin_source else ""
    if margin is not None and lower > -margin:
        reason = f"the lower bound {low} of the {interval} is above −{margin}{source}"
        if upper + float(unfinished.rise) < 0:
            reason += "; the whole interval lies below 0: measurably worse, by less than the margin"
        return Verdict("non_inferior", reason, *keep)
    if margin is not None:
        not_ni = f"non-inferiority not shown: the lower bound {low} is not above −{margin}{source}"
    else:
        not_ni = f"non-inferiority not shown — {no_margin_reason}"
    if upper < 0 and upper + float(unfinished.rise) < 0:
        return Verdict("worse", f"the whole {interval} lies below 0; {not_ni}", *keep)
    if upper < 0:
        return Verdict(
            "inconclusive",
            f"the whole {interval} lies below 0, but {unfinished.cases} of the candidate's "
            f"cases never ended (counted wrong); were they right, Δ would rise by "
            f"{float(unfinished.rise):.4f} and the interval would reach "
            f"{upper + float(unfinished.rise):+.4f}: worse is not shown; {not_ni}",
            *keep,
        )
    if delta > 0:
        reason = (
            f"the point estimate {float(delta):+.4f} is positive but the {interval} "
            "includes 0: not an improvement"
        )
    else:
        reason = f"the {interval} includes 0"
    if single is not None and (single[0] > 0 or single[1] < 0):
        side = "above" if single[0] > 0 else "below"
        reason += (
            f" (the single-comparison {level_text(single[2])} interval "
            f"{interval_shown(single[0], single[1])} lies {side} 0, but a claim about whichever "
            "of the compared candidates is picked needs the family-wise one)"
        )
    return Verdict("inconclusive", f"{reason}; {not_ni}", *keep)


def comparison_verdict(
    paired: PairedResult,
    candidate: Run,
    baseline: Run,
    *,
    unfinished: Unfinished = Unfinished(),
) -> Verdict:
    """The verdict of one candidate run's target against the baseline, from the family-wise
    interval the paired difference already carries and the candidate's unfinished cases."""
    margin, why_not = margin_terms(candidate, baseline)
    return verdict_decide(
        delta=paired.delta,
        lower=paired.family_lower,
        upper=paired.family_upper,
        level=1 - paired.family_alpha,
        method=(
            f"weighted Hoeffding, Bonferroni over {paired.family_size} "
            f"candidate{'s' if paired.family_size > 1 else ''}"
        ),
        margin=margin,
        no_margin_reason=why_not,
        margin_source=f"the margin frozen in run {candidate.pk}'s plan",
        single=(paired.lower, paired.upper, 1 - paired.alpha) if paired.family_size > 1 else None,
        unfinished=unfinished,
    )
