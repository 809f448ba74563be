"""The Compare page's presenters (SPEC R11, issue 9; issue 36 item 3): the baseline box, each
result card and the legend, worded from the typed comparison (`compare.results.Comparison`:
exact fractions, Decimal money, None for unknown) through the shared presenters
(srbench/presenters.py, srbench/money.py), so "unknown" is decided in one place and is never
rendered as 0. The templates read only what these return.

The API's JSON (`Comparison.as_dict`) is the other edge of the same typed result;
tests/compare/test_page_matches_api.py holds the page to it, number by number.
"""

from __future__ import annotations

from typing import Any

from django.utils.safestring import SafeString

from compare.charts import ChartPoint
from compare.results import (
    BASELINE_RULE,
    CandidateResult,
    Comparison,
    Entry,
    RunDifferences,
    non_inferiority,
    savings_caution,
)
from compare.verdict import interval_shown
from datasets.provenance import UNKNOWN as PROVENANCE_UNKNOWN
from datasets.provenance import provenance_summary
from runs.reporting.official_metrics import METRICS as OFFICIAL_METRICS
from runs.reporting.official_metrics import metric_value_text
from srbench.figures_text import level_text, signed_interval_text
from srbench.money import percent_text
from srbench.presenters import (
    UNKNOWN_HTML,
    known_or_unknown,
    percent_html,
    signed_text,
    unknown_html,
    usd_html,
    verdict_class,
)
from srbench.savings_bootstrap import SavingsInterval
from srbench.stats import PairedResult, clipped_to_unit

UNKNOWN = UNKNOWN_HTML  # the one marker (srbench/presenters.py)


# --- formatting: the shared presenters (srbench/presenters.py, issue 36 item 3) ---------------


def fmt_savings_interval(interval: SavingsInterval | None) -> str | SafeString:
    """Savings % bounds; None is unknown (some case cost unknown, or the savings are)."""
    if interval is None:
        return UNKNOWN
    return f"[{percent_text(interval.lower)}, {percent_text(interval.upper)}]"


def fmt_int(value: int | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:,}")


def fmt_ms(value: float | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:,.0f} ms")


def fmt_seconds(value: float | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:,.1f} s")


def fmt_quality(value: Any) -> str | SafeString:
    """A weighted quality (an exact fraction or a float) to four places, or unknown."""
    return known_or_unknown(value, None if value is None else f"{float(value):.4f}")


# --- the baseline box ----------------------------------------------------------------------


def baseline_box(comparison: Comparison) -> dict[str, Any]:
    """The baseline summary above the cards: which run and target, its quality (exact beside
    the rounded), cost, data, and the rule and facts the comparison shares."""
    choice, base = comparison.choice, comparison.base
    margin = comparison.shared_margin
    return {
        "run": comparison.baseline_run.pk,
        "target": choice.slug,
        "quality": fmt_quality(choice.quality),
        "quality_exact": str(choice.quality),
        "cost": usd_html(choice.subject_cost),
        "data": provenance_summary(base.provenance),
        "usage_unknown_reason": base.target.usage_unknown_reason,
        "usage_caution": base.target.usage_caution,
        "tied": list(choice.tied_slugs),
        "savings_known": choice.savings_known,
        "rule": BASELINE_RULE,
        "split": comparison.split,
        "margin": None if margin is None else float(margin),
        "family_size": len(comparison.candidates),
        "model_requests": 0,  # a comparison reads the ledger only (R11)
    }


def differences_rows(rows: list[RunDifferences]) -> list[dict[str, Any]]:
    """Runs left out (refused) or driven differently, each with its differences in words."""
    return [
        {"run": r.run.pk, "run_name": r.run.name, "texts": [d.text for d in r.differences]}
        for r in rows
    ]


# --- result cards ----------------------------------------------------------------------------


def _usage_rows(base: Entry, cand: Entry) -> list[tuple[str, Any, Any]]:
    rows: list[tuple[str, Any, Any]] = []
    for bucket, label in (
        ("input", "Uncached input tokens"),
        ("cached_input", "Cache-read input tokens"),
        ("cache_write", "Cache-write input tokens"),
        ("output", "Output tokens"),
    ):
        rows.append(
            (
                label,
                fmt_int(base.target.tokens.get(bucket)),
                fmt_int(cand.target.tokens.get(bucket)),
            )
        )
    b, c = base.target, cand.target
    rows += [
        ("TTFT p50", fmt_ms(b.ttft_p50_ms), fmt_ms(c.ttft_p50_ms)),
        ("Latency p50", fmt_ms(b.latency_p50_ms), fmt_ms(c.latency_p50_ms)),
        ("Latency p95", fmt_ms(b.latency_p95_ms), fmt_ms(c.latency_p95_ms)),
        (
            "Sum of request durations",
            fmt_seconds(b.request_seconds_sum),
            fmt_seconds(c.request_seconds_sum),
        ),
        (
            "Wall time of the run",
            fmt_seconds(base.report.run.wall_seconds),
            fmt_seconds(cand.report.run.wall_seconds),
        ),
    ]
    return rows


def fmt_official(m: dict[str, Any] | None) -> str | SafeString:
    """An official metric's value [interval], n; unknown (with why) is never 0; a side
    without that benchmark's official scorer says so."""
    if m is None:
        return unknown_html("not scored")
    if m["value"] is None:
        return unknown_html(reason=m["unknown_reason"])
    return metric_value_text(m)


def official_rows(base: Entry, cand: Entry) -> list[dict[str, Any]]:
    """Each benchmark's official metric, baseline beside candidate (issue 35 item 4): the
    official summaries' own values, n and intervals — no new statistic, no difference."""
    by = [{(m["benchmark"], m["metric"]): m for m in side.official} for side in (base, cand)]
    rows = []
    for spec in OFFICIAL_METRICS:
        key = (spec.benchmark, spec.key)
        b, c = by[0].get(key), by[1].get(key)
        if b is None and c is None:
            continue
        rows.append(
            {
                "benchmark": spec.benchmark,
                "metric": spec.key,
                "name": spec.name,
                "scorer": (b or c or {}).get("scorer"),
                "baseline": fmt_official(b),
                "candidate": fmt_official(c),
            }
        )
    return rows


def _costs(base: Entry, c: CandidateResult) -> list[tuple[str, Any, Any, Any, str | None]]:
    e = c.entry
    return [
        (
            "Subject cost (measured, four token classes)",
            usd_html(base.subject_cost),
            usd_html(e.subject_cost),
            percent_html(c.subject.pct),
            c.subject.unknown_reason,
        ),
        (
            "Total spend (subject + judge + simulator)",
            usd_html(base.total_spend),
            usd_html(e.total_spend),
            percent_html(c.total.pct),
            c.total.unknown_reason,
        ),
        (
            "Cache-neutral cost (counterfactual)",
            usd_html(base.cache_neutral_cost),
            usd_html(e.cache_neutral_cost),
            percent_html(c.cache_neutral.pct),
            c.cache_neutral.unknown_reason,
        ),
    ]


def _quality_figures(p: PairedResult) -> dict[str, Any]:
    """The card's quality table: Δ, its intervals (the family-wise one when several candidates
    are compared), the bootstrap diagnostic."""
    boot = p.bootstrap
    return {
        "delta": signed_text(float(p.delta)),
        "delta_exact": str(p.delta),
        "micro_delta": signed_text(float(p.micro_delta)),
        "interval": interval_shown(p.lower, p.upper),
        "interval_level": f"{1 - p.alpha:.0%}",
        "family_interval": interval_shown(p.family_lower, p.family_upper)
        if p.family_size > 1
        else None,
        "family_size": p.family_size,
        "family_level": level_text(1 - p.family_alpha),
        "bootstrap": None if boot is None else signed_interval_text(boot.lower, boot.upper),
        "wins": p.wins,
        "losses": p.losses,
        "ties": p.ties,
    }


def _identity(c: CandidateResult) -> dict[str, Any]:
    """Which run and target a card or legend row is, and its verdict (compare.verdict, R11.5):
    its label (better, non-inferior with its margin, inconclusive, worse) and its reason."""
    e, v = c.entry, c.verdict
    return {
        "run": e.run.pk,
        "run_name": e.run.name,
        "target": e.slug,
        "verdict_word": v.word,
        "verdict_label": v.label,
        "verdict_reason": v.reason,
        "verdict_class": verdict_class(v.word),
    }


def card(index: int, c: CandidateResult, comparison: Comparison) -> dict[str, Any]:
    """One candidate's result card, numbered ``index + 1`` in the comparison's order."""
    e, base = c.entry, comparison.base
    return {
        "n": index + 1,
        **_identity(c),
        "kind": e.target.kind,
        "created": e.run.created_at.isoformat()[:16],
        "quality": fmt_quality(e.quality),
        # Beside the quality: where the benchmarks' questions came from (issue 35).
        "data": provenance_summary(e.provenance),
        "questions": c.questions,
        "attempts": c.attempts,
        "cases": c.cases,
        "without_result": c.without_result,
        **_quality_figures(c.paired),
        "non_inferiority": non_inferiority(c.paired, e.run, comparison.baseline_run),
        "savings_interval": fmt_savings_interval(c.savings_interval),
        "savings_interval_note": None
        if c.savings_interval is None
        else f"{c.savings_interval.label}, {c.savings_interval.draws} draws",
        "costs": _costs(base, c),
        "savings_caution": savings_caution(base, e),
        "usage": _usage_rows(base, e),
        "usage_unknown_reason": e.target.usage_unknown_reason,
        "official": official_rows(base, e),
        "benchmarks": [
            {
                "benchmark": b.benchmark,
                "n": b.n,
                "weight": str(b.weight),
                # Worded as the card's weighted Δ (one benchmark: the same number, the same text).
                "mean_difference": signed_text(float(b.mean_difference)),
                "wins": b.wins,
                "losses": b.losses,
                "ties": b.ties,
                "provenance": e.provenance.get(b.benchmark, PROVENANCE_UNKNOWN),
            }
            for b in c.paired.benchmarks
        ],
    }


def legend_row(i: int, c: CandidateResult, comparison: Comparison) -> dict[str, Any]:
    """One comparison in the legend under the charts: its number, Δ, its interval and the
    family-wise one its verdict reads, savings (and whether they may be wrong,
    `savings_caution`) and verdict."""
    p = c.paired
    return {
        "n": i + 1,
        **_identity(c),
        "delta": signed_text(float(p.delta)),
        "interval": interval_shown(p.lower, p.upper),
        # The interval the verdict reads (compare.verdict), beside the 95% one (as the CLI).
        "family": interval_shown(p.family_lower, p.family_upper),
        "savings": percent_html(c.subject.pct),
        "savings_caution": savings_caution(comparison.base, c.entry),
        "neutral": percent_html(c.cache_neutral.pct),
    }


def chart_points(comparison: Comparison) -> list[ChartPoint]:
    """Every candidate, in the comparison's order, as the charts (compare.charts) place it."""
    return [
        ChartPoint(
            run=c.entry.run.pk,
            target=c.entry.slug,
            delta=float(c.paired.delta),
            lower=c.paired.display_lower,
            upper=c.paired.display_upper,
            family_lower=family[0],
            family_upper=family[1],
            savings=c.subject.pct,
        )
        for c in comparison.ordered
        for family in [clipped_to_unit(c.paired.family_lower, c.paired.family_upper)]
    ]
